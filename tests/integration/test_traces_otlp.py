"""Traces leave a real ``hrt serve`` over OTLP/HTTP: a receiver in the test accepts
``POST /v1/traces`` (protobuf), decodes it with opentelemetry-proto, and finds the request's span
(child of the caller's ``traceparent``), the retrieval's, one per stage and the store calls, the
user only as a hash. The response's ``Server-Timing`` is the one a server without traces sends."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from hrt.cli import sample_data_path
from hrt.pipeline import PIPELINE
from hrt.tracing import user_hash
from tests.integration.conftest import start_hrt_server

pytestmark = pytest.mark.integration
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


class Receiver:
    """An OTLP/HTTP trace receiver: every span it was sent, decoded, with its resource's attributes."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver.lock:
                    receiver.paths.append(self.path)
                if self.headers.get("content-type") == "application/x-protobuf":
                    receiver.take(body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    found = {
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent": span.parent_span_id.hex(),
                        "kind": span.kind,
                        "attributes": attributes,
                        "resource": resource,
                        "duration_ns": span.end_time_unix_nano - span.start_time_unix_nano,
                    }
                    with self.lock:
                        self.spans.append(found)

    def wait_for(self, names: set[str], timeout: float = 120.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                spans = list(self.spans)
            if names <= {s["name"] for s in spans}:
                return spans
            time.sleep(0.1)
        raise AssertionError(f"spans never received: {names - {s['name'] for s in spans}}")


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()


def test_spans_reach_an_otlp_receiver(tmp_path: Path, receiver: Receiver):
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "hrt-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # the batch processor's flush interval, ms
    }
    server = start_hrt_server(tmp_path / "hrt.db", tmp_path / "server.log", timeout=300, env=env)
    try:
        with server.client(timeout=120) as client:
            written = client.post(
                "/v1/ingest", content=sample_data_path().read_bytes(), headers={"content-type": "application/x-ndjson"}
            )
            assert written.status_code == 200
            body = {"user_id": "u-maya", "key_phrases": ["Project Phoenix timeline"], "as_of": "2025-12-31T00:00:00Z"}
            answered = client.post("/v1/retrieve", json=body, headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
            assert answered.status_code == 200
        stage_names = {f"hrt.stage {stage.name}" for stage in PIPELINE}
        spans = receiver.wait_for({"POST /v1/retrieve", "hrt.retrieve", *stage_names, "hrt.store graph.expand"})
    finally:
        server.stop()
    assert set(receiver.paths) == {"/v1/traces"}
    timing = [part.split(";")[0] for part in answered.headers["server-timing"].split(", ")]
    assert timing == [stage.name for stage in PIPELINE] + ["total"]
    ours = [s for s in spans if s["trace_id"] == TRACE_ID]
    request = next(s for s in ours if s["name"] == "POST /v1/retrieve")
    assert request["parent"] == PARENT_ID and request["kind"] == 2  # SPAN_KIND_SERVER
    assert request["attributes"]["http.response.status_code"] == 200
    assert request["resource"]["service.name"] == "hrt-under-test"
    retrieve = next(s for s in ours if s["name"] == "hrt.retrieve")
    assert retrieve["parent"] == request["span_id"]
    assert retrieve["attributes"]["hrt.user.hash"] == user_hash("u-maya")
    stages = {s["name"]: s for s in ours if s["name"] in stage_names}
    assert set(stages) == stage_names and all(s["parent"] == retrieve["span_id"] for s in stages.values())
    assert stages["hrt.stage expansion"]["attributes"]["hrt.candidates"] > 0
    expand = next(s for s in ours if s["name"] == "hrt.store graph.expand")
    assert expand["parent"] == stages["hrt.stage expansion"]["span_id"]
    assert expand["duration_ns"] > 0 and expand["attributes"]["hrt.store.result.count"] > 0
    assert not [s for s in spans if "u-maya" in repr(s) or "Phoenix" in repr(s)]  # hashed, no text


def test_without_the_variables_the_sdk_is_never_imported():
    probe = (
        "import sys\n"
        "from hrt.api import create_app\n"
        "from hrt.config import Settings\n"
        "app = create_app(Settings())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    off = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert off.stdout.strip() == "[]"
    on = {**env, "OTEL_TRACES_EXPORTER": "console"}
    traced = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=on, check=True)
    assert "opentelemetry.sdk.trace" in traced.stdout  # the probe sees an import when there is one
