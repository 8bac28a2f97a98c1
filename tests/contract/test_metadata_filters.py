"""Metadata filters with operators (#48), at every deployment (embedded; PostgreSQL records with
embedded projections; services): browse and retrieval keep exactly the memory units whose metadata
the filter matches, each store deciding in its own query (SQLite's JSON functions, PostgreSQL's
jsonb), with the same answers everywhere; a filter matching nothing is an empty, well-formed
answer; a bad filter is refused naming its position."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from hrt.browse import BrowseRequest, browse_entities
from hrt.contract import RetrieveRequest
from hrt.errors import InvalidInput
from hrt.ingest import parse_jsonl
from tests.conftest import FIXED_NOW
from tests.contract.test_store_contract import deployment  # noqa: F401  (the fixture)
from tests.helpers import concept, jsonl, mu

UNITS = {
    "mf-a": {
        "project": "apollo",
        "priority": 3,
        "labels": ["urgent", "q3"],
        "owner": {"team": "infra"},
        "done": False,
        "note": "call the vendor",
    },
    "mf-b": {"project": "apollo", "priority": 1, "done": True, "note": None},
    "mf-c": {"project": "zeus", "priority": "3", "labels": ["q3"]},
    "mf-d": {"project": "Apollo", "priority": 2.5},
    "mf-e": {},
    "mf-f": {"priority": 10, "owner": {"team": "data"}},
}

TOPICS = [
    "fuel valves pressure test",
    "telemetry antenna alignment",
    "weather briefing at dawn",
    "crew seat harness inspection",
    "range safety officer sign-off",
    "payload fairing torque values",
]

CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({"project": "apollo"}, ["mf-a", "mf-b"]),
    ({"project": {"eq": "apollo"}, "done": True}, ["mf-b"]),
    ({"priority": {"gte": 2}}, ["mf-a", "mf-d", "mf-f"]),  # numbers only: the string "3" is not
    ({"priority": {"gte": "3"}}, ["mf-c"]),  # strings only
    ({"priority": {"gt": 1, "lte": 3}}, ["mf-a", "mf-d"]),
    ({"priority": {"lt": 2.5}}, ["mf-b"]),
    ({"priority": 3.0}, ["mf-a"]),  # 3 and 3.0 are one number
    ({"project": {"ne": "apollo"}}, ["mf-c", "mf-d"]),  # an absent field is not "not apollo"
    ({"project": {"in": ["zeus", "Apollo"]}}, ["mf-c", "mf-d"]),
    ({"project": {"nin": ["apollo"]}}, ["mf-c", "mf-d"]),
    ({"labels": {"contains": "q3"}}, ["mf-a", "mf-c"]),  # an element of a list
    ({"note": {"contains": "vendor"}}, ["mf-a"]),  # a substring
    ({"note": {"exists": True}}, ["mf-a", "mf-b"]),  # null is there
    ({"note": None}, ["mf-b"]),
    ({"project": {"exists": False}}, ["mf-e", "mf-f"]),
    ({"owner.team": "infra"}, ["mf-a"]),
    ({"done": False}, ["mf-a"]),
    ({"not": {"project": "apollo"}}, ["mf-c", "mf-d", "mf-e", "mf-f"]),
    ({"or": [{"project": "zeus"}, {"and": [{"project": "apollo"}, {"priority": {"lt": 2}}]}]}, ["mf-b", "mf-c"]),
    ({"priority": {"gt": 100}}, []),
]


@pytest.fixture
async def filtered(deployment):  # noqa: F811
    records = [
        mu("u3", muid, f"Rocket launch checklist: {what}", f"2025-05-0{i + 1}T09:00:00Z", metadata=meta)
        for i, ((muid, meta), what) in enumerate(zip(UNITS.items(), TOPICS, strict=True))
    ]
    records.append(concept("u3", "c-rocket", "Rocket launch", "launch planning"))
    records += [
        {"kind": "relation", "user_id": "u3", "type": "MENTIONS", "source": m, "target": "c-rocket"} for m in UNITS
    ]
    await deployment.service.ingest(parse_jsonl(jsonl(records)))
    return deployment


async def browse_ids(d: Any, where: dict[str, Any]) -> list[str]:
    page = await browse_entities(d.records, "u3", BrowseRequest(metadata=json.dumps(where)), FIXED_NOW)
    return [e.id for e in page.entities]


async def test_browse_keeps_the_memory_units_each_operator_matches(filtered):
    for where, expected in CASES:
        assert await browse_ids(filtered, where) == expected, where
    # without a filter, the concept is listed too; with one, memory units alone
    every = await browse_entities(filtered.records, "u3", BrowseRequest(), FIXED_NOW)
    assert "c-rocket" in [e.id for e in every.entities]


async def test_retrieval_returns_only_what_the_filter_matches_and_nothing_is_well_formed(filtered):
    base = {"user_id": "u3", "seed_ids": ["c-rocket"], "limits": {"memory_units": 20}, "as_of": FIXED_NOW.isoformat()}
    plain = await filtered.service.retrieve(RetrieveRequest.model_validate(base))
    assert {m.muid for m in plain.retrieved_memory_units} == set(UNITS)
    for where, expected in CASES:
        body = {**base, "filters": {"metadata": where}}
        out = await filtered.service.retrieve(RetrieveRequest.model_validate(body))
        assert sorted(m.muid for m in out.retrieved_memory_units) == expected, where
        assert out.retrieved_concepts == [] and out.retrieved_artifacts == []
    empty = await filtered.service.retrieve(
        RetrieveRequest.model_validate({**base, "filters": {"metadata": {"priority": {"gt": 100}}}})
    )
    assert empty.retrieved_memory_units == [] and empty.retrieval_summary
    # a filter the same as none leaves the answer byte for byte as it was
    again = await filtered.service.retrieve(RetrieveRequest.model_validate(base))
    assert again.model_dump_json() == plain.model_dump_json()


@pytest.mark.parametrize(
    ("where", "position"),
    [
        ({"priority": {"gte": [2]}}, "gte"),
        ({"and": []}, "and"),
        ({"or": [{"a": 1}, {"b": {"between": 1}}]}, "or[1]"),
        ({"not": {"a": {"in": []}}}, "not.in"),
        ({"bad key!": 1}, "member"),
        ({"a": {"contains": ""}}, "contains"),
        ({"a": {"exists": "yes"}}, "exists"),
        ({"and": [{"and": [{"and": [{"and": [{"and": [{"and": [{"a": 1}]}]}]}]}]}]}, "deeper"),
    ],
)
async def test_a_bad_filter_is_refused_naming_its_position_not_its_values(filtered, where, position):
    with pytest.raises(InvalidInput) as caught:
        await browse_ids(filtered, where)
    assert caught.value.field == "metadata" and position in caught.value.message
    assert "bad key" not in caught.value.message and "yes" not in caught.value.message
    with pytest.raises(ValidationError) as refused:
        RetrieveRequest.model_validate({"user_id": "u3", "query": "x", "filters": {"metadata": where}})
    [error] = refused.value.errors()
    assert error["loc"] == ("filters", "metadata") and position in error["msg"] and "bad key" not in error["msg"]
