"""Aliases and merging concepts (#33), against every deployment: embedded, PostgreSQL with embedded
projections, and PostgreSQL + Neo4j + Weaviate, read back through each adapter's own reads."""

from __future__ import annotations

from hrt.contract import RetrieveRequest
from hrt.doctor import check
from hrt.ingest import parse_jsonl
from hrt.records import Kind
from tests.conftest import FIXED_NOW
from tests.contract.test_store_contract import ALL_KINDS, Deployment, deployment
from tests.helpers import concept, jsonl, rel

__all__ = ["deployment"]


async def _search(d: Deployment, user: str, phrase: str, cid: str):
    hits = await d.vectors.search(user, [phrase], d.service.embedder.embed([phrase]), ALL_KINDS, k=10)
    return {h.id: h for h in hits[0]}.get(cid)


async def test_an_alias_is_found_by_both_search_legs(deployment: Deployment):
    d = deployment
    await d.service.ingest(parse_jsonl(jsonl([concept("u1", "c-rp", "Robert Paulson", "A member of the group.")])))
    before = await _search(d, "u1", "Bob", "c-rp")
    assert before is None or before.lexical_rank is None, "no word of the concept is 'Bob' yet"
    record = concept("u1", "c-rp", "Robert Paulson", "A member of the group.", aliases=["Bob", "Bobby"])
    await d.service.ingest(parse_jsonl(jsonl([record])))
    after = await _search(d, "u1", "Bob", "c-rp")
    assert after is not None and after.lexical_rank == 1 and after.vector_rank is not None
    assert before is None or after.similarity > before.similarity
    got = await d.records.get_many("u1", Kind.CONCEPT, ["c-rp"])
    assert got["c-rp"].aliases == ["Bob", "Bobby"]
    assert await _search(d, "u2", "Bob", "c-rp") is None, "another user's alias matched"
    ctx = await d.service.retrieve(RetrieveRequest(user_id="u1", key_phrases=["Bobby"], as_of=FIXED_NOW))
    assert ctx.unmatched_key_phrases == []
    assert "c-rp" in ctx.retrieval_metadata.phrase_grounding[0].seed_ids


MERGE_FIXTURE = [
    concept("u1", "c-pg2", "PostgreSQL", "The billing database.", aliases=["PG"]),
    concept("u1", "c-pg3", "Postgres DB", ""),
    rel("u1", "MENTIONS", "m3", "c-pg2", weight=0.4),  # weaker than m3 -> c-pg (1.0): dropped
    rel("u1", "MENTIONS", "m1", "c-pg2", weight=0.7),  # moved
    rel("u1", "RELATED_TO", "c-pg2", "c-bw", weight=0.3),  # moved, outgoing
    rel("u1", "RELATED_TO", "c-pg", "c-pg2", weight=0.9),  # a self-loop once merged: dropped
    rel("u1", "DERIVED_FROM", "a1", "c-pg3"),  # moved
    rel("u1", "RELATED_TO", "c-phx", "c-pg3", weight=0.5),  # lands with the next: the stronger wins
    rel("u1", "RELATED_TO", "c-phx", "c-pg2", weight=0.6, relation_type="uses"),
]


def _edges_of(edges, ident: str) -> dict[tuple[str, str, str], tuple[float, str | None]]:
    return {
        (e.source, e.target, e.type.value): (round(e.weight, 4), e.relation_type)
        for e in edges
        if ident in (e.source, e.target)
    }


async def test_merge_moves_relations_names_and_deletes_in_every_store(deployment: Deployment):
    d = deployment
    await d.service.ingest(parse_jsonl(jsonl(MERGE_FIXTURE)))
    result = await d.service.merge_concepts("u1", "c-pg", ["c-pg2", "c-pg3", "nope", "m1"])
    assert result.merged == ["c-pg2", "c-pg3"] and result.absent == ["m1", "nope"]
    assert (result.relations_moved, result.relations_dropped) == (4, 3)
    assert result.aliases == ["PostgreSQL", "PG", "Postgres DB"]

    want = {
        ("m3", "c-pg", "MENTIONS"): (1.0, None),
        ("m4", "c-pg", "MENTIONS"): (1.0, None),
        ("m1", "c-pg", "MENTIONS"): (0.7, None),
        ("c-pg", "c-bw", "RELATED_TO"): (0.3, None),
        ("a1", "c-pg", "DERIVED_FROM"): (1.0, None),
        ("c-phx", "c-pg", "RELATED_TO"): (0.6, "uses"),
    }
    assert _edges_of(await d.records.all_relations("u1"), "c-pg") == want
    assert _edges_of(await d.graph.edges("u1"), "c-pg") == want
    for gone in ("c-pg2", "c-pg3"):
        assert gone not in await d.records.ids("u1")
        assert gone not in await d.graph.ids("u1")
        assert gone not in await d.vectors.ids("u1")
        assert not _edges_of(await d.graph.edges("u1"), gone)
    target = (await d.records.get_many("u1", Kind.CONCEPT, ["c-pg"]))["c-pg"]
    assert target.aliases == ["PostgreSQL", "PG", "Postgres DB"]
    assert "Postgres DB" in (await d.vectors.docs("u1"))["c-pg"].text
    assert (await _search(d, "u1", "PG", "c-pg")) is not None, "the merged concept's alias finds the target"
    drift = await check(d.records, d.graph, d.vectors, ["u1", "u2"])
    assert [x.as_dict() for x in drift if not x.clean] == []

    # again: nothing changes, and it is no error
    edges = await d.graph.edges("u1")
    again = await d.service.merge_concepts("u1", "c-pg", ["c-pg2", "c-pg3"])
    assert again.merged == [] and again.absent == ["c-pg2", "c-pg3"] and again.relations_moved == 0
    assert await d.graph.edges("u1") == edges
    assert (await d.records.get_many("u1", Kind.CONCEPT, ["c-pg"]))["c-pg"].aliases == target.aliases


async def test_merge_stays_within_its_user(deployment: Deployment):
    d = deployment
    before = await d.graph.edges("u2")
    result = await d.service.merge_concepts("u1", "c-pg", ["xc-phx", "xc-bw"])
    assert result.merged == [] and result.absent == ["xc-bw", "xc-phx"]
    assert await d.graph.edges("u2") == before
    assert {"xc-phx", "xc-bw"} <= set(await d.records.ids("u2"))
