"""Prometheus metrics of the remote reranker (``hrt_`` names).

Registered on the service's own :class:`prometheus_client.CollectorRegistry` (``hrt.metrics.Metrics.registry``),
so tests can build many. Exposed names:

- ``hrt_rerank_calls_total{status}``: ``score()`` calls; status is ``ok``, ``error`` (HTTP error or
  unparsable answer), ``unavailable`` (connection error, timeout) or ``circuit_open`` (refused
  without a request).
- ``hrt_rerank_candidates``: documents per call.
- ``hrt_rerank_latency_seconds``: wall time of one ``score()`` call that went to the server.
- ``hrt_rerank_server_errors_total{error_type}``: failed per-document requests; error_type is one of
  :data:`SERVER_ERROR_TYPES`.
- ``hrt_rerank_cache_total{result}``: per-document cache lookups, ``hit`` or ``miss``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

CALL_STATUSES = ("ok", "error", "unavailable", "circuit_open")
SERVER_ERROR_TYPES = (
    "timeout",  # connect, read, write or pool timeout
    "connection",  # refused, reset, closed mid-answer
    "http_status",  # a non-2xx answer
    "invalid_response",  # not JSON, or JSON of an unexpected shape
    "no_logprobs",  # a well-formed answer without top logprobs
    "no_yes_no",  # top logprobs without a yes or no token
    "other",
)
CANDIDATE_BUCKETS = (1, 5, 10, 20, 30, 50, 75, 100, 200)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.0, 10.0, 15.0, 30.0)


class RerankMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter("hrt_rerank_calls", "Reranker score() calls, by outcome", ["status"], registry=registry)
        self.candidates = Histogram(
            "hrt_rerank_candidates", "Documents per reranker call", buckets=CANDIDATE_BUCKETS, registry=registry
        )
        self.latency = Histogram(
            "hrt_rerank_latency_seconds",
            "Latency of one reranker call that reached the server",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.server_errors = Counter(
            "hrt_rerank_server_errors",
            "Failed per-document requests to the rerank server, by type",
            ["error_type"],
            registry=registry,
        )
        self.cache = Counter(
            "hrt_rerank_cache", "Per-document score cache lookups, hit or miss", ["result"], registry=registry
        )
        # children exist from the start, so dashboards see zeros rather than gaps
        for status in CALL_STATUSES:
            self.calls.labels(status=status)
        for error_type in SERVER_ERROR_TYPES:
            self.server_errors.labels(error_type=error_type)
        for result in ("hit", "miss"):
            self.cache.labels(result=result)
