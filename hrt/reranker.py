"""The Reranker port. HRT ships a no-op reranker; the Qwen3-Reranker adapter (llama.cpp server)
implements the same port."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


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
