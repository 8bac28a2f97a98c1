"""One suite of store behaviour, run against every adapter of the three ports.

The ``deployment`` fixture is parametrised by adapter family: embedded (one SQLite file), postgres
(PostgreSQL records with embedded projections) and services (PostgreSQL, Neo4j, Weaviate).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from hrt.config import Settings
from hrt.ingest import parse_jsonl
from hrt.records import EdgeType, Kind
from hrt.service import HRTService
from hrt.stores.base import ExpansionCaps, GraphStore, RecordStore, VectorIndex
from tests.conftest import FIXED_NOW
from tests.helpers import HashingEmbedder, concept, jsonl, mu, rel, small_graph

ALL_KINDS = [Kind.MEMORY_UNIT, Kind.CONCEPT, Kind.ARTIFACT]


@dataclass
class Deployment:
    records: RecordStore
    graph: GraphStore
    vectors: VectorIndex
    service: HRTService

    def embed(self, text: str):
        return self.service.embedder.embed([text])


USERS = ("u1", "u2", "u3", "ghost")


@pytest.fixture(
    params=[
        "embedded",
        pytest.param("postgres", marks=pytest.mark.integration),
        pytest.param("services", marks=pytest.mark.integration),
    ]
)
async def deployment(request, tmp_path) -> AsyncIterator[Deployment]:
    """``embedded``: one SQLite file. ``postgres``: PostgreSQL records, embedded projections fed by
    the outbox projector. ``services``: PostgreSQL + Neo4j + Weaviate, all real processes."""
    settings = Settings(db_path=tmp_path / "c.db")
    if request.param in ("postgres", "services"):
        from hrt.stores.postgres.migrate import migrate

        dsn = request.getfixturevalue("postgres_dsn")
        migrate(dsn)
        settings = settings.model_copy(update={"record_store": "postgres", "postgres_dsn": dsn})
    if request.param == "services":
        stack = request.getfixturevalue("stack_manager").need("neo4j", "weaviate")
        settings = settings.model_copy(
            update={
                "graph_store": "neo4j",
                "neo4j_uri": stack.neo4j_uri,
                "neo4j_password": SecretStr(stack.neo4j_password),  # every store runs with auth on
                "vector_index": "weaviate",
                "weaviate_api_key": SecretStr(stack.weaviate_api_key),
                "weaviate_http_port": stack.weaviate_http_port,
                "weaviate_grpc_port": stack.weaviate_grpc_port,
                "weaviate_collection": "HRTContract" + uuid.uuid4().hex[:8],
            }
        )
    svc = await HRTService(settings, embedder=HashingEmbedder(), clock=lambda: FIXED_NOW).start()
    for user in USERS:  # Neo4j is one shared database: start each test from an empty graph
        await svc.graph.delete_user(user)
    await svc.ingest(parse_jsonl(jsonl(small_graph("u1") + small_graph("u2", prefix="x"))))
    yield Deployment(svc.records, svc.graph, svc.vectors, svc)
    for user in USERS:
        await svc.graph.delete_user(user)
        await svc.vectors.delete_user(user)
    await svc.close()


def test_adapters_implement_the_ports(deployment):
    assert isinstance(deployment.records, RecordStore)
    assert isinstance(deployment.graph, GraphStore)
    assert isinstance(deployment.vectors, VectorIndex)


async def test_get_many_is_scoped_by_user_and_kind(deployment):
    got = await deployment.records.get_many("u1", Kind.CONCEPT, ["c-phx", "xc-phx", "m1", "nope"])
    assert sorted(got) == ["c-phx"]
    assert got["c-phx"].user_id == "u1" and got["c-phx"].properties == {"due": "2025-12-31", "lead": "Maya"}
    assert await deployment.records.get_many("u2", Kind.CONCEPT, ["c-phx"]) == {}


async def test_preferences_and_counts(deployment):
    prefs = await deployment.records.preferences("u1")
    assert [(p.target_kind, p.target, p.weight) for p in prefs] == [
        ("concept", "c-phx", 0.9),
        ("source_type", "incident_report", 0.2),
    ]
    assert await deployment.records.counts("u1") == {
        "memory_unit": 4,
        "concept": 3,
        "artifact": 1,
        "relation": 8,
        "preference": 2,
    }
    assert await deployment.records.user_exists("u1") and not await deployment.records.user_exists("nobody")


async def test_search_returns_per_phrase_hits_with_both_ranks(deployment):
    phrases = ["Postgres billing tables", "bandwidth"]
    vecs = deployment.service.embedder.embed(phrases)
    hits = await deployment.vectors.search("u1", phrases, vecs, ALL_KINDS, k=5)
    assert len(hits) == 2
    first = {h.id: h for h in hits[0]}
    assert {"m3", "m4"} <= set(first)
    assert first["m3"].lexical_rank is not None and first["m3"].vector_rank is not None
    assert all(-1.0001 <= h.similarity <= 1.0001 for row in hits for h in row)
    assert all(not h.id.startswith("x") for row in hits for h in row), "another user's entity leaked"
    for row in hits:  # ranks are 1..n within each leg, each id once
        vector_ranks = sorted(h.vector_rank for h in row if h.vector_rank is not None)
        lexical_ranks = sorted(h.lexical_rank for h in row if h.lexical_rank is not None)
        assert vector_ranks == list(range(1, 6))
        assert lexical_ranks == list(range(1, len(lexical_ranks) + 1)) and 1 <= len(lexical_ranks) <= 5
        assert len({h.id for h in row}) == len(row)


async def test_search_filters_kinds_and_future(deployment):
    vec = deployment.embed("Postgres")
    only_concepts = await deployment.vectors.search("u1", ["Postgres"], vec, [Kind.CONCEPT], k=10)
    assert {h.kind for h in only_concepts[0]} == {Kind.CONCEPT}
    cutoff = 1750000000.0  # 2025-06-15: m3/m4 (July) are in the future
    past = await deployment.vectors.search("u1", ["Postgres"], vec, ALL_KINDS, k=10, not_after=cutoff)
    past_ids = {h.id for h in past[0]}
    assert not {"m3", "m4"} & past_ids
    assert {"c-pg", "c-phx", "c-bw"} <= past_ids, "entities without a timestamp are never in the future"
    assert await deployment.vectors.search("u1", ["Postgres"], vec, [], k=10) == [[]]


async def test_search_on_an_unknown_user_is_empty(deployment):
    assert await deployment.vectors.search("ghost", ["Postgres"], deployment.embed("Postgres"), ALL_KINDS, 5) == [[]]
    assert await deployment.vectors.ids("ghost") == {}
    await deployment.vectors.delete("ghost", ["m1"])  # a no-op, not an error
    await deployment.vectors.delete_user("ghost")


async def test_a_user_with_nothing_stored_gets_an_empty_context(deployment):
    """A new user's first request is answered, not refused, in every deployment: the record
    store's ``user_exists`` says nothing is stored, and the pipeline answers the empty context."""
    from hrt.contract import RetrieveRequest

    body = {"user_id": "ghost", "key_phrases": ["Postgres"], "as_of": "2025-08-01T00:00:00Z"}
    out = await deployment.service.retrieve(RetrieveRequest.model_validate(body))
    md = out.retrieval_metadata
    assert md.user_known is False and out.unmatched_key_phrases == ["Postgres"] and not md.degraded
    assert out.retrieved_memory_units == out.retrieved_concepts == out.retrieved_artifacts == []
    assert [s for s, status in md.stages.items() if status == "ok"] == ["intake", "assembly"]
    known = await deployment.service.retrieve(RetrieveRequest.model_validate({**body, "user_id": "u1"}))
    assert known.retrieval_metadata.user_known is None and known.retrieved_memory_units


async def test_similarities_are_the_search_cosines_of_the_users_own_ids(deployment):
    phrases = ["Postgres billing tables", "bandwidth"]
    vecs = deployment.service.embedder.embed(phrases)
    hits = await deployment.vectors.search("u1", phrases, vecs, ALL_KINDS, k=5)
    best: dict[str, float] = {}
    for row in hits:
        for h in row:
            best[h.id] = max(best.get(h.id, -2.0), h.similarity)
    asked = ["m1", "m2", "m3", "m4", "c-phx", "a1", "xm1", "nope"]  # xm1 is u2's; nope is nobody's
    got = await deployment.vectors.similarities("u1", asked, vecs)
    assert sorted(got) == ["a1", "c-phx", "m1", "m2", "m3", "m4"], "an id of another user or of nobody"
    for ident in set(got) & set(best):  # where search saw both phrases' cosines: the same best
        if all(any(h.id == ident for h in row) for row in hits):
            assert got[ident] == pytest.approx(best[ident], abs=1e-5)
    one = await deployment.vectors.similarities("u1", ["m3"], vecs[:1])
    assert one["m3"] == pytest.approx(next(h.similarity for h in hits[0] if h.id == "m3"), abs=1e-5)
    assert got["m3"] >= one["m3"] - 1e-6  # the best over the phrases
    assert (await deployment.vectors.similarities("u2", ["xm1", "m1"], vecs)).keys() == {"xm1"}
    assert await deployment.vectors.similarities("ghost", ["m1"], vecs) == {}
    assert await deployment.vectors.similarities("u1", [], vecs) == {}


async def test_passage_similarities_are_the_best_sentence_and_the_own_vector(deployment):
    """A memory unit of several sentences keeps their vectors (written through the deployment's
    write path: for services, PostgreSQL and the outbox into Weaviate); one without passages, or
    of another kind, has its own cosine twice. Scoped by user like every read."""
    from hrt.records import passage_texts

    embedder = deployment.service.embedder
    text = "The budget review moved to Friday. Ben brings the hiring plan. Lunch is on us."
    records = parse_jsonl(jsonl([mu("u3", "p1", text, title="Planning"), mu("u2", "p1", text, title="Planning")]))
    await deployment.service.ingest(records)
    phrases = ["hiring plan", "budget review"]
    vecs = embedder.embed(phrases)
    got = await deployment.vectors.passage_similarities("u3", ["p1", "nope"], vecs)
    assert list(got) == ["p1"]
    sentences = embedder.embed(passage_texts(records[0]))
    assert got["p1"][1] == pytest.approx(float((sentences @ vecs.T).max()), abs=1e-5)
    assert got["p1"][0] == pytest.approx((await deployment.vectors.similarities("u3", ["p1"], vecs))["p1"], abs=1e-5)
    assert got["p1"][1] > got["p1"][0]  # one sentence says it better than the whole
    plain = await deployment.vectors.passage_similarities("u1", ["m1", "c-phx", "xm1"], vecs)
    assert sorted(plain) == ["c-phx", "m1"]  # xm1 is u2's
    assert all(own == pytest.approx(best, abs=1e-6) for own, best in plain.values())  # no passages
    assert await deployment.vectors.passage_similarities("ghost", ["p1"], vecs) == {}


CAPS = ExpansionCaps(depth=2, fanout_per_node=25, max_per_kind=100, hop_decay=0.5)


async def test_expand_depth_zero_returns_seeds_with_attributes(deployment):
    out = await deployment.graph.expand("u1", {"m1": 0.8}, ExpansionCaps(0, 25, 100, 0.5))
    assert [(c.node.id, c.hops, c.path_score) for c in out] == [("m1", 0, 0.8)]
    node = out[0].node
    assert node.kind is Kind.MEMORY_UNIT and node.salience == pytest.approx(0.85)
    assert node.tags == ("phoenix",) and node.source_agent_id == "meeting-agent"
    assert out[0].mentions == ("c-phx",)


async def test_expand_walks_both_directions_with_decay_and_best_paths(deployment):
    found = await deployment.graph.expand("u1", {"m1": 0.8}, CAPS)
    assert [c.node.id for c in found] == sorted(c.node.id for c in found)  # the contract's order
    out = {c.node.id: c for c in found}
    assert out["c-phx"].hops == 1 and out["c-phx"].path_score == pytest.approx(0.4)
    # a memory unit carries the concepts it mentions, anything else none
    assert out["m1"].mentions == ("c-phx",) and out["c-phx"].mentions == () and out["a1"].mentions == ()
    assert out["m2"].hops == 1  # FOLLOWS, walked backwards
    assert out["a1"].hops == 1  # DERIVED_FROM, walked backwards
    assert out["c-bw"].hops == 2
    # via m2 (0.8*.5*.5=0.2) or via c-phx with weight 0.8 (0.8*.5*.5*.8=0.16): the best path wins
    assert out["c-bw"].path_score == pytest.approx(0.2)
    assert [s.node_id for s in out["c-bw"].path] == ["m2", "c-bw"]
    assert out["c-bw"].path[0].edge is EdgeType.FOLLOWS and out["c-bw"].path[0].forward is False
    assert "m3" not in out and not any(i.startswith("x") for i in out)
    assert out["c-phx"].last_mention_ts is not None


async def test_expand_respects_fanout_and_kind_caps(deployment, tmp_path):
    svc = deployment.service
    hub = [concept("u3", "hub", "Hub")] + [
        mu("u3", f"m{i:02d}", f"note {i}", f"2025-01-{i + 1:02d}T00:00:00Z") for i in range(20)
    ]
    hub += [rel("u3", "MENTIONS", f"m{i:02d}", "hub") for i in range(20)]
    await svc.ingest(parse_jsonl(jsonl(hub)))
    out = await deployment.graph.expand("u3", {"hub": 1.0}, ExpansionCaps(1, 5, 100, 0.5))
    reached = sorted(c.node.id for c in out if c.hops == 1)
    assert reached == ["m15", "m16", "m17", "m18", "m19"]  # newest first under the fan-out cap
    capped = await deployment.graph.expand("u3", {"hub": 1.0}, ExpansionCaps(1, 50, 3, 0.5))
    assert sum(1 for c in capped if c.node.kind is Kind.MEMORY_UNIT) == 3
    # a concept's newest mention, as of the request: m19 (Jan 20) now, m09 (Jan 10) as of Jan 10 noon
    jan = datetime(2025, 1, 1, tzinfo=UTC).timestamp()
    (now,) = await deployment.graph.expand("u3", {"hub": 1.0}, ExpansionCaps(0, 5, 100, 0.5))
    assert now.last_mention_ts == pytest.approx(jan + 19 * 86400)
    (then,) = await deployment.graph.expand("u3", {"hub": 1.0}, ExpansionCaps(0, 5, 100, 0.5), jan + 9.5 * 86400)
    assert then.last_mention_ts == pytest.approx(jan + 9 * 86400)
    assert (await deployment.graph.expand("u3", {"hub": 1.0}, ExpansionCaps(0, 5, 100, 0.5), jan - 1))[
        0
    ].last_mention_ts is None


async def test_expand_never_crosses_users_or_into_the_future(deployment):
    assert await deployment.graph.expand("u1", {"xm1": 1.0}, CAPS) == []
    out = await deployment.graph.expand("u1", {"c-pg": 1.0}, CAPS, not_after=1750000000.0)
    assert [c.node.id for c in out] == ["c-pg"]  # m3/m4 are after the cutoff


async def test_neighbors_newest_first(deployment):
    nb = await deployment.graph.neighbors("u1", ["c-pg", "c-phx"], EdgeType.MENTIONS, False, 10)
    assert [n.id for n in nb["c-pg"]] == ["m4", "m3"]
    assert [n.id for n in nb["c-phx"]] == ["m1"]
    out = await deployment.graph.neighbors("u1", ["m1"], EdgeType.MENTIONS, True, 10)
    assert [(n.id, n.label) for n in out["m1"]] == [("c-phx", "Project Phoenix")]
