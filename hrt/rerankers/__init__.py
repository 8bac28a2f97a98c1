"""Reranker adapters behind :class:`hrt.reranker.Reranker`; the no-op one lives in :mod:`hrt.reranker`."""

from hrt.breaker import CircuitBreaker
from hrt.rerankers.metrics import RerankMetrics
from hrt.rerankers.onnx_cross import OnnxCrossEncoder
from hrt.rerankers.qwen3 import DEFAULT_INSTRUCTION, Qwen3Reranker, RerankPrompt, load_prompt

__all__ = [
    "DEFAULT_INSTRUCTION",
    "CircuitBreaker",
    "OnnxCrossEncoder",
    "Qwen3Reranker",
    "RerankMetrics",
    "RerankPrompt",
    "load_prompt",
]
