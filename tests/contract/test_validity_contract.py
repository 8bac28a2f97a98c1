"""Facts that change (#20), at the ports: every adapter stores and reads validity intervals and
``SUPERSEDES`` edges alike, filters search by ``valid_at``, walks no edge whose interval does not
hold and never walks ``SUPERSEDES``. The same ``deployment`` fixture as the store contract suite
(embedded, PostgreSQL with embedded projections, services)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hrt.ingest import parse_jsonl
from hrt.records import EdgeType, Kind
from hrt.stores.base import ExpansionCaps, SearchFilter
from tests.contract.test_store_contract import ALL_KINDS, deployment  # noqa: F401  (the fixture)
from tests.helpers import artifact, concept, jsonl, mu, rel


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).timestamp()


# u3's project history: the deadline moved (m-new supersedes m-old), an owner who held the project
# only until April (an OWNS-like RELATED_TO edge with an interval), a concept valid from March, a
# design doc revised (a-v2 supersedes a-v1)
HISTORY = [
    concept("u3", "c-atlas", "Project Atlas", "the data platform migration"),
    concept("u3", "c-lee", "Lee", "engineer", type="person", valid_from="2025-03-01T00:00:00Z"),
    concept("u3", "c-kim", "Kim", "engineer", type="person"),
    mu("u3", "m-old", "Atlas deadline is March 31", "2025-01-10T09:00:00Z"),
    mu(
        "u3",
        "m-new",
        "Atlas deadline moved to June 30",
        "2025-03-20T09:00:00Z",
        supersedes=["m-old"],
        valid_from="2025-03-15T00:00:00Z",
    ),
    mu("u3", "m-kick", "Atlas kickoff notes", "2025-01-05T09:00:00Z", valid_to="2025-02-01T00:00:00Z"),
    artifact("u3", "a-v1", "Atlas design v1", "2025-01-12T00:00:00Z"),
    artifact("u3", "a-v2", "Atlas design v2", "2025-04-02T00:00:00Z", supersedes=["a-v1"]),
    rel("u3", "MENTIONS", "m-old", "c-atlas"),
    rel("u3", "MENTIONS", "m-new", "c-atlas"),
    rel("u3", "MENTIONS", "m-kick", "c-atlas"),
    rel("u3", "RELATED_TO", "c-atlas", "c-kim", valid_to="2025-04-01T00:00:00Z"),
    rel("u3", "RELATED_TO", "c-atlas", "c-lee", valid_from="2025-04-01T00:00:00Z"),
]


@pytest.fixture
async def history(deployment):  # noqa: F811
    await deployment.service.ingest(parse_jsonl(jsonl(HISTORY)))
    return deployment


async def test_records_keep_intervals_and_supersedes(history):
    got = await history.records.get_many("u3", Kind.MEMORY_UNIT, ["m-new", "m-kick"])
    assert got["m-new"].supersedes == ["m-old"]
    assert got["m-new"].valid_from == datetime(2025, 3, 15, tzinfo=UTC) and got["m-new"].valid_to is None
    assert got["m-kick"].valid_to == datetime(2025, 2, 1, tzinfo=UTC)
    (c,) = (await history.records.get_many("u3", Kind.CONCEPT, ["c-lee"])).values()
    assert c.valid_from == datetime(2025, 3, 1, tzinfo=UTC)
    rels = {(r.source, r.target, r.type): r for r in await history.records.all_relations("u3")}
    assert ("m-new", "m-old", EdgeType.SUPERSEDES) in rels and ("a-v2", "a-v1", EdgeType.SUPERSEDES) in rels
    kim = rels[("c-atlas", "c-kim", EdgeType.RELATED_TO)]
    assert kim.valid_from is None and kim.valid_to == datetime(2025, 4, 1, tzinfo=UTC)
    assert (await history.records.counts("u3"))["relation"] == 7


async def test_projections_carry_intervals(history):
    nodes = await history.graph.nodes("u3")
    # a memory unit's validity starts at its own valid_from, else at its creation
    assert (nodes["m-new"].valid_from, nodes["m-new"].valid_to) == (ts("2025-03-15T00:00:00Z"), None)
    assert (nodes["m-old"].valid_from, nodes["m-old"].valid_to) == (ts("2025-01-10T09:00:00Z"), None)
    assert nodes["m-kick"].valid_to == ts("2025-02-01T00:00:00Z")
    assert (nodes["c-lee"].valid_from, nodes["c-atlas"].valid_from) == (ts("2025-03-01T00:00:00Z"), None)
    edges = {(e.source, e.target, e.type): e for e in await history.graph.edges("u3")}
    assert edges[("m-new", "m-old", EdgeType.SUPERSEDES)].weight == 1.0
    assert edges[("c-atlas", "c-kim", EdgeType.RELATED_TO)].valid_to == ts("2025-04-01T00:00:00Z")
    assert edges[("c-atlas", "c-lee", EdgeType.RELATED_TO)].valid_from == ts("2025-04-01T00:00:00Z")
    docs = await history.vectors.docs("u3")
    assert (docs["m-kick"].valid_from, docs["m-kick"].valid_to) == (
        ts("2025-01-05T09:00:00Z"),
        ts("2025-02-01T00:00:00Z"),
    )
    assert docs["c-lee"].valid_from == ts("2025-03-01T00:00:00Z") and docs["c-atlas"].valid_from is None


async def test_search_keeps_what_is_valid_at(history):
    vec = history.embed("Atlas")

    async def found(at: float | None) -> set[str]:
        where = SearchFilter(valid_at=at) if at is not None else None
        rows = await history.vectors.search("u3", ["Atlas"], vec, ALL_KINDS, k=20, where=where)
        return {h.id for h in rows[0]}

    everything = await found(None)
    assert {"m-old", "m-new", "m-kick", "a-v1", "a-v2", "c-atlas"} <= everything
    jan20 = await found(ts("2025-01-20T00:00:00Z"))
    # m-kick holds until Feb 1; m-new from Mar 15; a-v2 from its creation (Apr 2); c-lee from Mar 1
    assert {"m-old", "m-kick", "a-v1", "c-atlas", "c-kim"} <= jan20
    assert not {"m-new", "a-v2", "c-lee"} & jan20
    may = await found(ts("2025-05-01T00:00:00Z"))
    assert {"m-new", "m-old", "a-v1", "a-v2", "c-lee"} <= may, "supersession is not the index's to apply"
    assert "m-kick" not in may


CAPS = ExpansionCaps(depth=1, fanout_per_node=25, max_per_kind=100, hop_decay=0.5)


async def test_expand_walks_only_edges_valid_at(history):
    def reached(out):
        return sorted(c.node.id for c in out if c.hops == 1)

    # every edge, whatever its interval; never SUPERSEDES
    assert reached(await history.graph.expand("u3", {"c-atlas": 1.0}, CAPS)) == [
        "c-kim",
        "c-lee",
        "m-kick",
        "m-new",
        "m-old",
    ]
    assert reached(await history.graph.expand("u3", {"m-new": 1.0}, CAPS)) == ["c-atlas"]
    assert reached(await history.graph.expand("u3", {"a-v2": 1.0}, CAPS)) == []
    # Kim's edge holds until April, Lee's from April; nodes are walked whatever their own interval
    march = await history.graph.expand("u3", {"c-atlas": 1.0}, CAPS, valid_at=ts("2025-03-10T00:00:00Z"))
    assert reached(march) == ["c-kim", "m-kick", "m-new", "m-old"]
    june = await history.graph.expand("u3", {"c-atlas": 1.0}, CAPS, valid_at=ts("2025-06-01T00:00:00Z"))
    assert reached(june) == ["c-lee", "m-kick", "m-new", "m-old"]
    (seed,) = [c for c in june if c.hops == 0]
    assert seed.node.id == "c-atlas"
    nodes = {c.node.id: c.node for c in june}
    assert (nodes["m-kick"].valid_from, nodes["m-kick"].valid_to) == (
        ts("2025-01-05T09:00:00Z"),
        ts("2025-02-01T00:00:00Z"),
    )


async def test_an_invalid_edge_does_not_use_up_the_fan_out(history):
    one = ExpansionCaps(depth=1, fanout_per_node=1, max_per_kind=100, hop_decay=0.5)
    # from c-kim the only edge is the one that ends in April: not walked in June
    assert [c.node.id for c in await history.graph.expand("u3", {"c-kim": 1.0}, one)] == ["c-atlas", "c-kim"]
    june = ts("2025-06-01T00:00:00Z")
    assert [c.node.id for c in await history.graph.expand("u3", {"c-kim": 1.0}, one, valid_at=june)] == ["c-kim"]
    # c-atlas: its links in visit order start with the newest memory units; with a fan-out of 4
    # Kim's edge (ended) must not take a slot that Lee's (current) gets
    four = ExpansionCaps(depth=1, fanout_per_node=4, max_per_kind=100, hop_decay=0.5)
    all_four = await history.graph.expand("u3", {"c-atlas": 1.0}, four, valid_at=june)
    assert "c-lee" in {c.node.id for c in all_four} and "c-kim" not in {c.node.id for c in all_four}


async def test_neighbors_by_validity_and_supersession(history):
    nb = await history.graph.neighbors("u3", ["c-atlas"], EdgeType.MENTIONS, False, 10)
    assert [n.id for n in nb["c-atlas"]] == ["m-new", "m-old", "m-kick"]
    march = await history.graph.neighbors(
        "u3", ["c-atlas"], EdgeType.MENTIONS, False, 10, valid_at=ts("2025-03-01T00:00:00Z")
    )
    assert [n.id for n in march["c-atlas"]] == ["m-old"], "m-kick ended in February, m-new starts in March"
    related = await history.graph.neighbors(
        "u3", ["c-atlas"], EdgeType.RELATED_TO, True, 10, valid_at=ts("2025-06-01T00:00:00Z")
    )
    assert [n.id for n in related["c-atlas"]] == ["c-lee"]
    successors = await history.graph.neighbors("u3", ["m-old", "a-v1", "m-new"], EdgeType.SUPERSEDES, False, 10)
    assert [n.id for n in successors["m-old"]] == ["m-new"] and [n.id for n in successors["a-v1"]] == ["a-v2"]
    assert successors.get("m-new", []) == []
    # as of before the successor was written, nothing supersedes m-old yet
    early = await history.graph.neighbors(
        "u3", ["m-old"], EdgeType.SUPERSEDES, False, 10, not_after=ts("2025-03-01T00:00:00Z")
    )
    assert early.get("m-old", []) == []
    older = await history.graph.neighbors("u3", ["m-new"], EdgeType.SUPERSEDES, True, 10)
    assert [n.id for n in older["m-new"]] == ["m-old"]


async def test_deleting_a_successor_removes_its_supersedes_edge(history):
    await history.service.ingest(
        parse_jsonl(jsonl([{"op": "delete", "kind": "memory_unit", "user_id": "u3", "muid": "m-new"}]))
    )
    assert not any(e.type is EdgeType.SUPERSEDES and e.source == "m-new" for e in await history.graph.edges("u3"))
    successors = await history.graph.neighbors("u3", ["m-old"], EdgeType.SUPERSEDES, False, 10)
    assert successors.get("m-old", []) == []
