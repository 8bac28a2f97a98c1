"""The HybridRetrievalTool: the retrieval pipeline, one module per stage, composed here.

    intake -> grounding -> expansion -> validity -> scoring -> hydration -> rerank -> selection
    -> neighbours -> assembly

Each stage is ``async (RequestContext, Services) -> status`` (hrt/pipeline/context.py), provides
one value of its module's own type in the context, and is named once, in :data:`PIPELINE`: its
name keys its timing (``Server-Timing``), its metric and its span, and, unless the stage is
``reported_as`` another (validity as expansion, neighbours as assembly), its status in
``retrieval_metadata.stages``. A stage's ``prefetch`` is started by the runner right after it,
within its time: intake's starts grounding's search before the query vectors are in
(hrt/pipeline/grounding.py, ``start_search``); expansion's starts the vector reads scoring needs,
which run beside validity's graph read. Hydration reads the shortlist (per kind ``limit x
shortlist_factor``) before rerank and selection, because both need the entities' text; neighbours
reads what assembly shows beside the returned items, so that assembly reads no store.

:meth:`HybridRetrievalTool.run` is the one entry point: the response, each stage's seconds, and
with ``trace=True`` what the stages produced (:class:`~hrt.pipeline.trace.RequestTrace`). Adding a
stage is a function in its module and a line in :data:`PIPELINE`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from hrt.config import RetrievalConfig, Settings
from hrt.contract import AppliedConfig, AugmentedMemoryContext, RetrieveRequest
from hrt.embedder import Embedder
from hrt.errors import StoreUnavailable
from hrt.metrics import Metrics
from hrt.pipeline.assembly import assembly_stage
from hrt.pipeline.context import RequestContext, Stage, settle
from hrt.pipeline.expansion import expansion_stage, start_own_evidence
from hrt.pipeline.grounding import grounding_stage, rrf_score, start_search
from hrt.pipeline.hydration import hydration_stage
from hrt.pipeline.intake import applied_config, configure, intake_stage
from hrt.pipeline.neighbours import neighbours_stage
from hrt.pipeline.render import render_context, token_counter
from hrt.pipeline.rerank import rerank_stage
from hrt.pipeline.scoring import scoring_stage
from hrt.pipeline.selection import selection_stage
from hrt.pipeline.trace import RequestTrace
from hrt.pipeline.validity import validity_stage
from hrt.reranker import NoopReranker, Reranker
from hrt.stores.base import GraphStore, RecordStore, VectorIndex
from hrt.stores.fallback import STAGE, collecting

if TYPE_CHECKING:
    from hrt.tracing import Tracing

__all__ = [
    "PIPELINE",
    "REPORTED",
    "HybridRetrievalTool",
    "RequestTrace",
    "Retrieval",
    "effective_config",
    "render_context",
    "rrf_score",
    "token_counter",
    "utc_now",
]

# The stages in order. Their names are the keys of the timings run() returns (the Server-Timing
# header, which benchmarks parse), then "total"; those not reported_as another are the keys of
# retrieval_metadata.stages (REPORTED).
PIPELINE: tuple[Stage, ...] = (
    Stage("intake", intake_stage, prefetch=start_search),
    Stage("grounding", grounding_stage),
    Stage("expansion", expansion_stage, prefetch=start_own_evidence),
    Stage("validity", validity_stage, reported_as="expansion"),
    Stage("scoring", scoring_stage),
    Stage("hydration", hydration_stage),
    Stage("rerank", rerank_stage),
    Stage("selection", selection_stage),
    Stage("neighbours", neighbours_stage, reported_as="assembly"),
    Stage("assembly", assembly_stage),
)
REPORTED: tuple[str, ...] = tuple(stage.name for stage in PIPELINE if stage.reported_as is None)

# the stages that run for a user nothing was ever stored for (intake finds it out): the others are
# "skipped", and assembly answers the empty context (retrieval_metadata.user_known false)
UNKNOWN_USER_STAGES = frozenset({"intake", "assembly"})

MAX_CACHED_CONFIGS = 256


def utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def effective_config(base: RetrievalConfig, request: RetrieveRequest) -> RetrievalConfig:
    """The configuration ``request`` runs with on a server configured with ``base``: its preset,
    then its overrides (the aliases ``max_depth``, ``weights`` and ``weights_preset`` included)."""
    return configure(base, applied_config(request))


@dataclass(frozen=True, slots=True)
class Retrieval:
    """One retrieval: the response, the seconds each stage took (never in the response), and with
    ``trace`` asked, what the stages produced."""

    response: AugmentedMemoryContext
    timings: dict[str, float]
    trace: RequestTrace | None = None


class HybridRetrievalTool:
    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        vectors: VectorIndex,
        graph: GraphStore,
        records: RecordStore,
        reranker: Reranker | None = None,
        metrics: Metrics | None = None,
        deployment: str = "embedded",
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.embedder = embedder
        self.vectors = vectors
        self.graph = graph
        self.records = records
        self.reranker = reranker or NoopReranker()
        self.metrics = metrics or Metrics()
        self.deployment = deployment
        self.clock = clock
        self.reconfigure(settings)
        # OpenTelemetry (hrt/tracing.py), None unless the OTEL_* variables turn it on: then
        # trace_stores() has wrapped the ports, and each request and stage is a span
        self.tracing: Tracing | None = None

    def trace_stores(self, tracing: Tracing) -> None:
        """Trace every request from now on: a span per request, per stage and per store call."""
        self.tracing = tracing
        self.vectors = tracing.traced(self.vectors, "vectors")
        self.graph = tracing.traced(self.graph, "graph")
        self.records = tracing.traced(self.records, "records")

    def reconfigure(self, settings: Settings) -> None:
        """Run every later request with ``settings`` (the server's configuration)."""
        self.settings = settings
        self.config = settings.retrieval()
        self._config_hash = self.config.fingerprint()
        # (preset, overrides) -> the effective config and its hash; bounded by what requests name
        self._configs: dict[str, tuple[RetrievalConfig, str]] = {}

    @contextmanager
    def _stage(self, name: str, timings: dict[str, float]) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            timings[name] = elapsed
            self.metrics.stage_seconds.labels(stage=name).observe(elapsed)

    async def _run_stage(self, stage: Stage, ctx: RequestContext) -> str:
        if not (ctx.user_known or stage.name in UNKNOWN_USER_STAGES):
            return "skipped"  # nothing stored for the user: nothing to search, walk, score or read
        if self.tracing is None:
            return await self._run_with_prefetch(stage, ctx)
        with self.tracing.span(f"hrt.stage {stage.name}", {"hrt.stage": stage.name}) as span:
            status = await self._run_with_prefetch(stage, ctx)
            span.set_attributes({"hrt.stage.status": status, **stage_counts(ctx, stage.name)})
            return status

    async def _run_with_prefetch(self, stage: Stage, ctx: RequestContext) -> str:
        status = await stage.run(ctx, self)
        if stage.prefetch is not None:
            await stage.prefetch(ctx, self)
        return status

    def config_for(self, request: RetrieveRequest) -> tuple[RetrievalConfig, str, AppliedConfig | None]:
        """The configuration one request runs with (hrt.pipeline.intake.configure: the server's,
        then the request's preset, then its overrides), its ``config_hash``, and what to echo as
        ``retrieval_metadata.config``: the preset and overrides of a request that names ``preset``
        or ``config`` (None otherwise: a request that uses only the ``max_depth``, ``weights`` or
        ``weights_preset`` aliases gets the response it always got, its hash that of the
        configuration it ran). Built once per distinct preset and overrides."""
        applied = applied_config(request)
        if applied is None:
            return self.config, self._config_hash, None
        echo = applied if request.preset is not None or request.config is not None else None
        key = applied.model_dump_json()
        known = self._configs.get(key)
        if known is None:
            cfg = configure(self.config, applied)
            known = (cfg, cfg.fingerprint())
            if len(self._configs) >= MAX_CACHED_CONFIGS:
                self._configs.clear()
            self._configs[key] = known
        return known[0], known[1], echo

    async def run(self, request: RetrieveRequest, trace: bool = False) -> Retrieval:
        """The response, the seconds each stage took and, with ``trace``, what the stages produced.

        The whole retrieval runs under ``request_timeout_s``: a store that hangs gives a clear
        ``StoreUnavailable`` (HTTP 503), never a request that waits forever."""
        budget = self.settings.request_timeout_s
        try:
            ctx, timings = await asyncio.wait_for(self._run(request), timeout=budget)
        except TimeoutError as exc:
            self.metrics.degraded.labels(stage="timeout").inc()
            msg = f"retrieval exceeded its {budget:g}s budget: a store is slow or down"
            raise StoreUnavailable(msg, public=msg) from exc
        return Retrieval(ctx.response, timings, RequestTrace.of(ctx) if trace else None)

    async def _run(self, request: RetrieveRequest) -> tuple[RequestContext, dict[str, float]]:
        if self.tracing is None:
            return await self._stages(request)
        from hrt.tracing import user_hash

        attributes = {"hrt.user.hash": user_hash(request.user_id), "hrt.deployment": self.deployment}
        with self.tracing.span("hrt.retrieve", attributes) as span:
            ctx, timings = await self._stages(request)
            response = ctx.response
            meta = response.retrieval_metadata
            span.set_attributes(
                {
                    "hrt.degraded": bool(meta.degraded),
                    "hrt.key_phrases": len(meta.key_phrases_processed),
                    "hrt.items": len(response.retrieved_memory_units)
                    + len(response.retrieved_concepts)
                    + len(response.retrieved_artifacts),
                }
            )
            return ctx, timings

    async def _stages(self, request: RetrieveRequest) -> tuple[RequestContext, dict[str, float]]:
        cfg, config_hash, applied = self.config_for(request)
        ctx = RequestContext(request, cfg, config_hash, applied, self.clock())
        timings: dict[str, float] = {}
        started = time.perf_counter()
        # reads a store's fallback answered (a store down: hrt/stores/fallback.py), for assembly
        try:
            with collecting() as ctx.outages:
                for stage in PIPELINE:
                    await self._timed_stage(stage, ctx, timings)
        except BaseException:
            await settle(*ctx.pending)  # what a prefetch started and no stage awaited
            raise
        total = time.perf_counter() - started
        timings["total"] = total
        self._observe(ctx, total)
        return ctx, timings

    async def _timed_stage(self, stage: Stage, ctx: RequestContext, timings: dict[str, float]) -> None:
        """``stage`` run and timed, the store reads it makes attributed to the stage it is reported as."""
        token = STAGE.set(stage.reported)
        try:
            with self._stage(stage.name, timings):
                status = await self._run_stage(stage, ctx)
        finally:
            STAGE.reset(token)
        if stage.reported_as is None:
            ctx.stages[stage.name] = status

    def _observe(self, ctx: RequestContext, total: float) -> None:
        m, grounding = self.metrics, ctx.grounded.grounding
        m.retrieve_seconds.observe(total)
        m.candidates.labels(stage="seeds").observe(len(grounding.seeds))
        m.candidates.labels(stage="expansion").observe(len(ctx.validity.candidates))
        m.candidates.labels(stage="scored").observe(len(ctx.scores.scored))
        m.phrases.inc(len(ctx.intake.phrases))
        m.unmatched_phrases.inc(len(grounding.unmatched))
        for p in grounding.phrases:
            m.threshold.observe(p.threshold)


def stage_counts(ctx: RequestContext, stage: str) -> dict[str, Any]:
    """What a stage's span counts once it ran (counts only: no phrase, id or text)."""
    if stage == "intake":
        return {"hrt.key_phrases": len(ctx.intake.phrases)}
    if stage == "grounding":
        return {"hrt.seeds": len(ctx.grounded.grounding.seeds), "hrt.unmatched": len(ctx.grounded.grounding.unmatched)}
    if stage == "expansion":
        return {"hrt.candidates": len(ctx.expanded.candidates)}
    if stage == "validity":
        return {"hrt.candidates": len(ctx.validity.candidates), "hrt.suppressed": sum(ctx.validity.suppressed.values())}
    if stage == "scoring":
        return {"hrt.scored": len(ctx.scores.scored)}
    if stage == "hydration":
        hydrated = ctx.hydrated
        return {"hrt.hydrated": len(hydrated.entities), "hrt.missing": sum(len(v) for v in hydrated.missing.values())}
    if stage == "selection":
        return {"hrt.selected": sum(len(v) for v in ctx.selection.selected.values())}
    return {}
