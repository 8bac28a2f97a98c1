"""schemathesis over the OpenAPI document of a real ``hrt serve`` (embedded store, the sample graph,
a key of every scope): no input may produce a 5xx, every response conforms to the document, and
input outside the document is refused with a 4xx. A bounded example count here; the longer run is
``python scripts/fuzz_api.py`` (docs/security.md)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.schemas import APIOperation
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from hrt.api import create_app
from hrt.cli import sample_data_path
from hrt.config import Settings
from tests.integration.conftest import ServerProcess, start_hrt_server

pytestmark = pytest.mark.integration


def rejects_invalid_input(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """schemathesis' negative_data_rejection, with 413 counted as a rejection (a body over the size
    limit is refused before it is parsed), and a null for an optional member taken as the member
    left out: the schema lists such a member without null (a simpler schema for tool-calling
    models), and the server reads an explicit null, which such models send, as absent."""
    if response.status_code == 413 or _null_for_an_optional_member(case):
        return None
    return negative_data_rejection(ctx, response, case)


def _member_is_optional(case: schemathesis.Case, pointer: str) -> bool:
    """Whether the body member at ``pointer`` (a JSON pointer into the operation's body schema, as
    schemathesis reports a mutation) is left out of its object's ``required``."""
    try:
        content = DOCUMENT["paths"][case.path][case.method.lower()]["requestBody"]["content"]
        node: Any = next(iter(content.values()))["schema"]
        parts = pointer.strip("/").split("/")
        for part in parts[:-2]:
            node = _deref(node)
            node = node[int(part)] if isinstance(node, list) else node[part]
        return parts[-2] == "properties" and parts[-1] not in _deref(node).get("required", [])
    except (KeyError, IndexError, ValueError):  # not a pointer into this document: not excused
        return False


def _deref(node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        target: Any = DOCUMENT
        for part in str(node["$ref"]).removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def _null_for_an_optional_member(case: schemathesis.Case) -> bool:
    """The case's mutations all give null to body members their object does not require."""
    data = getattr(getattr(case.meta, "phase", None), "data", None)
    mutations = getattr(data, "mutations", ()) or ()
    return bool(mutations) and all(
        m.new_value == "null" and m.schema_pointer and _member_is_optional(case, m.schema_pointer) for m in mutations
    )


def content_type_of_the_app(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """schemathesis' content_type_conformance for what HRT answers: a request line longer than the
    HTTP server takes (an 80 KB query string) is refused by uvicorn itself, in text, before HRT."""
    if response.status_code == 400 and response.content == b"Invalid HTTP request received.":
        return None
    return content_type_conformance(ctx, response, case)


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_of_the_app,
    response_headers_conformance,
    response_schema_conformance,
    rejects_invalid_input,
]
EXAMPLES = int(os.environ.get("HRT_FUZZ_EXAMPLES", "50"))


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    server = start_hrt_server(tmp / "fuzz.db", tmp / "server.log")
    with server.client(timeout=120) as c:
        r = c.post(
            "/v1/ingest", content=sample_data_path().read_bytes(), headers={"content-type": "application/x-ndjson"}
        )
        assert r.status_code == 200, r.text
    yield server
    with server.client(timeout=30) as c:
        metrics = c.get("/metrics").text
    server.stop()
    statuses: dict[str, dict[str, int]] = {}
    for route, status, n in re.findall(r'hrt_requests_total\{route="([^"]+)",status="([0-9]+)"\} ([0-9.]+)', metrics):
        statuses.setdefault(route, {})[status] = int(float(n))
    # the run reached the pipeline, not only the validation: retrievals that returned a document
    assert statuses.get("/v1/retrieve", {}).get("200", 0) >= 1, statuses
    assert not any(s.startswith("5") for by_status in statuses.values() for s in by_status), statuses
    report = os.environ.get("HRT_FUZZ_REPORT")  # scripts/fuzz_api.py
    if report:
        Path(report).write_text(json.dumps({"examples_per_run": EXAMPLES, "statuses": statuses}, indent=2) + "\n")
    log = (tmp / "server.log").read_text()
    assert "Traceback" not in log, log[-3000:]


def document() -> dict[str, object]:
    """The OpenAPI document, built in process: the same code as the server's (checked below)."""
    return create_app(Settings()).openapi()


DOCUMENT = document()
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT)
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]


def test_the_server_serves_this_document(fuzz_server: ServerProcess) -> None:
    served = httpx.get(f"{fuzz_server.base_url}/openapi.json", headers=fuzz_server.headers, timeout=30)
    assert served.status_code == 200 and served.json() == document()


SAMPLE_USERS = ("u-maya", "u-tom", "u-sara")


def aim(case: schemathesis.Case, user: str) -> schemathesis.Case:
    """The case with every user id it carries (path, body, records) set to ``user``."""
    if case.path_parameters and "user_id" in case.path_parameters:
        case.path_parameters["user_id"] = user
    if isinstance(case.body, dict):
        if "user_id" in case.body:
            case.body["user_id"] = user
        for record in case.body.get("records") or []:
            if isinstance(record, dict) and "user_id" in record:
                record["user_id"] = user
    return case


# negative data needs something to negate: a path parameter or a body
RUNS = [(op, GenerationMode.POSITIVE) for op in OPERATIONS] + [
    (op, GenerationMode.NEGATIVE) for op in OPERATIONS if "{" in op.path or op.method.upper() == "POST"
]


def fuzz(
    server: ServerProcess,
    operation: APIOperation,
    mode: GenerationMode,
    users: tuple[str, ...],
    examples: int,
) -> None:
    """``examples`` cases of ``operation`` in ``mode`` against ``server`` with its key, every answer
    checked; half the positive cases aimed at ``users`` (users who exist, not random ids)."""
    strategy = operation.as_strategy(generation_mode=mode)
    if mode is GenerationMode.POSITIVE:
        strategy = st.one_of(strategy, st.tuples(strategy, st.sampled_from(users)).map(lambda t: aim(*t)))

    @given(case=strategy)
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case: schemathesis.Case) -> None:
        case.call_and_validate(base_url=server.base_url, headers=server.headers, checks=CHECKS, timeout=60)

    run()


@pytest.mark.parametrize(("operation", "mode"), RUNS, ids=[f"{op.label}-{mode.value}" for op, mode in RUNS])
def test_no_input_gives_a_5xx_and_every_answer_fits_the_document(
    fuzz_server: ServerProcess, operation: APIOperation, mode: GenerationMode
) -> None:
    fuzz(fuzz_server, operation, mode, SAMPLE_USERS, EXAMPLES)


# keys with extreme fields (#30): expiries far and odd, rates down to the smallest float, any
# concurrency; made by the all-users key and by a user-bound admin that expires, then used
DURATIONS = st.builds(lambda n, unit: f"{n}{unit}", st.integers(1, 999_999), st.sampled_from("mhdw"))
DATES = st.builds(
    lambda when, offset: f"{when.isoformat()}{offset}",
    st.datetimes(),
    st.sampled_from(["", "Z", "+14:00", "-01:00", "-23:59"]),
)
KEY_BODIES = st.fixed_dictionaries(
    {"scopes": st.just(["retrieve"])},
    optional={
        "expires": st.one_of(DURATIONS, DATES, st.text(max_size=64)),
        "rate_limit": st.one_of(
            st.floats(min_value=0, max_value=1_000_000, allow_subnormal=True), st.sampled_from([5e-324, 0.0, 1e6])
        ),
        "max_concurrency": st.integers(0, 100_000),
    },
)


def test_keys_with_extreme_fields_never_break_the_key_table(fuzz_server: ServerProcess) -> None:
    with fuzz_server.client(timeout=60) as c:
        r = c.post(
            "/v1/keys",
            json={"name": "fuzz-admin", "scopes": ["admin", "retrieve"], "users": ["u-maya"], "expires": "1h"},
        )
        assert r.status_code == 201, r.text
        makers = [fuzz_server.headers, {"authorization": f"Bearer {r.json()['key']}"}]
        counter = iter(range(10**9))

        @given(body=KEY_BODIES, maker=st.sampled_from(makers))
        @settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def run(body: dict[str, Any], maker: dict[str, str]) -> None:
            name = f"fuzz-{next(counter)}"
            made = c.post("/v1/keys", json={"name": name, "users": ["u-maya"], **body}, headers=maker)
            assert made.status_code in (201, 403, 422), made.text
            if made.status_code == 201:
                used = c.get("/v1/users/u-maya/stats", headers={"authorization": f"Bearer {made.json()['key']}"})
                assert used.status_code in (200, 429), used.text
            listed = c.get("/v1/keys", headers=maker)
            assert listed.status_code == 200, listed.text
            if made.status_code == 201:
                assert c.delete(f"/v1/keys/{made.json()['key_id']}", headers=maker).status_code == 200

        run()
