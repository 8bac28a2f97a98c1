"""Merging concepts (#33): the pure plan, the route's keys, errors and audit line, and aliases'
validation (the stores' side runs in tests/contract/test_aliases_merge.py)."""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import ValidationError

from hrt.auth import new_key
from hrt.merge import plan_merge
from hrt.records import MAX_ALIASES, Concept, EdgeType, Relation, entity_text
from tests.helpers import bearer


def _c(cid: str, name: str, aliases: list[str] | None = None) -> Concept:
    return Concept(user_id="u", id=cid, name=name, aliases=aliases or [])


def _r(source: str, target: str, weight: float, type_: str = "RELATED_TO") -> Relation:
    return Relation(user_id="u", type=EdgeType(type_), source=source, target=target, weight=weight)


def test_the_plan_keeps_the_stronger_duplicate_and_drops_self_loops():
    target, b, c = _c("t", "Robert"), _c("b", "Bob", ["Bobby"]), _c("c", "robert")
    relations = [
        _r("x", "t", 0.5),
        _r("x", "b", 0.9),  # lands on x -> t: stronger, wins
        _r("y", "t", 0.8),
        _r("y", "c", 0.8),  # a tie with the target's own: the target's stays
        _r("t", "b", 1.0),  # a self-loop once merged
        _r("b", "c", 0.4),  # likewise
        _r("m1", "c", 0.3, "MENTIONS"),
    ]
    plan = plan_merge(target, [c, b], relations)
    assert plan.target is not None and plan.target.aliases == ["Bob", "Bobby"], "'robert' repeats the name"
    moved = {(r.source, r.target, r.type.value): r.weight for r in plan.relations}
    assert moved == {("x", "t", "RELATED_TO"): 0.9, ("m1", "t", "MENTIONS"): 0.3}
    assert (plan.moved, plan.dropped) == (2, 3)
    assert [d.id for d in plan.deletions] == ["b", "c"]
    # the same inputs in another order give the same plan
    again = plan_merge(target, [b, c], list(reversed(relations)))
    assert again.relations == plan.relations and again.target == plan.target


def test_nothing_to_merge_is_an_empty_plan():
    plan = plan_merge(_c("t", "T", ["tee"]), [], [_r("x", "t", 0.5)])
    assert plan.target is None and plan.relations == [] and plan.deletions == [] and plan.aliases == ["tee"]


def test_aliases_are_bounded_and_distinct():
    assert _c("a", "Robert", ["Bob", "Bobby"]).aliases == ["Bob", "Bobby"]
    for bad in (["bob", "BOB"], ["robert"], [" "], ["x" * 201], [f"a{i}" for i in range(MAX_ALIASES + 1)]):
        with pytest.raises(ValidationError) as err:
            _c("a", "Robert", bad)
        assert "aliases" in str(err.value)


def test_a_concept_without_aliases_keeps_its_text():
    plain = Concept(user_id="u", id="a", name="Postgres", type="technology", description="The database.")
    assert entity_text(plain) == "Postgres. technology. The database."
    named = plain.model_copy(update={"aliases": ["PG", "PostgreSQL"]})
    assert entity_text(named) == "Postgres (PG, PostgreSQL). technology. The database."


MERGE = "/v1/users/u1/concepts/c-pg/merge"


async def test_the_route_merges_once_and_audits(api, loaded_service, caplog):
    token, record = new_key("writer", ["ingest"], ["u1"])
    await loaded_service.records.create_key(record)
    await loaded_service.ingest(
        [
            Concept(user_id="u1", id="c-pg2", name="PostgreSQL"),
            _r("m1", "c-pg2", 0.7, "MENTIONS").model_copy(update={"user_id": "u1"}),
        ]
    )
    with caplog.at_level(logging.INFO, logger="hrt.audit"):
        r = await api.post(MERGE, json={"ids": ["c-pg2"]}, headers=bearer(token))
        again = await api.post(MERGE, json={"ids": ["c-pg2"]}, headers=bearer(token))
    assert r.status_code == 200, r.text
    assert r.json() == {
        "user_id": "u1",
        "target": "c-pg",
        "merged": ["c-pg2"],
        "absent": [],
        "relations_moved": 1,
        "relations_dropped": 0,
        "aliases": ["PostgreSQL"],
    }
    assert again.status_code == 200 and again.json()["merged"] == [] and again.json()["absent"] == ["c-pg2"]
    lines = [json.loads(x.getMessage()) for x in caplog.records if x.name == "hrt.audit"]
    assert [(x["route"], x["outcome"], x["deleted"], x["target_concept"]) for x in lines] == [
        ("/v1/users/{user_id}/concepts/{concept_id}/merge", "ok", 1, "c-pg"),
        ("/v1/users/{user_id}/concepts/{concept_id}/merge", "ok", 0, "c-pg"),
    ]


async def test_the_route_refuses_what_it_must(api, loaded_service):
    made = {}
    for name, scopes, users in (("w", ["ingest"], ["u1"]), ("r", ["retrieve"], ["u1"]), ("root", ["ingest"], None)):
        token, record = new_key(name, scopes, users)
        await loaded_service.records.create_key(record)
        made[name] = bearer(token)
    assert (await api.post(MERGE, json={"ids": ["c-bw"]})).status_code == 401
    assert (await api.post(MERGE, json={"ids": ["c-bw"]}, headers=made["r"])).status_code == 403
    other = await api.post("/v1/users/u2/concepts/xc-pg/merge", json={"ids": ["xc-bw"]}, headers=made["w"])
    assert other.status_code == 403 and other.json()["error"]["field"] == "user_id"
    # another user's concept reads as an absent one
    theirs = await api.post("/v1/users/u1/concepts/xc-pg/merge", json={"ids": ["c-bw"]}, headers=made["root"])
    absent = await api.post("/v1/users/u1/concepts/nope/merge", json={"ids": ["c-bw"]}, headers=made["root"])
    assert theirs.status_code == absent.status_code == 404
    assert theirs.json()["error"]["message"].replace("xc-pg", "nope") == absent.json()["error"]["message"]
    for body, field in (
        ({"ids": []}, "ids"),
        ({"ids": ["c-pg"]}, "ids"),
        ({"ids": ["a", "a"]}, "ids"),
        ({"ids": ["bad id"]}, "ids"),
        ({}, "ids"),
        ({"ids": ["c-bw"], "more": 1}, "body"),  # an unknown member: named by where it is, never echoed
    ):
        r = await api.post(MERGE, json=body, headers=made["w"])
        assert 400 <= r.status_code < 500 and field in (r.json()["error"].get("field") or ""), (body, r.text)
    bad = await api.post("/v1/users/u1/concepts/bad%20id/merge", json={"ids": ["c-bw"]}, headers=made["w"])
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "concept_id"
    assert "c-bw" in await loaded_service.records.ids("u1"), "a refused merge wrote nothing"
