"""Stage 5, hydration: one read per kind, the kinds' reads in flight together, missing ids reported."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from hrt.pipeline.hydration import run_hydration
from hrt.pipeline.scoring import Scored
from hrt.records import Kind
from hrt.stores.base import GraphCandidate, GraphNode


def scored(ident: str, kind: Kind) -> Scored:
    node = GraphNode(id=ident, kind=kind, label=ident, ts=None, salience=0.5, category="topic")
    return Scored(GraphCandidate(node, 0, ident, (), 1.0), 1.0, 0.0, 0.5, 0.5, 1.0)


class Records:
    """A record store that lacks every id starting with ``gone`` and counts reads in flight."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, Kind, list[str]]] = []
        self.in_flight = 0
        self.peak = 0

    async def get_many(self, user_id: str, kind: Kind, ids: Sequence[str]) -> dict[str, object]:
        self.reads.append((user_id, kind, list(ids)))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0)  # a round trip: the other reads may start meanwhile
        self.in_flight -= 1
        return {i: f"entity {i}" for i in ids if not i.startswith("gone")}


async def test_one_read_per_kind_all_in_flight_together() -> None:
    records = Records()
    short = {
        Kind.MEMORY_UNIT: [scored("m1", Kind.MEMORY_UNIT), scored("gone-m", Kind.MEMORY_UNIT)],
        Kind.CONCEPT: [scored("c1", Kind.CONCEPT)],
        Kind.ARTIFACT: [scored("gone-b", Kind.ARTIFACT), scored("gone-a", Kind.ARTIFACT)],
    }
    entities, missing = await run_hydration("u1", short, records)
    assert sorted((kind, ids) for _, kind, ids in records.reads) == sorted(
        [(Kind.MEMORY_UNIT, ["m1", "gone-m"]), (Kind.CONCEPT, ["c1"]), (Kind.ARTIFACT, ["gone-b", "gone-a"])]
    )
    assert records.peak == 3
    assert entities == {"m1": "entity m1", "c1": "entity c1"}
    assert missing == {"memory_unit": ["gone-m"], "artifact": ["gone-a", "gone-b"]}


async def test_kinds_without_ids_are_not_read() -> None:
    records = Records()
    entities, missing = await run_hydration("u1", {Kind.CONCEPT: [scored("c1", Kind.CONCEPT)]}, records)
    assert [(kind, ids) for _, kind, ids in records.reads] == [(Kind.CONCEPT, ["c1"])]
    assert (entities, missing) == ({"c1": "entity c1"}, {})
    assert await run_hydration("u1", {}, records) == ({}, {})
    assert len(records.reads) == 1
