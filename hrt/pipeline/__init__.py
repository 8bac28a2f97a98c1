"""The HybridRetrievalTool: eight stages, one module each, composed here.

    intake -> grounding -> expansion (+ validity) -> scoring -> shortlist + hydration -> rerank
    -> selection -> assembly

Hydration reads the shortlist (per kind ``limit x shortlist_factor``) in one batched read per kind
before rerank and selection, because both need the entities' text.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from hrt.config import RETRIEVAL_PRESETS, RetrievalConfig, Settings
from hrt.contract import AppliedConfig, AugmentedMemoryContext, RetrieveRequest
from hrt.embedder import Embedder
from hrt.errors import NotFound, StoreUnavailable
from hrt.metrics import Metrics
from hrt.pipeline.assembly import CONNECTED_CONCEPTS, assemble
from hrt.pipeline.expansion import own_similarities, passage_evidence, run_expansion
from hrt.pipeline.grounding import Grounding, run_grounding
from hrt.pipeline.hydration import run_hydration
from hrt.pipeline.intake import Intake, run_intake
from hrt.pipeline.render import render_context
from hrt.pipeline.rerank import run_rerank
from hrt.pipeline.scoring import Evidence, PreferenceBook, Scored, best_semantic, score_candidates
from hrt.pipeline.seeds import add_named_seeds, settle_named_seeds
from hrt.pipeline.selection import filter_candidates, select, shortlist
from hrt.pipeline.validity import current_neighbours, run_validity
from hrt.records import EdgeType, Kind, Preference, entity_body
from hrt.reranker import NoopReranker, Reranker
from hrt.stores.base import GraphCandidate, GraphNode, GraphStore, RecordStore, Vector, VectorIndex

MAX_CACHED_CONFIGS = 256


def utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


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
        # a hook that sees every request's scored candidates (the LoCoMo eval's candidate recall);
        # never part of the response
        self.trace: Callable[[Intake, list[Scored]], None] | None = None

    def reconfigure(self, settings: Settings) -> None:
        """Run every later request with ``settings`` (the server's configuration)."""
        self.settings = settings
        self.config = settings.retrieval()
        self._config_hash = self.config.fingerprint()
        # (preset, overrides) -> the effective config and its hash; bounded by what requests name
        self._configs: dict[str, tuple[RetrievalConfig, str]] = {}

    async def _evidence(
        self,
        intake: Intake,
        candidates: list[GraphCandidate],
        hits: Mapping[str, float],
        vectors: Vector,
        cfg: RetrievalConfig,
    ) -> tuple[dict[str, float], dict[str, float]]:
        """The vector-index reads scoring needs beyond the search hits, beside the validity read:
        the own cosines the reached-evidence rule needs, then (``passage_weight`` above 0) the
        memory units' passage evidence (hrt/pipeline/expansion.py). The passage pool is chosen
        among the candidates of the walk, before what was not valid is set aside."""
        if not intake.phrases:  # named seeds alone: no cosine to read (hrt/pipeline/seeds.py)
            return {}, {}
        passages = cfg.scoring.passage_weight > 0.0
        own, unit_own = await own_similarities(
            intake, candidates, hits, vectors, self.vectors, cfg.expansion.reached_evidence, units=passages
        )
        if not passages:
            return own, {}
        passage = await passage_evidence(
            intake, candidates, hits, own, unit_own, vectors, self.vectors, cfg.expansion, cfg.scoring.passage_pool
        )
        return own, passage

    @contextmanager
    def _stage(self, name: str, timings: dict[str, float]) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            timings[name] = elapsed
            self.metrics.stage_seconds.labels(stage=name).observe(elapsed)

    async def _neighbors(
        self, user_id: str, ids: list[str], outgoing: bool, limit: int, not_after: float, valid_at: float | None
    ) -> dict[str, list[GraphNode]]:
        """The ``MENTIONS`` neighbours (up to ``limit`` each) that assembly shows, as true at
        ``valid_at``; no read for no ids."""
        if not ids:
            return {}
        return await self.graph.neighbors(user_id, ids, EdgeType.MENTIONS, outgoing, limit, not_after, valid_at)

    def config_for(self, request: RetrieveRequest) -> tuple[RetrievalConfig, str, AppliedConfig | None]:
        """The configuration one request runs with: the server's, then the request's preset, then
        its overrides; with its ``config_hash`` and what to echo (None: the server's, unchanged)."""
        if request.preset is None and request.config is None:
            return self.config, self._config_hash, None
        given = request.config.given() if request.config is not None else {}
        applied = AppliedConfig(preset=request.preset, overrides=given)
        key = applied.model_dump_json()
        known = self._configs.get(key)
        if known is None:
            cfg = self.config.with_overrides(RETRIEVAL_PRESETS[request.preset or "balanced"]).with_overrides(given)
            known = (cfg, cfg.fingerprint())
            if len(self._configs) >= MAX_CACHED_CONFIGS:
                self._configs.clear()
            self._configs[key] = known
        return known[0], known[1], applied

    async def retrieve(self, request: RetrieveRequest) -> AugmentedMemoryContext:
        return (await self.run(request))[0]

    async def run(self, request: RetrieveRequest) -> tuple[AugmentedMemoryContext, dict[str, float]]:
        """The response and the seconds each stage took (timings never enter the response).

        The whole retrieval runs under ``request_timeout_s``: a store that hangs gives a clear
        ``StoreUnavailable`` (HTTP 503), never a request that waits forever."""
        budget = self.settings.request_timeout_s
        try:
            return await asyncio.wait_for(self._run(request), timeout=budget)
        except TimeoutError as exc:
            self.metrics.degraded.labels(stage="timeout").inc()
            msg = f"retrieval exceeded its {budget:g}s budget: a store is slow or down"
            raise StoreUnavailable(msg, public=msg) from exc

    async def _run(self, request: RetrieveRequest) -> tuple[AugmentedMemoryContext, dict[str, float]]:
        s = self.settings
        cfg, config_hash, applied = self.config_for(request)
        timings: dict[str, float] = {}
        started = time.perf_counter()
        stages: dict[str, str] = {}
        degraded: list[str] = []

        with self._stage("intake", timings):
            intake = run_intake(request, cfg, self.clock())
            # the embedding runs off the event loop (ONNX Runtime releases the GIL, so under
            # concurrent requests it overlaps with other requests' Python work on the second core),
            # and the record store's user check meanwhile
            embedding = asyncio.ensure_future(asyncio.to_thread(self.embedder.embed_queries, list(intake.phrases)))
            searching: asyncio.Future[tuple[Grounding, list[Preference]]] | None = None
            try:
                if not await self.records.user_exists(intake.user_id):
                    raise NotFound(f"unknown user_id {intake.user_id!r}: nothing was ingested for it", field="user_id")
                # grounding starts before the vectors are in: its lexical leg needs none (at 1M
                # documents that leg is most of the stage); the preferences that scoring needs
                # are read meanwhile
                searching = asyncio.ensure_future(
                    asyncio.gather(
                        run_grounding(intake, embedding, self.vectors, cfg.grounding),
                        self.records.preferences(intake.user_id),
                    )
                )
                await asyncio.shield(embedding)
            except BaseException:
                await _settle(embedding, searching)
                raise
        stages["intake"] = "ok"

        with self._stage("grounding", timings):
            try:
                grounding, preferences = await searching
            except BaseException:
                await _settle(searching)
                raise
            add_named_seeds(grounding, intake.seed_ids)
        stages["grounding"] = "ok"

        with self._stage("expansion", timings):
            candidates = await run_expansion(intake, grounding, self.graph, cfg.expansion)
            named = settle_named_seeds(grounding, intake.seed_ids, candidates)
            # what the request's filters exclude is never scored: the relevance gate measures
            # against the best candidate the request can get
            candidates = filter_candidates(candidates, intake.filters)
            # what was not true at valid_at is set aside (hrt/pipeline/validity.py), the read it
            # needs beside the own cosines': two round trips in flight at once
            validity, (own, passage) = await asyncio.gather(
                run_validity(intake, candidates, self.graph),
                self._evidence(intake, candidates, grounding.similarity, embedding.result(), cfg),
            )
            candidates = validity.candidates
        stages["expansion"] = "ok" if intake.depth > 0 else "skipped"

        with self._stage("scoring", timings):
            sc = cfg.scoring
            book = PreferenceBook.build(preferences, sc.neutral_preference)
            evidence = Evidence(
                rule=cfg.expansion.reached_evidence,
                own=own,
                hop_decay=cfg.expansion.hop_decay,
                windows=intake.windows,
                temporal=sc.temporal_match == "tier",
                gate=sc.relevance_gate,
                stale=validity.stale,
                passages=passage,
                passage_weight=sc.passage_weight,
                artifact_source=sc.artifact_evidence == "source",
            )
            scored = score_candidates(
                candidates,
                grounding.similarity,
                book,
                intake.weights,
                intake.as_of.timestamp(),
                sc.recency_half_life_days,
                evidence,
            )
            if self.trace is not None:
                self.trace(intake, scored)
            ac = cfg.assembly
            factor = max(ac.shortlist_factor, cfg.rerank.reranker_oversample) if intake.rerank else ac.shortlist_factor
            short = shortlist(scored, intake.limits, factor)
        stages["scoring"] = "ok"

        with self._stage("hydration", timings):
            entities, missing = await run_hydration(intake.user_id, short, self.records)
        stages["hydration"] = "ok"
        if missing:
            degraded.append("records missing for " + ", ".join(f"{len(v)} {k}" for k, v in sorted(missing.items())))

        with self._stage("rerank", timings):
            outcome = await run_rerank(
                intake,
                short,
                entities,
                self.reranker,
                cfg.rerank,
                budget_s=s.rerank_budget_s,
            )
        stages["rerank"] = outcome.status
        if outcome.status in ("degraded", "timeout") and outcome.reason:
            degraded.append(outcome.reason)
            self.metrics.degraded.labels(stage="rerank").inc()

        with self._stage("selection", timings):
            texts = {i: entity_body(e) for i, e in entities.items()}
            ranked = outcome.items
            if request.min_score is not None:  # seed 003's floor, on the final (reranked) score as shown
                floor, places = request.min_score, ac.score_decimals
                ranked = {k: [x for x in v if round(x.final, places) >= floor] for k, v in ranked.items()}
            selected, removed = select(ranked, texts, intake.limits, ac.dedup_jaccard)
        stages["selection"] = "ok"

        with self._stage("assembly", timings):
            not_after = intake.as_of.timestamp()
            mu_ids = [x.id for x in selected[Kind.MEMORY_UNIT]]
            concept_ids = [x.id for x in selected[Kind.CONCEPT]]
            # both reads at once: two round trips in flight, not one after the other. A concept's
            # related memory units are the selected ones that mention it, then its newest others
            # (assembly.related_memory_units): its newest related_items + len(mu_ids) suffice
            at = intake.validity_filter
            mu_concepts, concept_mus = await asyncio.gather(
                self._neighbors(intake.user_id, mu_ids, True, CONNECTED_CONCEPTS, not_after, at),
                self._neighbors(intake.user_id, concept_ids, False, ac.related_items + len(mu_ids), not_after, at),
            )
            concept_mus = await current_neighbours(intake, concept_mus, validity, self.graph)
            stages["assembly"] = "ok"
            response = assemble(
                intake=intake,
                grounding=grounding,
                n_candidates=len(scored),
                selected=selected,
                entities=entities,
                mu_concepts=mu_concepts,
                concept_mus=concept_mus,
                missing=missing,
                stages=stages,
                degraded_reasons=degraded,
                rerank_applied=outcome.applied,
                near_duplicates_removed=removed,
                cfg=ac,
                deployment=self.deployment,
                config_hash=config_hash,
                applied=applied,
                windows=intake.windows if sc.temporal_match == "tier" else (),
                gate=sc.relevance_gate,
                best=best_semantic(scored),
                evidence=evidence,
                validity=validity,
            )
            response.retrieval_metadata.seed_grounding = named
            if request.render is not None:
                response.retrieval_metadata.rendered = render_context(response, entities, request.render)

        total = time.perf_counter() - started
        timings["total"] = total
        m = self.metrics
        m.retrieve_seconds.observe(total)
        m.candidates.labels(stage="seeds").observe(len(grounding.seeds))
        m.candidates.labels(stage="expansion").observe(len(candidates))
        m.candidates.labels(stage="scored").observe(len(scored))
        m.phrases.inc(len(intake.phrases))
        m.unmatched_phrases.inc(len(grounding.unmatched))
        for p in grounding.phrases:
            m.threshold.observe(p.threshold)
        return response, timings


async def _settle(*pending: asyncio.Future[Any] | None) -> None:
    """Cancel what a failed request left running and wait for it, so nothing outlives the request
    and no exception goes unretrieved."""
    for future in pending:
        if future is not None and not future.done():
            future.cancel()
    for future in pending:
        if future is not None:
            with contextlib.suppress(BaseException):
                await future
