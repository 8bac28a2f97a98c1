"""OpenTelemetry traces (hrt/tracing.py) through the app in process, into the SDK's in-memory
exporter: a span per request, per stage and per store call, the caller's ``traceparent`` as the
parent, user ids hashed, ``Server-Timing`` as without traces. The OTLP/HTTP export to a real
receiver is tests/integration/test_traces_otlp.py."""

from __future__ import annotations

import hashlib

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from hrt.api import create_app
from hrt.auth import SCOPES, new_key
from hrt.config import Settings
from hrt.pipeline import PIPELINE
from hrt.tracing import Tracing, tracing_wanted, user_hash

AS_OF = "2025-08-01T00:00:00Z"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
BODY = {"user_id": "u1", "key_phrases": ["Project Phoenix", "bandwidth"], "as_of": AS_OF}


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
async def traced_client(loaded_service, settings, exporter):
    token, record = new_key("test-admin", SCOPES, None)
    await loaded_service.records.create_key(record)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(settings, service=loaded_service, tracing=Tracing(provider))
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt", headers=headers) as c:
        yield c


def test_the_standard_variables_decide() -> None:
    assert Settings().tracing_exporter() is None  # off by default
    assert tracing_wanted("", "", "", False) is None
    assert tracing_wanted("otlp", "", "", False) == "otlp"
    assert tracing_wanted("none", "http://c:4318", "", False) is None
    assert tracing_wanted("", "http://c:4318", "", False) == "otlp"
    assert tracing_wanted("", "", "http://c:4318/v1/traces", False) == "otlp"
    assert tracing_wanted("zipkin,console", "", "", False) == "console"
    assert tracing_wanted("otlp", "http://c:4318", "", True) is None
    assert Settings(otel_traces_exporter="otlp").tracing_exporter() == "otlp"


async def test_a_retrieval_is_a_tree_of_request_stage_and_store_spans(traced_client, exporter):
    traceparent = f"00-{TRACE_ID}-{PARENT_ID}-01"
    r = await traced_client.post("/v1/retrieve", json=BODY, headers={"traceparent": traceparent})
    assert r.status_code == 200, r.text
    spans = exporter.get_finished_spans()
    by_name = {s.name: s for s in spans}
    request = by_name["POST /v1/retrieve"]
    assert request.kind == SpanKind.SERVER
    assert format(request.context.trace_id, "032x") == TRACE_ID  # the caller's trace
    assert request.parent is not None and format(request.parent.span_id, "016x") == PARENT_ID
    assert request.attributes["http.route"] == "/v1/retrieve"
    assert request.attributes["http.response.status_code"] == 200
    assert {s.context.trace_id for s in spans} == {request.context.trace_id}
    retrieve = by_name["hrt.retrieve"]
    assert retrieve.parent.span_id == request.context.span_id
    assert retrieve.attributes["hrt.user.hash"] == user_hash("u1") == hashlib.sha256(b"u1").hexdigest()[:16]
    stages = [s for s in spans if s.name.startswith("hrt.stage ")]
    assert [s.attributes["hrt.stage"] for s in sorted(stages, key=lambda s: s.start_time)] == [
        stage.name for stage in PIPELINE
    ]
    assert all(s.parent.span_id == retrieve.context.span_id for s in stages)
    assert by_name["hrt.stage grounding"].attributes["hrt.seeds"] > 0
    assert by_name["hrt.stage expansion"].attributes["hrt.candidates"] > 0
    stores = [s for s in spans if s.name.startswith("hrt.store ")]
    assert {"hrt.store vectors.search", "hrt.store graph.expand"} <= {s.name for s in stores}
    stage_ids = {s.context.span_id for s in stages}
    assert all(s.parent.span_id in stage_ids for s in stores)  # each store call under its stage
    search = by_name["hrt.store vectors.search"]
    assert search.attributes["hrt.store.result.count"] == 2  # hits per phrase, for both phrases
    assert search.attributes["hrt.user.hash"] == user_hash("u1")
    for span in spans:  # no user id, phrase or text in any span
        text = repr(dict(span.attributes or {})) + span.name
        assert "u1'" not in text and "Phoenix" not in text and "bandwidth" not in text


async def test_server_timing_is_unchanged_and_other_routes_are_spans_too(traced_client, exporter):
    r = await traced_client.post("/v1/retrieve", json=BODY)
    timing = [part.split(";")[0] for part in r.headers["server-timing"].split(", ")]
    assert timing == [stage.name for stage in PIPELINE] + ["total"]
    stats = await traced_client.get("/v1/users/u1/stats")
    assert stats.status_code == 200
    names = [s.name for s in exporter.get_finished_spans()]
    assert "GET /v1/users/{user_id}/stats" in names  # the route's template, not the user's path
    assert not any("/u1/" in n for n in names)
    refused = await traced_client.get("/v1/users/u1/stats", headers={"authorization": "Bearer nope"})
    assert refused.status_code == 401
    last = exporter.get_finished_spans()[-1]
    assert last.attributes["http.response.status_code"] == 401


async def test_without_tracing_the_ports_are_not_wrapped(loaded_service, settings):
    create_app(settings, service=loaded_service)
    assert loaded_service.tool.tracing is None
    assert loaded_service.tool.vectors is loaded_service.vectors
