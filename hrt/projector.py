"""The outbox projector: delivers record-store changes to the graph store and the vector index.

Delivery is at-least-once and idempotent: each event names a record (and the version the write
produced); the projector writes the record store's *current* state of that record. Each target has
its own cursor (``graph_done`` / ``vector_done``) and is fed strictly in outbox order, so one
target being down delays only itself. A failed delivery is retried with exponential backoff; the
event stays in the outbox (surviving crashes and restarts) until every target has it.

Replicas (any number of ``hrt serve`` processes over one PostgreSQL): a target is fed by one
process at a time. Each batch is delivered inside a PostgreSQL transaction that holds the target's
lease (an advisory lock, :meth:`PostgresRecordStore.outbox_lease` behind the
:class:`~hrt.stores.base.Outbox` port): the pending events, the records' current state, the write
to the target and the mark that says so all happen under it. Reading a record's state and writing
it to the target is therefore never interleaved with another process's delivery to that target:
the target receives states in the order PostgreSQL committed them, and a newer state (a delete
included) is never overwritten by an older one read before it. Why a lease rather than row claims
(``FOR UPDATE SKIP LOCKED``) or a version check at the target: docs/reliability.md.

Poison events: a delivery that a target refuses (any error but the target being unreachable)
counts an attempt for that target; after ``max_attempts`` the event is set aside as dead for that
target (``hrt_outbox_dead``) and the target moves on. The background loop survives every
exception (logged, counted, backed off).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hrt.errors import HRTError, StoreDown, StoreError, StoreUnavailable
from hrt.metrics import Metrics
from hrt.records import EdgeType
from hrt.stores.base import GraphEdge, GraphStore, Outbox, OutboxLease, VectorIndex
from hrt.stores.projection import graph_edge, graph_node, vector_doc

log = logging.getLogger(__name__)

TARGETS = ("graph", "vector")
# how often a bounded drain looks again whether another process's delivery has passed its events
POLL_S = 0.05
# how often the background loop refreshes the outbox metrics
STATS_EVERY_S = 1.0


@dataclass
class DrainReport:
    delivered: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TARGETS})
    failed: dict[str, str] = field(default_factory=dict)  # target -> error of the event it stopped at
    # a drain (of this process, or another replica's) held the projector past the caller's wait:
    # the caller's events are not all projected yet (they stay in the outbox for that drain)
    busy: bool = False
    dead: dict[str, list[int]] = field(default_factory=dict)  # target -> seqs set aside as dead now
    leased_elsewhere: set[str] = field(default_factory=set)  # targets another drain was feeding

    @property
    def ok(self) -> bool:
        return not self.failed

    def merge(self, other: DrainReport) -> None:
        for target, n in other.delivered.items():
            self.delivered[target] = self.delivered.get(target, 0) + n
        self.failed.update(other.failed)
        for target, seqs in other.dead.items():
            self.dead.setdefault(target, []).extend(seqs)
        self.leased_elsewhere |= other.leased_elsewhere
        self.busy |= other.busy


class _Stop(Exception):
    """A delivery stopped at an event: the target is down, or refused it fewer than N times."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def describe(exc: BaseException) -> str:
    return exc.message if isinstance(exc, HRTError) else f"{type(exc).__name__}: {str(exc)[:300]}"


class Projector:
    def __init__(
        self,
        records: Outbox,
        graph: GraphStore,
        vectors: VectorIndex,
        *,
        batch_size: int = 1024,
        min_backoff: float = 0.2,
        max_backoff: float = 30.0,
        max_attempts: int = 10,
        metrics: Metrics | None = None,
    ) -> None:
        self.records = records
        self.targets: dict[str, Any] = {"graph": graph, "vector": vectors}
        self.batch_size = batch_size
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.max_attempts = max_attempts
        self.metrics = metrics
        # one drain of this process at a time: the background loop and a request's read-your-writes
        # drain share it (across processes, the target's lease in PostgreSQL does the same)
        self._draining = asyncio.Lock()
        # bounded drains that outlived their caller's wait: they finish their batch in the
        # background (a delivery is never cancelled half way), awaited on close
        self._stragglers: set[asyncio.Task[DrainReport]] = set()
        self._stats_at = 0.0
        # set when a target comes back (its circuit closed): the loop drains at once, its backoff reset
        self._wake = asyncio.Event()

    # ------------------------------------------------------------------------------------------
    # draining
    # ------------------------------------------------------------------------------------------

    async def drain(self, *, wait: float | None = None) -> DrainReport:
        """Deliver what is pending, per target, until empty or the target fails.

        Without ``wait`` (``hrt project``, tests): wait for this process's drain in progress, then
        deliver everything pending; a target whose lease another process holds is left to it
        (``leased_elsewhere``).

        With ``wait`` (a write's read-your-writes drain): deliver the events written so far, up to
        the newest one now in the outbox, and answer within ``wait`` seconds: when this process's
        drain or another replica's holds a target past it, ``busy`` (the events stay in the outbox
        for that drain, which delivers them)."""
        if wait is None:
            async with self._draining:
                return await self._drain_all()
        deadline = time.monotonic() + wait
        upto = await self.records.outbox_head()
        if upto is None:
            return DrainReport()
        task = asyncio.ensure_future(self._drain_upto(upto, deadline))
        done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()))
        if task in done:
            return task.result()
        self._stragglers.add(task)
        task.add_done_callback(self._straggler_done)
        return DrainReport(busy=True)

    def _straggler_done(self, task: asyncio.Task[DrainReport]) -> None:
        self._stragglers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("projector: a read-your-writes drain failed: %s", describe(task.exception()))  # type: ignore[arg-type]

    async def _drain_all(self, upto: int | None = None, deadline: float | None = None) -> DrainReport:
        """The targets drain side by side (Neo4j and Weaviate each take a core; ingest spent 10 s
        of 16 in the drain with one after the other), each in its own outbox order."""
        report = DrainReport()
        # both finish before an error of either is raised: none goes on unawaited
        outcomes = await asyncio.gather(
            *(self._drain_target(t, report, upto, deadline) for t in TARGETS), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return report

    async def _drain_upto(self, upto: int, deadline: float) -> DrainReport:
        """Until every target has the events up to ``upto``: deliver them where this process gets
        the lease, wait for the holder where it does not; give up at ``deadline`` (between
        batches)."""
        report = DrainReport()
        while True:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self._draining.acquire()
            except TimeoutError:
                report.busy = True
                return report
            try:
                round_ = await self._drain_all(upto, deadline)
            finally:
                self._draining.release()
            report.merge(round_)
            if not round_.ok:
                return report
            passed = await self.records.outbox_passed(upto)
            if all(passed.values()):
                return report
            if time.monotonic() >= deadline:
                report.busy = True
                return report
            await asyncio.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))

    async def _drain_target(self, target: str, report: DrainReport, upto: int | None, deadline: float | None) -> None:
        while True:
            async with self.records.outbox_lease(target) as lease:
                if lease is None:
                    report.leased_elsewhere.add(target)
                    return
                events = await lease.pending(self.batch_size, upto)
                if not events:
                    return
                done, dead, error = await self._deliver(lease, target, events)
                await lease.mark_done(done)
            report.delivered[target] += len(done) - len(dead)
            if dead:
                report.dead.setdefault(target, []).extend(dead)
            if error is not None:
                report.failed[target] = error
                return
            if deadline is not None and time.monotonic() >= deadline:
                return

    # ------------------------------------------------------------------------------------------
    # the background loop
    # ------------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event, idle_sleep: float = 0.5) -> None:
        """Background loop for ``hrt serve``: drain, back off while a target fails, stop on
        ``stop``. It survives every exception: logged, counted, retried after a backoff."""
        backoff = self.min_backoff
        while not stop.is_set():
            self._wake.clear()
            try:
                report = await self.drain()
                backoff = self.min_backoff if report.ok else min(self.max_backoff, backoff * 2)
                wait = idle_sleep if report.ok else backoff
            except Exception as exc:
                if isinstance(exc, StoreDown):  # the record store's circuit is open: it logged that once
                    pass
                elif isinstance(exc, HRTError):  # the record store itself is down: keep trying
                    log.warning("projector: %s", exc.message)
                else:  # a bug: say so loudly, and keep the projections going
                    log.exception("projector: a drain raised")
                if self.metrics is not None:
                    self.metrics.projector_errors.labels(target="loop").inc()
                backoff = min(self.max_backoff, backoff * 2)
                wait = backoff
            await self._refresh_stats()
            if await self._pause(stop, wait):
                backoff = self.min_backoff

    def wake(self) -> None:
        """A target is back (its circuit closed): the background loop drains now, not after its
        backoff (up to ``max_backoff``)."""
        self._wake.set()

    async def _pause(self, stop: asyncio.Event, seconds: float) -> bool:
        """Sleep up to ``seconds``, less when stopped or woken; True when woken."""
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        return self._wake.is_set()

    async def _refresh_stats(self) -> None:
        if self.metrics is None or time.monotonic() - self._stats_at < STATS_EVERY_S:
            return
        try:
            stats = await self.records.outbox_stats()
        except StoreDown:  # the record store's circuit is open: it logged that once
            return
        except Exception as exc:
            log.warning("projector: reading the outbox metrics failed: %s", describe(exc))
            return
        self._stats_at = time.monotonic()
        for target, s in stats.items():
            self.metrics.outbox_lag.labels(target=target).set(s["lag"])
            self.metrics.outbox_oldest.labels(target=target).set(s["oldest_s"])
            self.metrics.outbox_dead.labels(target=target).set(s["dead"])

    async def warnings(self) -> list[str]:
        """What /readyz reports about the outbox: dead events, a target behind."""
        stats = await self.records.outbox_stats()
        out = []
        for target, s in stats.items():
            if s["dead"]:
                out.append(
                    f"{int(s['dead'])} outbox event(s) failed for good on the {target} projection; "
                    "`hrt doctor` lists them, `hrt doctor --repair` mends"
                )
            if s["oldest_s"] >= 60:
                out.append(
                    f"the {target} projection is {int(s['lag'])} event(s) behind, the oldest {int(s['oldest_s'])} s old"
                )
        return out

    async def close(self) -> None:
        """Wait for bounded drains still finishing their batch."""
        for task in list(self._stragglers):
            with contextlib.suppress(Exception):
                await task

    # ------------------------------------------------------------------------------------------
    # delivery
    # ------------------------------------------------------------------------------------------

    async def _deliver(
        self, lease: OutboxLease, target: str, events: Sequence[dict[str, Any]]
    ) -> tuple[list[int], list[int], str | None]:
        """Deliver in order, batching runs of the same (op, user); a run that fails is delivered
        again one event at a time, to find the event at fault. Returns the seqs done (delivered or
        set aside), those set aside as dead, and the error delivery stopped at (None: all done)."""
        done: list[int] = []
        dead: list[int] = []
        i = 0
        while i < len(events):
            j = i
            while j < len(events) and (events[j]["op"], events[j]["user_id"]) == (
                events[i]["op"],
                events[i]["user_id"],
            ):
                j += 1
            run = events[i:j]
            i = j
            try:
                await self._apply_run(lease, target, run)
                done.extend(e["seq"] for e in run)
                continue
            except Exception as exc:
                # a target that is down is no event's fault: no need to look for one
                if len(run) == 1 or isinstance(exc, StoreUnavailable):
                    try:
                        await self._failed(lease, target, run[0], exc, done, dead)
                    except _Stop as stop:
                        return done, dead, stop.message
                    done.append(run[0]["seq"])
                    continue
            for event in run:
                try:
                    await self._apply_run(lease, target, [event])
                except Exception as exc:
                    try:
                        await self._failed(lease, target, event, exc, done, dead)
                    except _Stop as stop:
                        return done, dead, stop.message
                done.append(event["seq"])
        return done, dead, None

    async def _failed(
        self, lease: OutboxLease, target: str, event: dict[str, Any], exc: Exception, done: list[int], dead: list[int]
    ) -> None:
        """One event failed: raise :class:`_Stop` to retry it later, or set it aside as dead (then
        return; its seq goes in ``dead``). ``done``: the batch's seqs delivered before it."""
        if isinstance(exc, StoreError) and exc.store == "PostgreSQL":
            raise exc  # the lease's transaction is lost: nothing of this batch is marked
        message = describe(exc)
        if self.metrics is not None:
            self.metrics.projector_errors.labels(target=target).inc()
        unreachable = isinstance(exc, StoreUnavailable)
        if not isinstance(exc, HRTError):
            log.error("projector: %s delivery of seq %d raised", target, event["seq"], exc_info=exc)
        # the seqs done so far are all below this one: marked first, so this lease's transaction
        # locks outbox rows in seq order, as the other target's does. Marked after (at the batch's
        # end), they were locked after this row, and the two drains deadlocked (2026-11-29)
        await lease.mark_done(done)
        attempts = await lease.failed(event["seq"], message, count=not unreachable)
        if isinstance(exc, StoreDown):  # its circuit is open: logged once, when it opened
            raise _Stop(message)
        if unreachable or attempts < self.max_attempts:
            log.warning(
                "projector: %s delivery stopped at seq %d (attempt %d of %d): %s",
                target,
                event["seq"],
                attempts,
                self.max_attempts,
                message,
            )
            raise _Stop(message)
        await lease.dead_letter(event["seq"], message)
        dead.append(event["seq"])
        log.error(
            "projector: seq %d (%s of user %s) set aside as dead for the %s target after %d attempts: %s",
            event["seq"],
            event["op"],
            event["user_id"],
            target,
            attempts,
            message,
        )

    async def _apply_run(self, lease: OutboxLease, target: str, run: Sequence[dict[str, Any]]) -> None:
        op, user_id = run[0]["op"], run[0]["user_id"]
        store = self.targets[target]
        if op == "upsert_entity":
            rows = await lease.entity_rows(user_id, [e["key"]["id"] for e in run])
            if target == "graph":
                await store.upsert_nodes(user_id, [graph_node(ent) for ent, *_ in rows.values()])
            else:
                await store.upsert(user_id, [vector_doc(ent, vec, passages) for ent, vec, _, passages in rows.values()])
        elif op == "delete_entity":
            ids = [e["key"]["id"] for e in run]
            await (store.delete_nodes(user_id, ids) if target == "graph" else store.delete(user_id, ids))
        elif op == "upsert_relation" and target == "graph":
            keys = [(e["key"]["source"], e["key"]["target"], e["key"]["type"]) for e in run]
            current = await lease.relation_rows(user_id, keys)
            await store.upsert_edges(user_id, [graph_edge(r) for r in current.values()])
        elif op == "delete_relation" and target == "graph":
            await store.delete_edges(
                user_id,
                [GraphEdge(e["key"]["source"], e["key"]["target"], EdgeType(e["key"]["type"])) for e in run],
            )
        elif op == "delete_user":
            await store.delete_user(user_id)
