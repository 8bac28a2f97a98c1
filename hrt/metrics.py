"""Prometheus metrics, one registry per service instance (tests build many)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0)
COUNT_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)
THRESHOLD_BUCKETS = (0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.stage_seconds = Histogram(
            "hrt_stage_seconds",
            "Latency of one pipeline stage",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.retrieve_seconds = Histogram(
            "hrt_retrieve_seconds",
            "End-to-end latency of one retrieval",
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "hrt_requests", "HTTP requests by route and status", ["route", "status"], registry=self.registry
        )
        self.candidates = Histogram(
            "hrt_candidates",
            "Candidates per retrieval, by stage",
            ["stage"],
            buckets=COUNT_BUCKETS,
            registry=self.registry,
        )
        self.unmatched_phrases = Counter(
            "hrt_unmatched_key_phrases", "Key phrases that grounded to nothing", registry=self.registry
        )
        self.phrases = Counter("hrt_key_phrases", "Key phrases processed", registry=self.registry)
        self.threshold = Histogram(
            "hrt_adaptive_threshold",
            "Final adaptive similarity threshold per phrase",
            buckets=THRESHOLD_BUCKETS,
            registry=self.registry,
        )
        self.degraded = Counter(
            "hrt_degraded_responses", "Responses marked degraded, by stage", ["stage"], registry=self.registry
        )
        self._key_and_write_metrics()
        self._outbox_metrics()
        self._store_metrics()

    def _key_and_write_metrics(self) -> None:
        # the key's name as a label: bounded by the number of keys (a refused key has no name)
        self.key_requests = Counter(
            "hrt_key_requests", "HTTP requests by API key id and status", ["key", "status"], registry=self.registry
        )
        self.auth_refusals = Counter(
            "hrt_auth_refusals",
            "Requests refused by authentication, scope, user or limits, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.ingested = Counter(
            "hrt_ingested_records", "Records written by ingest, by kind", ["kind"], registry=self.registry
        )

    def _outbox_metrics(self) -> None:
        # the outbox (services deployment), per projection target: read from PostgreSQL by each
        # replica's projector loop, so every replica reports the shared outbox
        self.outbox_lag = Gauge(
            "hrt_outbox_lag_events", "Outbox events not yet delivered, by target", ["target"], registry=self.registry
        )
        self.outbox_oldest = Gauge(
            "hrt_outbox_oldest_pending_seconds",
            "Age of the oldest outbox event not yet delivered, by target (0: none)",
            ["target"],
            registry=self.registry,
        )
        self.outbox_dead = Gauge(
            "hrt_outbox_dead_events",
            "Outbox events set aside as dead (failed for good), by target; `hrt doctor --repair` mends",
            ["target"],
            registry=self.registry,
        )
        self.projector_errors = Counter(
            "hrt_projector_errors",
            "Failures of the projector: a delivery refused by a target, or a loop iteration that raised",
            ["target"],
            registry=self.registry,
        )

    def _store_metrics(self) -> None:
        # per-store circuits (hrt/stores/circuit.py): open while a store is known down
        self.circuit_open = Gauge(
            "hrt_store_circuit_open",
            "1 while a store's circuit is open (calls refused at once, probed in the background), by store",
            ["store"],
            registry=self.registry,
        )
        self.circuit_refused = Counter(
            "hrt_store_circuit_refusals",
            "Calls refused at once because the store's circuit was open, by store",
            ["store"],
            registry=self.registry,
        )
        self.store_fallbacks = Counter(
            "hrt_store_fallbacks",
            "Reads answered from the record store because a projection was down, by store and read",
            ["store", "read"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


def own_series(text: bytes, key_id: str) -> bytes:
    """The Prometheus text as a key for some users sees it: its own key's series
    (``hrt_key_requests`` for ``key_id``) and nothing else. The server-wide series (requests by
    route, latencies, ingests, the outbox, the stores) sum every tenant's traffic, so they are
    for the operator's keys (every user) only."""
    own = f'key="{key_id}"'.encode()
    return b"".join(
        line
        for line in text.splitlines(keepends=True)
        if line.startswith((b"# HELP hrt_key_requests ", b"# TYPE hrt_key_requests "))
        or (line.startswith(b"hrt_key_requests_") and own in line)
    )
