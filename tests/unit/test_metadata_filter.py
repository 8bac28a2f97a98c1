"""Metadata filters (#48) at the HTTP API, in process: a bad filter is a 422 naming the field and
its position, never echoing the caller's keys or values; a filter absent leaves the answer byte for
byte as it was; a good one keeps memory units alone; the Python client sends browse's filter as one
JSON parameter. (Every operator, on every deployment: tests/contract/test_metadata_filters.py.)"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from hrt.auth import SCOPES, new_key
from hrt.client import _list_entities_call
from hrt.metadata_filter import FilterError, parse_filter, postgres_where_named, sqlite_where
from tests.helpers import bearer

RETRIEVE = {"user_id": "u1", "key_phrases": ["Project Phoenix"], "as_of": "2025-08-01T00:00:00Z"}
SECRET = "sekrit-value-xyz"


@pytest.fixture
async def token(loaded_service):
    made, record = new_key("all", SCOPES, ["u1"])
    await loaded_service.records.create_key(record)
    return made


@pytest.mark.parametrize(
    "where",
    [
        {"priority": {"gte": [SECRET]}},
        {SECRET + " !": 1},
        {"a": {"exists": SECRET}},
        {"a": {SECRET: 1}},
        {"or": SECRET},
    ],
)
async def test_a_bad_filter_is_a_422_naming_the_field_without_echoing_it(api, token, where):
    r = await api.post("/v1/retrieve", json={**RETRIEVE, "filters": {"metadata": where}}, headers=bearer(token))
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["field"] == "filters.metadata" and SECRET not in r.text
    page = await api.get("/v1/users/u1/entities", params={"metadata": json.dumps(where)}, headers=bearer(token))
    assert page.status_code == 422 and page.json()["error"]["field"] == "metadata" and SECRET not in page.text
    not_json = await api.get("/v1/users/u1/entities", params={"metadata": "{" + SECRET}, headers=bearer(token))
    assert not_json.status_code == 422 and SECRET not in not_json.text


async def test_no_filter_is_the_answer_of_before_and_a_filter_keeps_memory_units(api, token):
    plain = await api.post("/v1/retrieve", json=RETRIEVE, headers=bearer(token))
    again = await api.post("/v1/retrieve", json={**RETRIEVE, "filters": {}}, headers=bearer(token))
    assert plain.status_code == 200 and plain.content == again.content
    assert plain.json()["retrieved_concepts"]
    nothing = await api.post(
        "/v1/retrieve",
        json={**RETRIEVE, "filters": {"metadata": {"no_such_key": {"exists": True}}}},
        headers=bearer(token),
    )
    body = nothing.json()
    assert nothing.status_code == 200
    assert body["retrieved_memory_units"] == body["retrieved_concepts"] == body["retrieved_artifacts"] == []
    assert set(body) == set(plain.json())  # the same envelope
    page = await api.get(
        "/v1/users/u1/entities", params={"metadata": '{"no_such_key": {"exists": false}}'}, headers=bearer(token)
    )
    assert page.status_code == 200 and {e["kind"] for e in page.json()["entities"]} == {"memory_unit"}


def test_the_client_sends_browse_s_filter_as_one_json_parameter():
    call = _list_entities_call("u1", {"metadata": {"priority": {"gte": 2}}, "tags": ["a", "b"]}, None)
    query = parse_qs(urlsplit(call.path).query)
    assert query == {"metadata": ['{"priority":{"gte":2}}'], "tags": ["a", "b"]}


def test_the_grammar_compiles_to_parameterised_sql_in_both_dialects():
    tree = parse_filter({"and": [{"project": "apollo"}, {"owner.team": {"in": ["a", "b"]}}, {"not": {"x": None}}]})
    sql, args = sqlite_where(tree)
    assert "apollo" not in sql and "apollo" in args and '$.metadata."owner"."team"' in args
    named, params = postgres_where_named(tree)
    assert "%s" not in named and "apollo" not in named and ["metadata", "owner", "team"] in params.values()
    with pytest.raises(FilterError) as deep:
        parse_filter({"not": {"not": {"not": {"not": {"not": {"not": {"a": 1}}}}}}})
    assert "deeper" in deep.value.message
    with pytest.raises(FilterError) as many:
        parse_filter({"or": [{"a": {"in": [1]}} for _ in range(65)]})
    assert "or" in str(many.value)
