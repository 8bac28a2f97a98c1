"""The Reranker port. HRT ships a no-op reranker; the Qwen3-Reranker adapter (llama.cpp server) and
the ONNX cross-encoder (in process) implement the same port (:mod:`hrt.rerankers`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

# the adapters round their scores to this many decimals, so a score is the same wherever it was computed
SCORE_DECIMALS = 6


@runtime_checkable
class Reranker(Protocol):
    name: str

    async def score(self, query: str, documents: Sequence[str]) -> list[float] | None:
        """Relevance of each document to the query in [0, 1], in input order; None when this
        reranker does not score (the pipeline then keeps the scorer's order)."""
        ...

    async def aclose(self) -> None:
        """Release the reranker's connections (the service calls it once, on close)."""
        ...


class NoopReranker:
    name = "none"

    async def score(self, query: str, documents: Sequence[str]) -> list[float] | None:
        return None

    async def aclose(self) -> None:
        """Nothing to release."""
