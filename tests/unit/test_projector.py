"""The outbox projector's own logic (poison events, the loop surviving, the bounded drain, the
outbox metrics) over an in-memory outbox and in-memory targets: fakes of the record store and the
stores it feeds, never of the projector. Delivery under the PostgreSQL lease with real stores is
tested in tests/integration/test_replicas.py and test_postgres.py."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from hrt.errors import StoreError, StoreUnavailable
from hrt.ingest import build_batch, parse_jsonl
from hrt.metrics import Metrics
from hrt.projector import Projector
from hrt.stores.base import EntityRow
from tests.helpers import HashingEmbedder, concept, jsonl

USER = "u1"


class Outbox:
    """The record store's side: entities, outbox rows with per-target marks and attempts, dead
    letters, and a lease per target that a test can hand to "another replica"."""

    def __init__(self, ids: Sequence[str]) -> None:
        batch = build_batch(parse_jsonl(jsonl([concept(USER, i, f"concept {i}") for i in ids])), HashingEmbedder())
        self.entities: dict[str, EntityRow] = {
            e.id: (e, batch.vectors[(USER, e.id)], 1, batch.passages.get((USER, e.id))) for e in batch.entities
        }
        self.rows = [
            {"seq": n + 1, "user_id": USER, "op": "upsert_entity", "key": {"id": i}, "version": 1}
            for n, i in enumerate(ids)
        ]
        self.done: dict[str, set[int]] = {"graph": set(), "vector": set()}
        self.attempts: dict[tuple[str, int], int] = {}
        self.dead: list[tuple[str, int, str]] = []
        self.held_elsewhere: set[str] = set()
        self.lease_errors: list[BaseException] = []  # raised by the next leases taken

    @contextlib.asynccontextmanager
    async def outbox_lease(self, target: str, *, wait: bool = False) -> AsyncIterator[Lease | None]:
        if self.lease_errors:
            raise self.lease_errors.pop(0)
        yield None if target in self.held_elsewhere else Lease(self, target)

    async def outbox_head(self) -> int | None:
        return max((r["seq"] for r in self.rows), default=None)

    async def outbox_passed(self, upto: int) -> dict[str, bool]:
        return {t: all(r["seq"] in self.done[t] for r in self.rows if r["seq"] <= upto) for t in self.done}

    async def outbox_stats(self) -> dict[str, dict[str, float]]:
        return {
            t: {
                "lag": float(sum(r["seq"] not in self.done[t] for r in self.rows)),
                "oldest_s": 0.0,
                "dead": float(sum(d[0] == t for d in self.dead)),
            }
            for t in self.done
        }


class Lease:
    def __init__(self, outbox: Outbox, target: str) -> None:
        self.outbox, self.target = outbox, target

    async def pending(self, limit: int, upto: int | None = None) -> list[dict[str, Any]]:
        rows = [
            r
            for r in self.outbox.rows
            if r["seq"] not in self.outbox.done[self.target] and (upto is None or r["seq"] <= upto)
        ]
        return rows[:limit]

    async def entity_rows(self, user_id: str, ids: Sequence[str]) -> dict[str, EntityRow]:
        return {i: self.outbox.entities[i] for i in ids if i in self.outbox.entities}

    async def relation_rows(self, user_id: str, keys: Sequence[tuple[str, str, str]]) -> dict[Any, Any]:
        return {}

    async def mark_done(self, seqs: Sequence[int]) -> None:
        self.outbox.done[self.target] |= set(seqs)

    async def failed(self, seq: int, error: str, *, count: bool) -> int:
        key = (self.target, seq)
        self.outbox.attempts[key] = self.outbox.attempts.get(key, 0) + (1 if count else 0)
        return self.outbox.attempts[key]

    async def dead_letter(self, seq: int, error: str) -> None:
        self.outbox.dead.append((self.target, seq, error))
        await self.mark_done([seq])


class Target:
    """A graph store and a vector index at once: records what it is given; ``refuse`` ids fail
    with ``error``."""

    def __init__(self, refuse: Sequence[str] = (), error: Exception | None = None) -> None:
        self.written: list[str] = []
        self.refuse = set(refuse)
        self.error = error or StoreError("the target refused the object", store="Fake")

    async def _write(self, items: Sequence[Any]) -> None:
        if self.refuse & {i.id for i in items}:
            raise self.error
        self.written.extend(i.id for i in items)

    async def upsert_nodes(self, user_id: str, nodes: Sequence[Any]) -> None:
        await self._write(nodes)

    async def upsert(self, user_id: str, docs: Sequence[Any]) -> None:
        await self._write(docs)


def projector(outbox: Outbox, graph: Target, vectors: Target, **kwargs: Any) -> Projector:
    return Projector(outbox, graph, vectors, **kwargs)  # type: ignore[arg-type]


async def test_a_poison_event_is_set_aside_after_n_attempts_and_its_target_moves_on():
    outbox = Outbox(["c1", "c2", "c3"])
    graph, vectors = Target(refuse=["c2"]), Target()
    p = projector(outbox, graph, vectors, max_attempts=3)
    for attempt in (1, 2):
        report = await p.drain()
        assert "graph" in report.failed and report.dead == {}
        assert outbox.attempts[("graph", 2)] == attempt
        # the run of three was delivered again one by one: c1 got through, c3 waits behind c2
        assert graph.written == ["c1"] and 3 not in outbox.done["graph"]
    report = await p.drain()
    assert report.ok and report.dead == {"graph": [2]}
    assert graph.written == ["c1", "c3"] and outbox.done["graph"] == {1, 2, 3}
    assert [(t, s) for t, s, _ in outbox.dead] == [("graph", 2)]
    assert "refused" in outbox.dead[0][2]
    # the other target never held it back, and never saw a failure
    assert sorted(vectors.written) == ["c1", "c2", "c3"] and ("vector", 2) not in outbox.attempts


async def test_a_target_that_is_down_never_turns_events_dead():
    outbox = Outbox(["c1"])
    graph = Target(refuse=["c1"], error=StoreUnavailable("down", store="Fake"))
    p = projector(outbox, graph, Target(), max_attempts=2)
    for _ in range(5):
        report = await p.drain()
        assert report.failed == {"graph": "down"} and report.dead == {}
    assert outbox.dead == [] and outbox.attempts[("graph", 1)] == 0
    graph.refuse.clear()  # back up
    assert (await p.drain()).ok and graph.written == ["c1"]


async def test_an_exception_outside_hrt_errors_counts_as_a_failed_delivery():
    outbox = Outbox(["c1", "c2"])
    metrics = Metrics()
    graph = Target(refuse=["c1"], error=ValueError("a bug in a target"))
    p = projector(outbox, graph, Target(), max_attempts=1, metrics=metrics)
    report = await p.drain()
    assert report.ok and report.dead == {"graph": [1]} and graph.written == ["c2"]
    assert outbox.dead[0][2] == "ValueError: a bug in a target"
    assert metrics.projector_errors.labels(target="graph")._value.get() == 1


async def test_the_loop_survives_any_exception_and_keeps_delivering():
    outbox = Outbox(["c1"])
    outbox.lease_errors = [RuntimeError("not an HRT error"), StoreUnavailable("PostgreSQL down", store="PostgreSQL")]
    metrics = Metrics()
    graph, vectors = Target(), Target()
    p = projector(outbox, graph, vectors, min_backoff=0.001, max_backoff=0.002, metrics=metrics)
    stop = asyncio.Event()

    async def stop_when_delivered() -> None:
        while not (graph.written and vectors.written):
            await asyncio.sleep(0.001)
        stop.set()

    await asyncio.wait_for(asyncio.gather(p.run(stop, idle_sleep=0.001), stop_when_delivered()), timeout=30)
    assert graph.written == vectors.written == ["c1"]
    # both errors came from one drain (the targets drain side by side): one failed iteration
    assert outbox.lease_errors == [] and metrics.projector_errors.labels(target="loop")._value.get() >= 1
    # the loop published the outbox metrics
    text = metrics.render().decode()
    assert 'hrt_outbox_lag_events{target="graph"}' in text and "hrt_outbox_oldest_pending_seconds" in text


async def test_a_bounded_drain_answers_busy_while_another_replica_holds_a_target():
    outbox = Outbox(["c1", "c2"])
    outbox.held_elsewhere = {"vector"}
    graph, vectors = Target(), Target()
    p = projector(outbox, graph, vectors)
    report = await p.drain(wait=0.05)
    assert report.busy and vectors.written == []
    assert graph.written == ["c1", "c2"]  # the target it could lease, it fed
    # the other replica delivers the vector events: a bounded drain then sees them passed, not busy
    outbox.done["vector"] |= {1, 2}
    report = await p.drain(wait=30)
    assert report.ok and not report.busy


async def test_an_unbounded_drain_leaves_a_target_leased_elsewhere_to_its_holder():
    outbox = Outbox(["c1"])
    outbox.held_elsewhere = {"graph"}
    graph, vectors = Target(), Target()
    report = await projector(outbox, graph, vectors).drain()
    assert report.leased_elsewhere == {"graph"} and report.ok
    assert graph.written == [] and vectors.written == ["c1"]


async def test_readyz_warnings_name_dead_events():
    outbox = Outbox(["c1"])
    p = projector(outbox, Target(refuse=["c1"]), Target(), max_attempts=1)
    assert await p.warnings() == []
    await p.drain()
    warnings = await p.warnings()
    assert len(warnings) == 1 and "graph projection" in warnings[0] and "hrt doctor --repair" in warnings[0]


async def test_a_record_store_error_during_delivery_aborts_the_batch_unmarked():
    # the lease's transaction is lost with the record store: no attempt counted, nothing marked
    outbox = Outbox(["c1"])
    exc = StoreError("SQL failed", store="PostgreSQL")

    class Failing(Lease):
        async def entity_rows(self, user_id: str, ids: Sequence[str]) -> dict[str, Any]:
            raise exc

    @contextlib.asynccontextmanager
    async def lease(target: str, *, wait: bool = False) -> AsyncIterator[Lease]:
        yield Failing(outbox, target)

    outbox.outbox_lease = lease  # type: ignore[method-assign]
    with pytest.raises(StoreError):
        await projector(outbox, Target(), Target()).drain()
    assert outbox.done == {"graph": set(), "vector": set()} and outbox.attempts == {}


@pytest.mark.parametrize("max_attempts", [1, 3])
async def test_a_lease_locks_outbox_rows_in_seq_order_around_a_failed_event(max_attempts):
    """Each outbox row a lease's transaction touches (marked, or its attempts counted) stays locked
    until the transaction ends, and the other target's lease marks the same rows in seq order. One
    that counted a failure at seq 3 and then marked seqs 1-2 deadlocked with the other
    (test_replicas, 2026-11-29): every row is first touched in seq order."""
    outbox = Outbox(["c1", "c2", "c3", "c4", "c5"])
    touched: list[list[int]] = []

    class Recording(Lease):
        async def mark_done(self, seqs: Sequence[int]) -> None:
            touched[-1].extend(seqs)
            await super().mark_done(seqs)

        async def failed(self, seq: int, error: str, *, count: bool) -> int:
            touched[-1].append(seq)
            return await super().failed(seq, error, count=count)

    @contextlib.asynccontextmanager
    async def lease(target: str, *, wait: bool = False) -> AsyncIterator[Lease]:
        touched.append([])
        yield Recording(outbox, target)

    outbox.outbox_lease = lease  # type: ignore[method-assign]
    graph = Target(refuse=["c3"])
    await projector(outbox, graph, Target(), max_attempts=max_attempts).drain()
    assert any(3 in t for t in touched)  # the failure was counted inside a lease
    for seqs in touched:
        first = list(dict.fromkeys(seqs))  # each row's first touch, in order
        assert first == sorted(first), touched
    assert graph.written == (["c1", "c2", "c4", "c5"] if max_attempts == 1 else ["c1", "c2"])
