"""The models a service runs, loaded as the settings name them: the embedder (sentence-transformers
or ONNX) and the reranker (none, the ONNX cross-encoder, or the Qwen3 reranker over llama.cpp),
with the compute threads they may use."""

from __future__ import annotations

import logging

from hrt.config import Settings
from hrt.embedder import CachedEmbedder, Embedder, SentenceTransformerEmbedder
from hrt.embedding_models import prebuilt
from hrt.errors import StoreError
from hrt.metrics import Metrics
from hrt.reranker import NoopReranker, Reranker

log = logging.getLogger(__name__)


def load_reranker(settings: Settings, metrics: Metrics) -> Reranker:
    """The one reranker the settings name: the ONNX cross-encoder when ``HRT_RERANKER_ONNX_MODEL`` is
    set, the Qwen3 reranker over llama.cpp when ``HRT_RERANKER_BASE_URL`` is (the settings refuse
    both), else the no-op one."""
    if settings.reranker_onnx_model is not None:
        from hrt.rerankers import OnnxCrossEncoder, RerankMetrics

        return OnnxCrossEncoder(
            settings.reranker_onnx_model,
            tokenizer=settings.reranker_onnx_tokenizer,
            max_length=settings.reranker_onnx_max_length,
            threads=settings.reranker_onnx_threads,
            metrics=RerankMetrics(metrics.registry),
        )
    if not settings.reranker_base_url:
        return NoopReranker()
    from hrt.rerankers import Qwen3Reranker, RerankMetrics

    return Qwen3Reranker(
        base_url=settings.reranker_base_url,
        api_key=settings.reranker_api_key.get_secret_value() if settings.reranker_api_key is not None else None,
        model=settings.reranker_model,
        instruction=settings.reranker_instruction,
        timeout_s=settings.reranker_timeout_s,
        max_concurrency=settings.reranker_max_concurrency,
        mode=settings.reranker_mode,
        top_logprobs=settings.reranker_top_logprobs,
        metrics=RerankMetrics(metrics.registry),
    )


def limit_compute_threads(threads: int) -> None:
    """Hold torch and the BLAS behind numpy to ``threads`` each (0: leave their defaults)."""
    if threads <= 0:
        return
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:  # pragma: no cover - torch comes with sentence-transformers
        pass
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads)
    except ImportError:  # pragma: no cover - optional
        log.info("threadpoolctl is not installed; BLAS threads left at their default")


def load_embedder(settings: Settings) -> Embedder:
    inner: Embedder
    if settings.embedding_backend == "onnx":
        from hrt.onnx_embedder import OnnxEmbedder

        # not limit_compute_threads, which imports torch: this backend never loads it. ONNX Runtime
        # gets its own threads (embedding_threads); numpy's BLAS is limited here.
        if settings.compute_threads > 0:
            try:
                from threadpoolctl import threadpool_limits

                threadpool_limits(limits=settings.compute_threads)
            except ImportError:  # pragma: no cover - optional
                log.info("threadpoolctl is not installed; BLAS threads left at their default")
        inner = OnnxEmbedder(
            settings.embedding_model,
            cache_dir=settings.cache_root() / "onnx",
            threads=settings.embedding_threads,
            batch_size=settings.embedding_batch_size,
            quantize=settings.embedding_quantize,
            models_root=settings.cache_root(),
            repository=settings.model_repository,
            write_nice=settings.embedding_write_nice,
        )
    else:
        if prebuilt(settings.embedding_model) is not None:
            raise StoreError(
                f"the embedding model {settings.embedding_model!r} is a prebuilt ONNX model: it runs on "
                "HRT_EMBEDDING_BACKEND=onnx"
            )
        limit_compute_threads(settings.compute_threads)
        inner = SentenceTransformerEmbedder(
            settings.embedding_model, device=settings.embedding_device, batch_size=settings.embedding_batch_size
        )
    return CachedEmbedder(inner, settings.embedding_cache_size)
