"""The rerankers' LRU of scores and the lookup every adapter behind :class:`hrt.reranker.Reranker`
makes through it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence

from hrt.rerankers.metrics import RerankMetrics


class ScoreCache:
    """LRU of ``(query, document) -> score``; size 0 disables it."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[tuple[str, str], float] = OrderedDict()

    def get(self, key: tuple[str, str]) -> float | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: tuple[str, str], value: float) -> None:
        if self._size <= 0:
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self._size:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    async def scores(
        self,
        query: str,
        documents: Sequence[str],
        fetch: Callable[[str, Sequence[str]], Awaitable[Mapping[str, float]]],
        metrics: RerankMetrics | None,
    ) -> list[float]:
        """The scores of ``documents`` in input order: the cached ones from here, the others from one
        ``fetch(query, distinct uncached documents)`` (which caches what it scores; it raises when the
        call fails). Counts candidates and cache hits, and a call answered from the cache alone."""
        if metrics is not None:
            metrics.candidates.observe(len(documents))
        cached = [self.get((query, d)) for d in documents]
        todo = list(dict.fromkeys(d for d, s in zip(documents, cached, strict=True) if s is None))
        if metrics is not None:
            metrics.cache.labels(result="hit").inc(len(documents) - sum(s is None for s in cached))
            metrics.cache.labels(result="miss").inc(sum(s is None for s in cached))
        fresh: Mapping[str, float] = {}
        if todo:
            fresh = await fetch(query, todo)
        elif metrics is not None:
            metrics.calls.labels(status="ok").inc()
        return [s if s is not None else fresh[d] for d, s in zip(documents, cached, strict=True)]
