"""The HRT service: one object wiring settings, embedder, stores, projector, reranker and metrics,
under the use cases every door calls (:mod:`hrt.usecases`).

The stores come from the composition root (:func:`hrt.stores.factory.open_stores`) as ports; with
an outbox (PostgreSQL), the service runs the projector that delivers it to the graph store and the
vector index.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from hrt.config import Settings
from hrt.contract import AugmentedMemoryContext, RetrieveRequest
from hrt.embedder import Embedder
from hrt.errors import StateChanged, StoreError, StoreUnavailable
from hrt.extraction.conversation import (
    ExtractionOptions,
    LLMCall,
    LLMOutcome,
    Plan,
    adopted_terms,
    budgeted,
    forget_messages,
    on_loop,
    plan_messages,
)
from hrt.extraction.messages import ConversationRequest, ConversationResult
from hrt.ingest import Record, build_batch
from hrt.metrics import Metrics
from hrt.model_loading import limit_compute_threads as limit_compute_threads
from hrt.model_loading import load_embedder as load_embedder
from hrt.model_loading import load_reranker as load_reranker
from hrt.pipeline import HybridRetrievalTool, utc_now
from hrt.records import Deletion, Kind, check_id
from hrt.reranker import Reranker
from hrt.stores.base import (
    GraphStore,
    Outbox,
    RecordStore,
    StoreLifecycle,
    VectorIndex,
    VectorRewriter,
    WriteBatch,
    Writer,
    WriteResult,
)
from hrt.stores.factory import open_stores
from hrt.write_admission import ACTIVE_WINDOW_S as ACTIVE_WINDOW_S
from hrt.write_admission import WRITE_TIME_BURST_S as WRITE_TIME_BURST_S
from hrt.write_admission import WriteAdmission

if TYPE_CHECKING:
    from hrt.merge import MergeResult
    from hrt.projector import Projector

log = logging.getLogger(__name__)

T = TypeVar("T")

PORTS = ("records", "graph", "vectors")  # the order of Stores.parts


# a conversation write planned again at most this often when other writers of its user commit first
CONVERSATION_RETRIES = 5


class HRTService(WriteAdmission):
    def __init__(
        self,
        settings: Settings,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.clock = clock  # the time of writes (WriteBatch.written_at) and of reads "now"
        self.embedder = embedder or load_embedder(settings)
        self.metrics = Metrics()
        self._closers: list[Callable[[], object]] = []
        self._opened: list[StoreLifecycle] = []  # the stores whose closers are registered
        self._connected: list[StoreLifecycle] = []  # the stores whose open succeeded
        self._setup_task: asyncio.Task[None] | None = None  # sets up the stores down at start
        self.down: dict[str, str] = {}  # port (records, graph, vectors) -> store, down at start
        self.projector: Projector | None = None
        # what the last write's projection logged (a target's reason, or "busy"): an outage logs
        # its reason once, not once per write
        self._projection_note: str | None = None
        self._projector_task: asyncio.Task[None] | None = None
        # "off", or the background preload of `hrt serve`: "loading", "done", "failed"; /readyz
        # answers 503 while it loads, so a balancer sends traffic only to a warm server
        self.preload_state = "off"
        self._preloading = 0  # preloads still running
        self._preload_failed = False
        self._preload_lock = threading.Lock()
        self._warm_task: asyncio.Task[None] | None = None
        self._projector_stop = asyncio.Event()
        self._init_admission(settings)
        self.llm_extractor: LLMCall | None = self._own_llm_extractor()
        # before the stores open: a reranker that cannot load (HRT_RERANKER_ONNX_MODEL) leaves none open
        own_reranker = reranker or self._own_reranker()

        self.stores = open_stores(
            settings, dim=self.embedder.dim, model_id=self.embedder.model_id, metrics=self.metrics
        )
        self._closers.append(self.stores.close)
        if self.stores.outbox is not None:
            self.projector = self._own_projector(self.stores.outbox)
        self.tool = HybridRetrievalTool(
            settings,
            self.embedder,
            vectors=self.vectors,
            graph=self.graph,
            records=self.records,
            reranker=own_reranker,
            metrics=self.metrics,
            deployment=self.stores.deployment,
            clock=clock,
        )

    # the stores' ports, as the front doors and the commands reach them
    @property
    def records(self) -> RecordStore:
        return self.stores.records

    @property
    def graph(self) -> GraphStore:
        return self.stores.graph

    @property
    def vectors(self) -> VectorIndex:
        return self.stores.vectors

    @property
    def writer(self) -> Writer:
        return self.stores.writer

    def _own_projector(self, outbox: Outbox) -> Projector:
        """The projector delivering the outbox to the graph store and the vector index, woken when
        a store behind a circuit is back (it catches up from the outbox at once)."""
        from hrt.projector import Projector

        projector = Projector(
            outbox,
            self.graph,
            self.vectors,
            max_attempts=self.settings.projector_max_attempts,
            metrics=self.metrics,
        )
        for circuit in self.stores.circuits.values():
            circuit.on_close.append(projector.wake)
        return projector

    def _own_llm_extractor(self) -> LLMCall | None:
        """The optional LLM extractor (``HRT_EXTRACTOR_BASE_URL``) as the conversation planner
        calls it: its validated answer, or None when it failed (the rules alone; counted)."""
        from hrt.extraction.llm import ExtractionFailed, load_llm_extractor

        extractor = load_llm_extractor(self.settings, self.metrics)
        if extractor is None:
            return None
        self._closers.insert(0, extractor.close)

        async def call(speaker: str, text: str, context: Sequence[str]) -> LLMOutcome | None:
            try:
                found = await extractor.extract(speaker, text, context)
            except ExtractionFailed as exc:
                log.info("LLM extraction fell back to the rules: %s", exc.reason)
                return None
            return LLMOutcome(
                entities=[(e.name, e.type) for e in found.entities],
                relations=[(r.source, r.target, r.type) for r in found.relations],
                facts=list(found.facts),
            )

        return call

    def _own_reranker(self) -> Reranker:
        reranker = load_reranker(self.settings, self.metrics)
        self._closers.insert(0, reranker.aclose)
        return reranker

    # ---------------------------------------------------------------------------------------
    # lifecycle
    # ---------------------------------------------------------------------------------------

    async def start(self, *, background_projector: bool = False, partial: bool = False) -> HRTService:
        """Open pools and connections; with ``background_projector`` (``hrt serve``) also start
        the outbox projector loop, and start even while a store is down: what needs that store
        answers 503 (``/readyz`` says ``unavailable``) until it answers, then it is set up
        (connection, schema) in the background, without a restart. ``partial`` (``hrt doctor``,
        ``hrt project``): start while a store is down too, without setting it up later; what is
        down is in :attr:`down`."""
        down: list[StoreLifecycle] = []
        for part in self._parts():
            try:
                await self._open_part(part, keep_trying=background_projector)
            except StoreUnavailable as exc:
                if not (background_projector or partial):
                    raise
                log.warning("starting without %s: %s", exc.store or "a store", exc.message)
                down.append(part)
                self.down[self._port_name(part)] = exc.store or "a store"
        if down and background_projector:
            self._setup_task = asyncio.create_task(self._set_up_later(down))
        if background_projector:
            # the serving process holds an embedded file: a second server (or another process's
            # writes, which this one's caches would never see) is refused, naming this process
            self.stores.in_process.claim(f"hrt serve on {self.settings.host}:{self.settings.port}")
        if self.projector is not None and background_projector:
            self._projector_task = asyncio.create_task(self.projector.run(self._projector_stop))
        if background_projector and self.settings.preload_users > 0:
            # /readyz waits for the stores' query plans (Neo4j's, for every depth a request may
            # ask): planned after "ready", they would take Neo4j's CPU from the first traffic
            self._preloading += 1
            self._warm_task = asyncio.create_task(self._warm_queries())
            if self.stores.in_process.caches_in_process:
                # a daemon thread: it never holds up a shutdown (a million-vector HNSW build takes minutes)
                self._preloading += 1
                threading.Thread(target=self._preload, args=(self.settings.preload_users,), daemon=True).start()
            if self._preloading:
                self.preload_state = "loading"
        return self

    def _parts(self) -> tuple[StoreLifecycle, ...]:
        return self.stores.parts

    def _port_name(self, part: StoreLifecycle) -> str:
        return next(n for n, p in zip(PORTS, self.stores.parts, strict=True) if p is part)

    async def store_checks(self) -> dict[str, bool]:
        """Per port (records, graph, vectors): does the store answer now? Every store is asked at
        once, each within ``HRT_STORE_PROBE_TIMEOUT_S`` (a store behind a circuit through it: a
        refusal opens it, an answer closes it), so this returns within that time whatever is down."""

        async def check(part: StoreLifecycle) -> bool:
            circuit = self.stores.circuits.get(self._port_name(part))
            if circuit is not None:
                return await circuit.probe_now()
            try:
                async with asyncio.timeout(self.settings.store_probe_timeout_s):
                    await part.ping()
            except Exception as exc:  # readiness reports, it never raises
                log.debug("readiness check failed: %s", exc)
                return False
            return True

        answers = await asyncio.gather(*(check(p) for p in self._parts()))
        return dict(zip(PORTS, answers, strict=True))

    async def _open_part(self, part: StoreLifecycle, *, keep_trying: bool) -> None:
        """Open one store and apply its (idempotent, cheap) schema. The closer is registered once
        the store is open, also when the schema then fails, and when an open that keeps trying
        failed (a pool goes on connecting in the background)."""
        if part not in self._connected:
            try:
                await part.open(keep_trying=keep_trying)
            except StoreUnavailable:
                if keep_trying:
                    self._register_closer(part)
                raise
            self._connected.append(part)
            self._register_closer(part)
        # projection schemas are idempotent and cheap: a fresh Neo4j or Weaviate is usable at once
        await part.apply_schema()

    def _register_closer(self, part: StoreLifecycle) -> None:
        if part in self._opened:
            return
        self._opened.append(part)
        self._closers.insert(0, part.close)

    async def _set_up_later(self, parts: list[StoreLifecycle]) -> None:
        """Retry the stores that were down at start, every 2 s, until each is set up."""
        while parts:
            await asyncio.sleep(2.0)
            for part in list(parts):
                try:
                    await self._open_part(part, keep_trying=True)
                except StoreUnavailable:
                    continue
                except Exception:  # a store that answers but fails otherwise: logged, retried
                    log.exception("setting up a store that was down at start failed")
                    continue
                parts.remove(part)
                log.info("a store that was down at start is set up")

    def preload_users(self, user_ids: Sequence[str]) -> None:
        """Load the users' in-process caches now (graph, vectors, lexical index, HNSW graph, built
        or brought up to date and saved) instead of on a first request; nothing for stores behind
        servers."""
        self.stores.in_process.preload(user_ids)

    def _preload(self, limit: int) -> None:
        try:
            started = time.perf_counter()
            users = self.stores.in_process.largest_users(limit)
            self.preload_users(users)
            log.info("preloaded %d users' caches in %.1f s", len(users), time.perf_counter() - started)
            self._preloaded(ok=True)
        except Exception:  # a preload is an optimisation: requests load what they need themselves
            log.exception("preloading users' caches failed")
            self._preloaded(ok=False)

    async def _warm_queries(self) -> None:
        """Have the store servers plan the read queries of retrieval before /readyz says ready (a
        Neo4j just started takes seconds over its first expansion)."""
        started = time.perf_counter()
        try:
            for part in self._parts():
                await part.warm()
            log.info("warmed the stores' read queries in %.1f s", time.perf_counter() - started)
            self._preloaded(ok=True)
        except Exception as exc:  # a store that is down: readiness reports it, requests fail as 503
            log.warning("warming the stores' read queries failed: %s", exc)
            self._preloaded(ok=False)

    def _preloaded(self, *, ok: bool) -> None:
        """One preload finished (from the event loop or the preload thread): /readyz leaves
        "loading" when all have."""
        with self._preload_lock:
            self._preloading -= 1
            self._preload_failed |= not ok
            if self._preloading == 0:
                self.preload_state = "failed" if self._preload_failed else "done"

    def vector_rewriter(self) -> VectorRewriter:
        """The record store's vectors for ``hrt reembed`` (:mod:`hrt.reembed`); an embedded file is
        claimed, so a server cannot hold it meanwhile. Open the service with an embedder whose
        ``model_id`` is empty: the store's model is what is being replaced."""
        projector = self.projector

        async def drain() -> None:
            if projector is not None:
                report = await projector.drain(wait=60.0)
                if report.failed:
                    raise StoreError(f"the new vectors are saved but not all projected yet: {report.failed}")

        return self.stores.vector_rewriter(drain)

    async def close(self) -> None:
        if self._setup_task is not None and not self._setup_task.done():
            self._setup_task.cancel()
            with contextlib.suppress(BaseException):
                await self._setup_task
        if self._warm_task is not None and not self._warm_task.done():
            self._warm_task.cancel()
            with contextlib.suppress(BaseException):
                await self._warm_task
        if self._projector_task is not None:
            self._projector_stop.set()
            with contextlib.suppress(Exception):
                await self._projector_task
        if self.projector is not None:
            await self.projector.close()
        for closer in self._closers:
            result = closer()
            if asyncio.iscoroutine(result):
                with contextlib.suppress(Exception):
                    await result
        self._closers.clear()

    # ---------------------------------------------------------------------------------------
    # reads and writes
    # ---------------------------------------------------------------------------------------

    async def retrieve(self, request: RetrieveRequest) -> AugmentedMemoryContext:
        """The response alone (:meth:`HybridRetrievalTool.run`, the one entry point, gives the timings too)."""
        return (await self.tool.run(request)).response

    async def ingest(
        self,
        records: Sequence[Record],
        progress: Callable[[int], None] | None = None,
        written_by: str | None = None,
        tenant: str | None = None,
    ) -> WriteResult:
        """Write records in one transaction, in a write slot of ``tenant``'s share
        (:meth:`ingest_slot`); as :meth:`write_records`."""
        with self.ingest_slot(tenant):
            return await self.write_records(records, progress, written_by)

    async def write_records(
        self,
        records: Sequence[Record],
        progress: Callable[[int], None] | None = None,
        written_by: str | None = None,
    ) -> WriteResult:
        """Write records in one transaction, the caller holding a write slot; ``written_by``: the
        API key's id writing them (None: the operator), kept with each entity with the clock's time
        (``RecordStore.entity_detail``)."""
        for attempt in range(CONVERSATION_RETRIES):
            forgetting = await self._forget_messages(records)
            # embedding is CPU-bound for seconds per thousand records: never on the event loop
            records_now = [*records, *forgetting.records]
            batch = await asyncio.to_thread(build_batch, records_now, self.embedder, progress=progress)
            batch.state, batch.state_expect = forgetting.state, forgetting.expect
            self._mark_writer(batch, written_by)
            try:
                result = await self.writer.apply(batch)
            except StateChanged:  # a conversation call of the user committed first
                if attempt == CONVERSATION_RETRIES - 1:
                    raise
                continue
            break
        for r in records:
            self.metrics.ingested.labels(kind=r.kind).inc()
        await self._project_now()
        return result

    async def _forget_messages(self, records: Sequence[Record]) -> Plan:
        """What deleting conversation messages takes out of their users' statistics
        (:func:`forget_messages`), for the memory units ``records`` deletes: one read per user
        that deletes any, nothing otherwise."""
        deleted: dict[str, list[str]] = {}
        for r in records:
            if isinstance(r, Deletion) and r.kind == "memory_unit" and (ident := r.entity_id()):
                deleted.setdefault(r.user_id, []).append(ident)
        out = Plan([], {}, {}, [])
        options = ExtractionOptions(
            max_state_rows=self.settings.max_conversation_state_rows, notes=self.settings.conversation_notes
        )
        for user_id, muids in sorted(deleted.items()):
            plan = await forget_messages(self.records, user_id, muids, self.clock(), options)
            out.records.extend(plan.records)
            out.state.update(plan.state)
            out.expect.update(plan.expect)
        return out

    def _mark_writer(self, batch: WriteBatch, written_by: str | None) -> None:
        batch.written_by = written_by
        batch.written_at = self.clock().timestamp()

    async def add_messages(
        self,
        request: ConversationRequest,
        written_by: str | None = None,
        tenant: str | None = None,
        on_slot: Callable[[], None] | None = None,
    ) -> ConversationResult:
        """Messages of one session in: each a memory unit, linked to the previous turn and to the
        concepts the extractor finds (:mod:`hrt.extraction.conversation`), in one transaction with
        the user's extraction statistics. A resend is a no-op; an edited message replaces its unit.
        The user's lock first (:meth:`user_write`), then a write slot of ``tenant``'s share;
        ``on_slot`` is called once the slot is held (the route gives back its body's place)."""
        async with self.user_write(request.user_id):
            with self.ingest_slot(tenant):
                if on_slot is not None:
                    on_slot()
                plan = await self._write_messages(request, written_by)
        return ConversationResult(
            user_id=request.user_id,
            session_id=request.session_id,
            messages=plan.results,
            concepts_linked=plan.concepts_linked,
            concepts_unlinked=plan.concepts_unlinked,
            relations=plan.relations,
            extractor="rules+llm" if plan.llm_used else "rules",
            llm_fallbacks=plan.llm_fallbacks,
        )

    async def _write_messages(self, request: ConversationRequest, written_by: str | None) -> Plan:
        """Plan and write, planned again when another writer of the user committed first. The LLM
        extractor's time is bounded for the whole call (``HRT_EXTRACTOR_CALL_BUDGET_S``, retries
        included): past it, the remaining messages get the rules alone (``llm_fallbacks``)."""
        llm = budgeted(self.llm_extractor, self.settings.extractor_call_budget_s) if self.llm_extractor else None
        for attempt in range(CONVERSATION_RETRIES):
            plan = await self._plan(request, llm)
            if not plan.records and not plan.state:
                break
            batch = await asyncio.to_thread(build_batch, plan.records, self.embedder)
            batch.state, batch.state_expect = plan.state, plan.expect
            self._mark_writer(batch, written_by)
            try:
                await self.writer.apply(batch)
            except StateChanged:
                if attempt == CONVERSATION_RETRIES - 1:
                    raise
                log.info("conversation write of %s planned again: another writer came first", request.user_id)
                continue
            self.metrics.ingested.labels(kind="message").inc(sum(1 for r in plan.results if r.status != "unchanged"))
            await self._project_now()
            break
        return plan

    async def off_loop(self, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``work()`` on a loop of its own in a worker thread when the stores read from any thread
        (the embedded store, whose reads are synchronous SQLite and would hold this loop, and
        with it every other request, /healthz included), else here (PostgreSQL's pool belongs
        to this loop; its reads already wait without holding it)."""
        if self.stores.in_process.reads_from_any_thread:
            return await asyncio.to_thread(lambda: asyncio.run(work()))
        return await work()

    async def _plan(self, request: ConversationRequest, llm: LLMCall | None) -> Plan:
        """The call's plan: tens of milliseconds of Python over the statistics (more with many
        messages). The embedded store reads from any thread, so there it runs on a loop of its own
        in a worker thread and never holds up this loop's requests, with or without the LLM
        extractor, whose calls are sent back to this loop (its HTTP client and semaphore are
        bound to it); PostgreSQL's pool belongs to this loop."""
        remote = on_loop(llm, asyncio.get_running_loop()) if llm is not None else None
        options = ExtractionOptions(
            max_state_rows=self.settings.max_conversation_state_rows, notes=self.settings.conversation_notes
        )
        if self.stores.in_process.reads_from_any_thread:
            return await self.off_loop(lambda: plan_messages(self.records, request, utc_now(), options, remote))
        return await plan_messages(self.records, request, utc_now(), options, llm)

    async def _project_now(self) -> None:
        """Read-your-writes when the targets are up, within ``read_your_writes_timeout_s`` (a target
        that is down, or a drain of another replica, must not hold a write); otherwise the outbox
        keeps the events for the background projector (or ``hrt project``)."""
        if self.projector is None:
            return
        report = await self.projector.drain(wait=self.settings.read_your_writes_timeout_s)
        note = "busy" if report.busy else None if report.ok else repr(sorted(report.failed.items()))
        if note == self._projection_note:
            return
        self._projection_note = note
        if report.busy:
            log.warning(
                "projection left to the background projector: not done within HRT_READ_YOUR_WRITES_TIMEOUT_S "
                "(a target slow or down, or another drain holding it); said once until it changes"
            )
        elif not report.ok:
            log.warning(
                "projection delayed (the outbox keeps the events; said once until it changes): %s", report.failed
            )
        else:
            log.info("projection at once again (read-your-writes)")

    async def delete_entity(self, user_id: str, kind: Kind, ident: str, tenant: str | None = None) -> int:
        check_id(ident, "id")
        deletion = Deletion(op="delete", kind=Kind(kind).value, user_id=user_id, id=ident)
        return (await self.ingest([deletion], tenant=tenant)).deleted

    async def merge_concepts(
        self, user_id: str, target: str, ids: Sequence[str], tenant: str | None = None
    ) -> MergeResult:
        """Merge concepts into ``target`` in one write (:mod:`hrt.merge`); again, a no-op. The
        conversation statistics follow in the same transaction (:func:`adopted_terms`): the user's
        lock first, as a conversation call takes it, so none plans from the concepts being merged."""
        from hrt.merge import merge_records, prepare_merge

        check_id(user_id, "user_id")
        check_id(target, "id")
        async with self.user_write(user_id):
            with self.ingest_slot(tenant):
                plan, result = await prepare_merge(self.records, user_id, target, ids)
                records = merge_records(plan)
                if records:
                    batch = await asyncio.to_thread(build_batch, records, self.embedder)
                    batch.state, batch.state_expect = await adopted_terms(self.records, user_id, target, result.merged)
                    await self.writer.apply(batch)
                    self.metrics.ingested.labels(kind="merge").inc()
                    await self._project_now()
        return result

    async def delete_user(self, user_id: str, tenant: str | None = None) -> int:
        with self.ingest_slot(tenant):
            n = await self.writer.delete_user(user_id)
            await self._project_now()
        return n
