"""The outbox projector: delivers record-store changes to the graph store and the vector index.

Delivery is at-least-once and idempotent: each event names a record (and the version the write
produced); the projector writes the record store's *current* state of that record, so replaying an
event, or delivering an old one after a newer one, can never install stale data. Each target has
its own cursor (``graph_done`` / ``vector_done``) and is fed strictly in outbox order, so one
target being down delays only itself. A failed delivery is retried with exponential backoff; the
event stays in the outbox (surviving crashes and restarts) until every target has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hrt.errors import HRTError
from hrt.projection import graph_edge, graph_node, vector_doc
from hrt.records import EdgeType
from hrt.stores.base import GraphEdge, GraphStore, VectorIndex
from hrt.stores.postgres_records import PostgresRecordStore

log = logging.getLogger(__name__)

TARGETS = ("graph", "vector")


@dataclass
class DrainReport:
    delivered: dict[str, int] = field(default_factory=lambda: {t: 0 for t in TARGETS})
    failed: dict[str, str] = field(default_factory=dict)  # target -> error of the event it stopped at
    busy: bool = False  # another drain held the projector past the caller's wait: nothing delivered

    @property
    def ok(self) -> bool:
        return not self.failed


class Projector:
    def __init__(
        self,
        records: PostgresRecordStore,
        graph: GraphStore,
        vectors: VectorIndex,
        *,
        batch_size: int = 1024,
        min_backoff: float = 0.2,
        max_backoff: float = 30.0,
    ) -> None:
        self.records = records
        self.targets: dict[str, Any] = {"graph": graph, "vector": vectors}
        self.batch_size = batch_size
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        # one drain at a time: the background loop and a request's read-your-writes drain would
        # otherwise read the same pending events and deliver them twice, the second delivery
        # landing after the request has returned (a rewrite while later requests are served)
        self._draining = asyncio.Lock()

    async def drain(self, *, wait: float | None = None) -> DrainReport:
        """Deliver everything pending, per target, until empty or the target fails. Drains of this
        projector run one at a time (a caller waits for the one in progress, then drains the rest).
        ``wait``: wait at most that many seconds for a drain in progress, then return a ``busy``
        report without delivering (a request's read-your-writes drain must not hang behind a
        background drain held up by a target that is down; the events stay in the outbox)."""
        if wait is None:
            async with self._draining:
                return await self._drain()
        try:
            async with asyncio.timeout(wait):
                await self._draining.acquire()
        except TimeoutError:
            return DrainReport(busy=True)
        try:
            return await self._drain()
        finally:
            self._draining.release()

    async def _drain(self) -> DrainReport:
        """The targets drain side by side (Neo4j and Weaviate each take a core; ingest spent 10 s
        of 16 in the drain with one after the other), each in its own outbox order."""
        report = DrainReport()
        await asyncio.gather(*(self._drain_target(target, report) for target in TARGETS))
        return report

    async def _drain_target(self, target: str, report: DrainReport) -> None:
        while True:
            events = await self.records.pending(target, self.batch_size)
            if not events:
                return
            done, error = await self._deliver(target, events)
            await self.records.mark_done(target, done)
            report.delivered[target] += len(done)
            if error is not None:
                report.failed[target] = error
                return

    async def run(self, stop: asyncio.Event, idle_sleep: float = 0.5) -> None:
        """Background loop for ``hrt serve``: drain, back off while a target fails, stop on ``stop``."""
        backoff = self.min_backoff
        while not stop.is_set():
            try:
                report = await self.drain()
                backoff = self.min_backoff if report.ok else min(self.max_backoff, backoff * 2)
                wait = idle_sleep if report.ok else backoff
            except HRTError as exc:  # the record store itself is down: keep trying
                log.warning("projector: %s", exc.message)
                backoff = min(self.max_backoff, backoff * 2)
                wait = backoff
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)

    async def _deliver(self, target: str, events: Sequence[dict[str, Any]]) -> tuple[list[int], str | None]:
        """Deliver in order, batching runs of the same (op, user); stop at the first failure."""
        done: list[int] = []
        i = 0
        while i < len(events):
            j = i
            while j < len(events) and (events[j]["op"], events[j]["user_id"]) == (
                events[i]["op"],
                events[i]["user_id"],
            ):
                j += 1
            run = events[i:j]
            try:
                await self._apply_run(target, run)
            except HRTError as exc:
                await self.records.mark_failed(run[0]["seq"], exc.message)
                log.warning("projector: %s delivery stopped at seq %d: %s", target, run[0]["seq"], exc.message)
                return done, exc.message
            done.extend(e["seq"] for e in run)
            i = j
        return done, None

    async def _apply_run(self, target: str, run: Sequence[dict[str, Any]]) -> None:
        op, user_id = run[0]["op"], run[0]["user_id"]
        store = self.targets[target]
        if op == "upsert_entity":
            rows = await self.records.entity_rows(user_id, [e["key"]["id"] for e in run])
            if target == "graph":
                await store.upsert_nodes(user_id, [graph_node(ent) for ent, _, _ in rows.values()])
            else:
                await store.upsert(user_id, [vector_doc(ent, vec) for ent, vec, _ in rows.values()])
        elif op == "delete_entity":
            ids = [e["key"]["id"] for e in run]
            await (store.delete_nodes(user_id, ids) if target == "graph" else store.delete(user_id, ids))
        elif op == "upsert_relation" and target == "graph":
            keys = [(e["key"]["source"], e["key"]["target"], e["key"]["type"]) for e in run]
            current = await self.records.relation_rows(user_id, keys)
            await store.upsert_edges(user_id, [graph_edge(r) for r in current.values()])
        elif op == "delete_relation" and target == "graph":
            await store.delete_edges(
                user_id,
                [GraphEdge(e["key"]["source"], e["key"]["target"], EdgeType(e["key"]["type"])) for e in run],
            )
        elif op == "delete_user":
            await store.delete_user(user_id)
