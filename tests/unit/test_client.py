"""hrt.client against httpx.MockTransport: what it sends, retries and backoff (Retry-After, bounded
attempts and time, which requests may be sent again), and errors raised as HRT's own types. The
client against a real ``hrt serve`` is tests/integration/test_agents.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from hrt.client import (
    NO_RETRY,
    AsyncHRTClient,
    HRTClient,
    RetryPolicy,
    error_from_response,
    retry_after_seconds,
)
from hrt.contract import RetrieveRequest
from hrt.errors import (
    Conflict,
    Forbidden,
    HRTError,
    InvalidInput,
    MalformedBody,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    StoreUnavailable,
    Unauthenticated,
)

KEY = "hrt_0123456789ab_secret"
NO_JITTER = RetryPolicy(jitter=False)


def minimal_context(user: str = "u1") -> dict[str, object]:
    return {
        "retrieved_memory_units": [],
        "retrieved_concepts": [],
        "retrieved_artifacts": [],
        "retrieval_summary": "HRT: nothing",
        "scoring_details": {
            "total_candidates_considered": 0,
            "seed_entities_identified_from_key_phrases": 0,
            "graph_traversal_depth_used": 2,
            "weights_used": {
                "alpha_semantic_similarity": 0.4,
                "beta_recency": 0.25,
                "gamma_salience": 0.25,
                "delta_user_preference": 0.1,
            },
        },
        "unmatched_key_phrases": ["x"],
        "retrieval_metadata": {
            "contract_version": "9.4",
            "user_id": user,
            "as_of": "2025-08-01T00:00:00+00:00",
            "key_phrases_processed": ["x"],
            "key_phrase_source": "key_phrases",
            "phrase_grounding": [],
            "stages": {},
            "degraded": False,
            "degraded_reasons": [],
            "rerank_applied": False,
            "missing_records": {},
            "near_duplicates_removed": 0,
            "deployment": "embedded",
            "config_hash": "abc",
            "time_windows": [],
            "relevance_gate": {"threshold": 0.5, "best_semantic": {}},
            "validity": {
                "valid_at": "2026-01-01T00:00:00Z",
                "include_invalidated": False,
                "suppressed": {"artifact": 0, "concept": 0, "memory_unit": 0},
                "intervals": {},
            },
        },
    }


def error(status: int, code: str, message: str, field: str | None = None, **headers: str) -> httpx.Response:
    body = {"error": {"code": code, "message": message, "field": field}}
    return httpx.Response(status, json=body, headers=headers)


class Script:
    """A MockTransport handler answering from a list, recording every request."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def client(script: Script, retry: RetryPolicy = NO_JITTER) -> tuple[HRTClient, list[float]]:
    slept: list[float] = []
    c = HRTClient("http://hrt.test/", KEY, retry=retry, transport=httpx.MockTransport(script), sleep=slept.append)
    return c, slept


def test_retrieve_sends_the_key_and_the_request_and_returns_the_contract_model():
    script = Script(httpx.Response(200, json=minimal_context()))
    c, _ = client(script)
    doc = c.retrieve(user_id="u1", key_phrases=["Project Phoenix"], as_of=datetime(2025, 8, 1, tzinfo=UTC))
    sent = script.requests[0]
    assert sent.method == "POST" and sent.url == "http://hrt.test/v1/retrieve"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert json.loads(sent.content) == {
        "user_id": "u1",
        "key_phrases": ["Project Phoenix"],
        "as_of": "2025-08-01T00:00:00Z",
    }
    assert doc.retrieval_metadata.user_id == "u1" and doc.unmatched_key_phrases == ["x"]
    # a RetrieveRequest sends only what was set
    c.retrieve(RetrieveRequest(user_id="u1", query="phoenix"))
    assert json.loads(script.requests[1].content) == {"user_id": "u1", "query": "phoenix"}
    with pytest.raises(TypeError):
        c.retrieve({"user_id": "u1"}, query="both")


def test_every_route_has_a_typed_method():
    stats = {"memory_unit": 1, "concept": 2, "artifact": 0, "relation": 3, "preference": 0}
    key = {
        "name": "k",
        "key_id": "0123456789ab",
        "status": "active",
        "scopes": ["retrieve"],
        "users": ["u1"],
        "created_at": None,
        "expires_at": None,
        "revoked_at": None,
        "last_used_at": None,
        "rate_limit": None,
        "max_concurrency": None,
    }

    def route(request: httpx.Request) -> httpx.Response:
        match request.method, request.url.raw_path.decode():
            case "POST", "/v1/ingest":
                if request.headers["content-type"] == "application/x-ndjson":
                    return httpx.Response(200, json={"upserted": len(request.content.splitlines()), "deleted": 0})
                return httpx.Response(200, json={"upserted": len(json.loads(request.content)["records"]), "deleted": 0})
            case "DELETE", "/v1/users/u1/entities/concept/c%201":
                return httpx.Response(200, json={"upserted": 0, "deleted": 1})
            case "DELETE", "/v1/users/u1":
                return httpx.Response(200, json={"upserted": 0, "deleted": 9})
            case "GET", "/v1/users/u1/stats":
                return httpx.Response(200, json=stats)
            case "GET", "/healthz":
                return httpx.Response(200, json={"status": "ok"})
            case "GET", "/metrics":
                return httpx.Response(200, text="hrt_requests_total 1\n")
            case "GET", "/v1/keys":
                return httpx.Response(200, json=[key])
            case "POST", "/v1/keys":
                return httpx.Response(201, json={**key, **json.loads(request.content), "key": "hrt_x_y"})
            case "DELETE", "/v1/keys/k":
                return httpx.Response(200, json={**key, "status": "revoked"})
        return error(404, "not_found", f"no route {request.url.path}")

    c = HRTClient("http://hrt.test", KEY, transport=httpx.MockTransport(route))
    assert c.ingest([{"kind": "concept", "user_id": "u1", "id": "c1", "name": "One"}]).upserted == 1
    assert c.ingest_jsonl('{"a": 1}\n{"b": 2}\n').upserted == 2
    assert c.delete_entity("u1", "concept", "c 1").deleted == 1  # path segments are escaped
    assert c.delete_user("u1").deleted == 9
    assert c.stats("u1").relation == 3
    assert c.healthz().status == "ok"
    assert c.metrics().startswith("hrt_requests_total")
    assert c.list_keys()[0].name == "k"
    made = c.create_key("k", ["retrieve"], ["u1"], expires="30d")
    assert made.key == "hrt_x_y" and made.users == ["u1"]
    assert c.revoke_key("k").status == "revoked"
    with pytest.raises(NotFound):
        c.stats("u2")


def test_503_is_retried_with_exponential_backoff_then_succeeds():
    script = Script(error(503, "store_unavailable", "Neo4j is unavailable; retry later"), error(503, "x", "y"))
    script.answers.append(httpx.Response(200, json=minimal_context()))
    c, slept = client(script)
    assert c.retrieve(user_id="u1", key_phrases=["x"]).retrieval_metadata.user_id == "u1"
    assert len(script.requests) == 3 and slept == [0.25, 0.5]


def test_retry_after_is_honoured_in_seconds_and_as_a_date():
    script = Script(error(429, "rate_limited", "over its rate", **{"Retry-After": "3"}))
    script.answers.append(httpx.Response(200, json={"status": "ok"}))
    c, slept = client(script)
    c.healthz()
    assert slept == [3.0]  # not the 0.25 s backoff: the server's wait
    later = datetime.now(UTC) + timedelta(seconds=20)
    assert 18 <= (retry_after_seconds(format_datetime(later, usegmt=True)) or 0) <= 20
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_attempts_and_total_time_are_bounded():
    script = Script(error(503, "store_unavailable", "PostgreSQL is unavailable; retry later"))
    c, slept = client(script, RetryPolicy(max_attempts=3, jitter=False))
    with pytest.raises(StoreUnavailable) as caught:
        c.stats("u1")
    assert len(script.requests) == 3 and len(slept) == 2
    assert caught.value.code == "store_unavailable" and caught.value.public_message.startswith("PostgreSQL")
    # a Retry-After beyond the time budget: no wait at all, the refusal is raised with it
    script = Script(error(429, "rate_limited", "this API key is over its request rate", **{"Retry-After": "100"}))
    c, slept = client(script, RetryPolicy(max_total_s=30, jitter=False))
    with pytest.raises(RateLimited) as limited:
        c.stats("u1")
    assert len(script.requests) == 1 and slept == [] and limited.value.retry_after_s == 100
    # backoff doubles up to its cap, with jitter within [0.5, 1] of it
    c, _ = client(Script(httpx.Response(200)), RetryPolicy(backoff_s=1, max_backoff_s=3))
    waits = [c._backoff(n) for n in range(1, 6)]
    assert all(
        lo <= w <= hi for w, (lo, hi) in zip(waits, [(0.5, 1), (1, 2), (1.5, 3), (1.5, 3), (1.5, 3)], strict=True)
    )


def test_a_request_that_may_have_been_applied_is_sent_again_only_when_idempotent():
    # creating a key: not again after a 503 or a lost answer, but yes after a 429 or no connection
    for failure in (error(503, "store_unavailable", "down"), httpx.ReadTimeout("slow")):
        script = Script(failure, httpx.Response(201))
        c, _ = client(script)
        with pytest.raises(StoreUnavailable):
            c.create_key("k", ["retrieve"], None)
        assert len(script.requests) == 1, failure
    for failure in (error(429, "rate_limited", "rate", **{"Retry-After": "1"}), httpx.ConnectError("refused")):
        key = {"name": "k", "key_id": "1", "status": "active", "scopes": ["retrieve"], "users": "*"}
        key |= dict.fromkeys(("created_at", "expires_at", "revoked_at", "last_used_at", "rate_limit"))
        script = Script(failure, httpx.Response(201, json={**key, "max_concurrency": None, "key": "hrt_a_b"}))
        c, _ = client(script)
        assert c.create_key("k", ["retrieve"], None).key == "hrt_a_b"
        assert len(script.requests) == 2, failure
    # ingest is idempotent by id: retried after a 503 or a lost answer...
    ok = httpx.Response(200, json={"upserted": 1, "deleted": 0})
    for failure in (error(503, "store_unavailable", "down"), httpx.ReadError("reset")):
        script = Script(failure, ok)
        c, _ = client(script)
        assert c.ingest([{"kind": "concept", "user_id": "u1", "id": "c", "name": "C"}]).upserted == 1
        assert len(script.requests) == 2
    # ...unless writes are told not to be
    script = Script(error(503, "store_unavailable", "down"), ok)
    c, _ = client(script, RetryPolicy(retry_writes=False, jitter=False))
    with pytest.raises(StoreUnavailable):
        c.delete_user("u1")
    assert len(script.requests) == 1
    # a 4xx other than 429 is never retried
    script = Script(error(422, "invalid_input", "field 'max_depth': too deep", "max_depth"))
    c, _ = client(script)
    with pytest.raises(InvalidInput):
        c.retrieve(user_id="u1", key_phrases=["x"], max_depth=9)
    assert len(script.requests) == 1


def test_a_server_that_cannot_be_reached_is_store_unavailable_after_the_retries():
    script = Script(httpx.ConnectError("connection refused"))
    c, _ = client(script, RetryPolicy(max_attempts=2, jitter=False))
    with pytest.raises(StoreUnavailable) as caught:
        c.healthz()
    assert caught.value.code == "unreachable" and "http://hrt.test" in caught.value.public_message
    assert isinstance(caught.value.__cause__, httpx.ConnectError) and len(script.requests) == 2


@pytest.mark.parametrize(
    ("status", "code", "field", "cls"),
    [
        (400, "malformed_json", "body", MalformedBody),
        (413, "payload_too_large", "body", PayloadTooLarge),
        (415, "unsupported_media_type", "body", InvalidInput),
        (422, "invalid_input", "key_phrases.0", InvalidInput),
        (401, "unauthenticated", None, Unauthenticated),
        (403, "forbidden", "user_id", Forbidden),
        (404, "not_found", None, NotFound),
        (409, "conflict", "records[0].id", Conflict),
        (503, "store_unavailable", None, StoreUnavailable),
        (405, "method_not_allowed", None, HRTError),
        (500, "internal_error", None, HRTError),
    ],
)
def test_errors_are_hrt_errors_with_the_servers_code_message_and_field(status, code, field, cls):
    exc = error_from_response(error(status, code, f"message {status}", field))
    assert type(exc) is cls
    assert (exc.code, exc.message, exc.field) == (code, f"message {status}", field)
    if isinstance(exc, Forbidden):
        assert exc.reason == "user"


def test_429_carries_retry_after_and_a_body_that_is_not_json_still_maps_by_status():
    limited = error_from_response(error(429, "rate_limited", "over its concurrency", **{"Retry-After": "7"}))
    assert isinstance(limited, RateLimited) and limited.retry_after_s == 7 and limited.reason == "concurrency"
    proxy = error_from_response(httpx.Response(503, text="<html>bad gateway</html>"))
    assert isinstance(proxy, StoreUnavailable) and proxy.code == "http_503" and "bad gateway" in proxy.message


def test_readyz_answers_the_report_when_not_ready_without_retrying():
    report = {
        "status": "warming",
        "stores": {"records": "ok"},
        "caches": "loading",
        "embedder": "e",
        "deployment": "embedded",
        "graph_expansion": "in_process",
        "auth": "on",
    }
    script = Script(httpx.Response(503, json=report))
    c, slept = client(script)
    assert c.readyz().status == "warming" and len(script.requests) == 1 and slept == []


def test_from_env_reads_only_the_mapping_it_is_given():
    c = HRTClient.from_env({"HRT_URL": "http://elsewhere:9", "HRT_API_KEY": "hrt_k"})
    assert c.base_url == "http://elsewhere:9" and c._headers["authorization"] == "Bearer hrt_k"
    bare = HRTClient.from_env({})
    assert bare.base_url == "http://127.0.0.1:8080" and "authorization" not in bare._headers


def test_no_retry_policy_sends_once():
    script = Script(error(503, "store_unavailable", "down"))
    c, _ = client(script, NO_RETRY)
    with pytest.raises(StoreUnavailable):
        c.healthz()
    assert len(script.requests) == 1


async def test_the_async_client_retries_and_maps_errors_alike():
    script = Script(
        error(429, "rate_limited", "rate", **{"Retry-After": "2"}), httpx.Response(200, json=minimal_context())
    )
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async with AsyncHRTClient(
        "http://hrt.test", KEY, retry=NO_JITTER, transport=httpx.MockTransport(script), sleep=sleep
    ) as c:
        raw = await c.retrieve_json({"user_id": "u1", "key_phrases": ["x"]})
        assert json.loads(raw)["retrieval_metadata"]["user_id"] == "u1" and slept == [2.0]
        script.answers = [error(403, "forbidden", "this API key may not act for user 'u2'", "user_id")]
        with pytest.raises(Forbidden) as caught:
            await c.stats("u2")
        assert caught.value.field == "user_id" and caught.value.code == "forbidden"


def test_the_client_shares_the_servers_models_without_importing_the_server():
    """One definition of each route's body (hrt.contract); a client process loads no server code."""
    import subprocess
    import sys

    from fastapi.routing import APIRoute

    from hrt import client
    from hrt.api import create_app
    from hrt.config import Settings

    answered = {r.response_model for r in create_app(Settings()).routes if isinstance(r, APIRoute)}
    for name in ("WriteSummary", "UserStats", "Health", "Readiness", "KeyInfo", "NewKey", "ConversationResult"):
        assert getattr(client, name) in answered, name
    server_side = ("fastapi", "hrt.api", "hrt.service")
    code = f"import sys, hrt.client; print(sorted(m for m in sys.modules if m.startswith({server_side!r})))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded


def conversation_result(statuses: list[str], start: int = 0) -> dict[str, object]:
    return {
        "user_id": "u1",
        "session_id": "s1",
        "messages": [{"index": start + i, "muid": f"m{start + i}", "status": s} for i, s in enumerate(statuses)],
        "concepts_linked": 2,
        "concepts_unlinked": 0,
        "relations": 3,
    }


def test_add_messages_sends_one_session_and_returns_the_conversation_result():
    from hrt.extraction.messages import Message

    script = Script(httpx.Response(200, json=conversation_result(["added", "added"])))
    c, _ = client(script)
    turn = [
        {"role": "user", "content": "I moved to Porto in May."},
        Message(role="assistant", content="Noted: Porto.", timestamp=datetime(2025, 6, 1, tzinfo=UTC)),
    ]
    result = c.add_messages("u1", "s1", turn, agent_id="agent-7")
    sent = script.requests[0]
    assert sent.method == "POST" and sent.url == "http://hrt.test/v1/conversations"
    assert json.loads(sent.content) == {
        "user_id": "u1",
        "session_id": "s1",
        "agent_id": "agent-7",
        "messages": [
            {"role": "user", "content": "I moved to Porto in May."},
            {"role": "assistant", "content": "Noted: Porto.", "timestamp": "2025-06-01T00:00:00Z", "metadata": {}},
        ],
    }
    assert [m.muid for m in result.messages] == ["m0", "m1"] and result.relations == 3
    c.add_messages("u1", "s1", [{"content": "again"}], start=4, user_name="Maya", agent_name="Pip")
    again = json.loads(script.requests[1].content)
    assert again["start"] == 4 and (again["user_name"], again["agent_name"]) == ("Maya", "Pip")
    assert "user_name" not in json.loads(sent.content)  # left out when not given


def test_add_messages_is_sent_again_after_a_503_only_when_every_message_has_its_place():
    placed = [{"content": "a", "index": 0}, {"content": "b", "index": 1}]
    for messages, start, attempts in (
        (placed, None, 2),  # each message's index: a resend changes nothing
        ([{"content": "a"}], 0, 2),  # a start places them too
        ([{"content": "a"}, {"content": "b", "index": 1}], None, 1),  # "a" would be added again
    ):
        script = Script(
            error(503, "store_unavailable", "down"), httpx.Response(200, json=conversation_result(["added"]))
        )
        c, _ = client(script)
        if attempts == 2:
            assert c.add_messages("u1", "s1", messages, start=start).messages[0].status == "added"
        else:
            with pytest.raises(StoreUnavailable):
                c.add_messages("u1", "s1", messages, start=start)
        assert len(script.requests) == attempts, messages


async def test_the_async_client_adds_messages_and_maps_errors():
    script = Script(httpx.Response(200, json=conversation_result(["unchanged"])))
    async with AsyncHRTClient("http://hrt.test", KEY, transport=httpx.MockTransport(script)) as c:
        result = await c.add_messages("u1", "s1", [{"content": "hello", "index": 0}])
        assert result.messages[0].status == "unchanged"
        script.answers = [error(422, "invalid_input", "field 'messages[0].content': too long", "messages[0].content")]
        with pytest.raises(InvalidInput) as bad:
            await c.add_messages("u1", "s1", [{"content": "x" * 100_001}])
        assert bad.value.field == "messages[0].content"


def test_the_blocking_and_async_clients_expose_the_same_calls():
    """Every public method of :class:`HRTClient` is in :class:`AsyncHRTClient` (``close`` as
    ``aclose``) and the other way round, with the same parameters and answer: a coroutine for a
    blocking call, an async iterator for an iterator. A call added to one client alone fails here."""
    import inspect

    renamed = {"close": "aclose"}

    def public(cls: type) -> dict[str, object]:
        return {n: inspect.getattr_static(cls, n) for n in dir(cls) if not n.startswith("_")}

    blocking, asynchronous = public(HRTClient), public(AsyncHRTClient)
    assert {renamed.get(n, n) for n in blocking} == set(asynchronous)
    assert len(blocking) > 15  # the calls were found
    for name, static in blocking.items():
        other = asynchronous[renamed.get(name, name)]
        if isinstance(static, classmethod):
            assert isinstance(other, classmethod), name
            static, other = static.__func__, other.__func__
        else:
            assert inspect.isasyncgenfunction(other) == inspect.isgeneratorfunction(static), name
            assert inspect.iscoroutinefunction(other) != inspect.isgeneratorfunction(static), name
        mine, theirs = inspect.signature(static), inspect.signature(other)
        assert mine.parameters == theirs.parameters, name
        answer = str(mine.return_annotation).replace("Iterator[", "AsyncIterator[")
        assert answer == str(theirs.return_annotation), name
    init = inspect.signature(HRTClient.__init__).parameters, inspect.signature(AsyncHRTClient.__init__).parameters
    assert list(init[0]) == list(init[1])
