import json

import pytest

from hrt.errors import Conflict, InvalidInput
from hrt.ingest import parse_jsonl
from tests.helpers import concept, jsonl, mu, rel


async def counts(svc, user="u1"):
    return await svc.records.counts(user)


@pytest.mark.parametrize(
    ("line", "field", "text"),
    [
        ("{not json", "line 2", "line 2: not valid JSON"),
        (json.dumps({"kind": "person", "user_id": "u1"}), "kind", "line 2: field 'kind'"),
        (
            json.dumps(mu("u1", "m9", "x") | {"importance_score": 11}),
            "importance_score",
            "line 2: field 'importance_score'",
        ),
        (json.dumps(mu("u1", "m9", "x") | {"creation_ts": "yesterday"}), "creation_ts", "field 'creation_ts'"),
        (json.dumps({k: v for k, v in mu("u1", "m9", "x").items() if k != "content"}), "content", "field 'content'"),
        (json.dumps(mu("u1", "bad id", "x")), "muid", "field 'muid'"),
        (json.dumps(mu("u1", "m9", "x") | {"op": "merge"}), "op", "field 'op'"),
        (json.dumps(rel("u1", "LIKES", "a", "b")), "type", "field 'type'"),
    ],
)
def test_a_bad_line_is_named_with_its_number_and_field(line, field, text):
    lines = [json.dumps(concept("u1", "c1", "Alpha")), line, json.dumps(concept("u1", "c2", "Beta"))]
    with pytest.raises(InvalidInput) as info:
        parse_jsonl(lines)
    assert info.value.field == field
    assert text in info.value.message


async def test_ingest_is_idempotent_by_id(hashing_service):
    records = parse_jsonl(
        jsonl([concept("u1", "c1", "Alpha"), mu("u1", "m1", "about alpha"), rel("u1", "MENTIONS", "m1", "c1")])
    )
    await hashing_service.ingest(records)
    first = await counts(hashing_service)
    await hashing_service.ingest(records)
    assert (
        await counts(hashing_service)
        == first
        == {
            "memory_unit": 1,
            "concept": 1,
            "artifact": 0,
            "relation": 1,
            "preference": 0,
        }
    )
    await hashing_service.ingest(parse_jsonl(jsonl([concept("u1", "c1", "Alpha v2")])))
    got = await hashing_service.records.get_many("u1", "concept", ["c1"])
    assert got["c1"].name == "Alpha v2"


async def test_a_batch_with_a_dangling_relation_writes_nothing(hashing_service):
    records = parse_jsonl(
        jsonl([concept("u1", "c1", "Alpha"), mu("u1", "m1", "about alpha"), rel("u1", "MENTIONS", "m1", "c-missing")])
    )
    with pytest.raises(InvalidInput) as info:
        await hashing_service.ingest(records)
    assert info.value.field == "target" and "c-missing" in info.value.message
    assert await counts(hashing_service) == {
        k: 0 for k in ("memory_unit", "concept", "artifact", "relation", "preference")
    }


async def test_relation_endpoints_must_have_the_right_kinds(hashing_service):
    records = parse_jsonl(
        jsonl([concept("u1", "c1", "Alpha"), concept("u1", "c2", "Beta"), rel("u1", "MENTIONS", "c1", "c2")])
    )
    with pytest.raises(InvalidInput, match="MENTIONS source must be memory_unit"):
        await hashing_service.ingest(records)


async def test_an_id_cannot_change_kind(hashing_service):
    await hashing_service.ingest(parse_jsonl(jsonl([concept("u1", "x1", "Alpha")])))
    with pytest.raises(Conflict):
        await hashing_service.ingest(parse_jsonl(jsonl([mu("u1", "x1", "now a memory")])))
    # the same id under another user is another entity
    await hashing_service.ingest(parse_jsonl(jsonl([mu("u2", "x1", "u2's memory")])))
    assert (await counts(hashing_service, "u2"))["memory_unit"] == 1


async def test_deletes_reach_records_graph_and_index(loaded_service):
    svc = loaded_service
    assert await svc.delete_entity("u1", "concept", "c-pg") == 1
    assert await svc.records.get_many("u1", "concept", ["c-pg"]) == {}
    nbrs = await svc.graph.neighbors("u1", ["m3"], "MENTIONS", True, 10)
    assert nbrs["m3"] == []
    hits = await svc.vectors.search("u1", ["postgres"], svc.embedder.embed(["postgres"]), list(("concept",)), 10)
    assert all(h.id != "c-pg" for h in hits[0])
    assert await svc.delete_entity("u1", "concept", "c-pg") == 0  # idempotent
    # the other user's same-named concept is untouched
    assert await svc.records.get_many("u2", "concept", ["xc-pg"])


async def test_delete_records_by_key(loaded_service):
    svc = loaded_service
    before = await counts(svc)
    await svc.ingest(
        parse_jsonl(
            jsonl(
                [
                    {
                        "op": "delete",
                        "kind": "relation",
                        "user_id": "u1",
                        "type": "FOLLOWS",
                        "source": "m2",
                        "target": "m1",
                    },
                    {
                        "op": "delete",
                        "kind": "preference",
                        "user_id": "u1",
                        "target_kind": "concept",
                        "target": "c-phx",
                    },
                ]
            )
        )
    )
    after = await counts(svc)
    assert after["relation"] == before["relation"] - 1
    assert after["preference"] == before["preference"] - 1


async def test_delete_user_removes_everything_of_that_user_only(loaded_service):
    svc = loaded_service
    assert await svc.delete_user("u1") == 8
    assert not await svc.records.user_exists("u1")
    assert await svc.records.user_exists("u2")
    hits = await svc.vectors.search(
        "u1", ["postgres"], svc.embedder.embed(["postgres"]), ["memory_unit", "concept", "artifact"], 10
    )
    assert hits == [[]]
