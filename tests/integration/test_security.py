"""API keys against a real ``hrt serve``: the keys made with the real CLI, the route x scope x user
matrix (each case with its status and nothing written by a refusal), tenancy through HTTP with keys
as a hypothesis property, and ``hrt serve``'s refusals to start."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrt.cli import sample_data_path
from hrt.contract import AugmentedMemoryContext
from tests.helpers import concept
from tests.integration.conftest import ServerProcess, free_port, start_hrt_server

pytestmark = pytest.mark.integration

OWN, OTHER, UNKNOWN = "u-maya", "u-tom", "u-nobody"
WRITER = "u-matrix"  # the own user of write routes: re-seeded, so the sample stays whole
AS_OF = "2025-12-31T00:00:00Z"


def hrt_cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HRT_DB_PATH": str(db)}
    return subprocess.run(
        [sys.executable, "-m", "hrt.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def create_key(db: Path, name: str, *args: str) -> str:
    done = hrt_cli(db, "keys", "create", "--name", name, *args)
    assert done.returncode == 0, done.stderr
    assert "not shown again" in done.stderr
    return done.stdout.strip()


@dataclass
class Deployment:
    server: ServerProcess
    db: Path
    keys: dict[str, str | None]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("security")
    db = tmp / "hrt.db"
    done = hrt_cli(db, "ingest", str(sample_data_path()))
    assert done.returncode == 0, done.stderr
    mine = ("--user", OWN, "--user", WRITER)
    keys: dict[str, str | None] = {
        "none": None,
        "retrieve": create_key(db, "m-retrieve", "--scope", "retrieve", *mine),
        "ingest": create_key(db, "m-ingest", "--scope", "ingest", *mine),
        "admin": create_key(db, "m-admin", "--scope", "admin", *mine),
        "ops": create_key(db, "m-ops", "--scope", "ops", *mine),
        "export": create_key(db, "m-export", "--scope", "export", *mine),
        "revoked": create_key(
            db, "m-revoked", *(a for s in ("retrieve", "ingest", "admin", "ops") for a in ("--scope", s)), *mine
        ),
        "expired": create_key(
            db,
            "m-expired",
            *(a for s in ("retrieve", "ingest", "admin", "ops") for a in ("--scope", s)),
            *mine,
            "--expires",
            (datetime.now(UTC) + timedelta(seconds=3)).isoformat(),
        ),
    }
    revoked = hrt_cli(db, "keys", "revoke", "m-revoked")
    assert revoked.returncode == 0 and json.loads(revoked.stdout)["status"] == "revoked", revoked.stderr
    listed = hrt_cli(db, "keys", "list")
    assert listed.returncode == 0
    assert all(token not in listed.stdout for token in keys.values() if token)  # never the secret
    status = {k["name"]: k["status"] for k in json.loads(listed.stdout)}
    assert status["m-revoked"] == "revoked" and status["m-retrieve"] == "active"
    time.sleep(max(0.0, 3.5))  # m-expired is past its expiry from here on
    server = start_hrt_server(db, tmp / "server.log")
    try:
        yield Deployment(server, db, keys)
    finally:
        server.stop()


def seed_writer(d: Deployment) -> None:
    r = httpx.post(
        f"{d.server.base_url}/v1/ingest",
        json={"records": [concept(WRITER, "c-keep", "Keep"), concept(WRITER, "c-matrix", "Matrix")]},
        headers=d.server.headers,
        timeout=60,
    )
    assert r.status_code == 200, r.text


def snapshot(d: Deployment) -> dict[str, dict[str, int]]:
    with d.server.client(timeout=30) as c:
        return {u: c.get(f"/v1/users/{u}/stats").json() for u in (OWN, OTHER, WRITER, UNKNOWN)}


# route -> (scope, request for a user)
ROUTES = {
    "retrieve": (
        "retrieve",
        lambda u: ("POST", "/v1/retrieve", {"json": {"user_id": u, "key_phrases": ["Phoenix"], "as_of": AS_OF}}),
    ),
    "stats": ("retrieve", lambda u: ("GET", f"/v1/users/{u}/stats", {})),
    "ingest": ("ingest", lambda u: ("POST", "/v1/ingest", {"json": {"records": [concept(u, "c-new", "New")]}})),
    # needs HRTService.add_messages (issue #32's core) for its one 200 case
    "conversations": (
        "ingest",
        lambda u: (
            "POST",
            "/v1/conversations",
            {"json": {"user_id": u, "session_id": "matrix", "messages": [{"content": "The matrix says hello."}]}},
        ),
    ),
    "delete_entity": ("ingest", lambda u: ("DELETE", f"/v1/users/{u}/entities/concept/c-matrix", {})),
    "delete_user": ("admin", lambda u: ("DELETE", f"/v1/users/{u}", {})),
    # #33: merges the writer's c-keep into c-matrix (both seeded before each case)
    "merge": ("ingest", lambda u: ("POST", f"/v1/users/{u}/concepts/c-matrix/merge", {"json": {"ids": ["c-keep"]}})),
    # #33: read one entity, browse, export (reads: the own user is the sample's u-maya)
    "entity": ("retrieve", lambda u: ("GET", f"/v1/users/{u}/entities/concept/maya-c-phoenix", {})),
    "browse": ("retrieve", lambda u: ("GET", f"/v1/users/{u}/entities", {"params": {"kind": "concept"}})),
    "export": ("export", lambda u: ("GET", f"/v1/users/{u}/export", {})),
    "readyz": ("ops", lambda u: ("GET", "/readyz", {})),
    "metrics": ("ops", lambda u: ("GET", "/metrics", {})),
    "list_keys": ("admin", lambda u: ("GET", "/v1/keys", {})),
}
USER_SCOPED = {
    "retrieve",
    "stats",
    "ingest",
    "conversations",
    "delete_entity",
    "delete_user",
    "merge",
    "entity",
    "browse",
    "export",
}
WRITES = {"ingest", "conversations", "delete_entity", "delete_user", "merge"}
KEYS = ["none", "revoked", "expired", "retrieve", "ingest", "admin", "ops", "export"]
WHO = ["own", "other", "unknown"]


def expected(route: str, key: str, who: str) -> int:
    scope = ROUTES[route][0]
    if key in ("none", "revoked", "expired"):
        return 401
    if key != scope:
        return 403
    if route in USER_SCOPED and who != "own":
        return 403
    return 200


CASES = [(r, k, w) for r in ROUTES for k in KEYS for w in (WHO if r in USER_SCOPED else ["own"])]


@pytest.mark.parametrize(("route", "key", "who"), CASES, ids=[f"{r}-{k}-{w}" for r, k, w in CASES])
def test_route_scope_user_matrix(deployment: Deployment, route: str, key: str, who: str) -> None:
    d = deployment
    user = {"own": WRITER if route in WRITES else OWN, "other": OTHER, "unknown": UNKNOWN}[who]
    if route in WRITES:
        seed_writer(d)
    before = snapshot(d)
    method, path, kwargs = ROUTES[route][1](user)
    token = d.keys[key]
    headers = {"authorization": f"Bearer {token}"} if token else {}
    r = httpx.request(method, d.server.base_url + path, headers=headers, timeout=60, **kwargs)
    want = expected(route, key, who)
    assert r.status_code == want, r.text
    after = snapshot(d)
    if want != 200:
        error = r.json()["error"]
        assert set(error) == {"code", "message", "field"} and error["message"]
        assert after == before  # nothing written by a refused request
        if want == 401:
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert error["code"] == "unauthenticated"
        else:
            assert error["code"] == "forbidden"
    elif route in WRITES:
        assert after != before and after[OWN] == before[OWN] and after[OTHER] == before[OTHER]


@pytest.mark.parametrize("route", sorted(USER_SCOPED))
def test_a_403_tells_nothing_about_whether_the_user_exists(deployment: Deployment, route: str) -> None:
    d = deployment
    scope = ROUTES[route][0]
    answers = []
    for user in (OTHER, UNKNOWN):
        method, path, kwargs = ROUTES[route][1](user)
        r = httpx.request(
            method, d.server.base_url + path, headers={"authorization": f"Bearer {d.keys[scope]}"}, timeout=60, **kwargs
        )
        answers.append((r.status_code, r.headers.get("content-type"), r.json()["error"]["message"].replace(user, "U")))
    assert answers[0] == answers[1]


# ------------------------------------------------------------------------------------------
# tenancy through HTTP with keys
# ------------------------------------------------------------------------------------------

USERS = ("u-maya", "u-tom", "u-sara")
PREFIX = {"u-maya": "maya-", "u-tom": "tom-", "u-sara": "sara-"}
PHRASES = [
    "Project Phoenix",
    "Lumen Labs",
    "Postgres",
    "on-call incident",
    "onboarding research",
    "half marathon",
    "deep work",
    "pricing",
    "hiring plan",
    "Atlas migration",
]


@pytest.fixture(scope="module")
def tenant_keys(deployment: Deployment) -> dict[frozenset[str], str]:
    """A retrieve key for every non-empty set of the sample's users."""
    out = {}
    for mask in range(1, 8):
        users = frozenset(u for i, u in enumerate(USERS) if mask >> i & 1)
        args = [a for u in sorted(users) for a in ("--user", u)]
        out[users] = create_key(deployment.db, f"tenants-{mask}", "--scope", "retrieve", *args)
    return out


def returned_ids(doc: AugmentedMemoryContext) -> list[str]:
    ids = [m.muid for m in doc.retrieved_memory_units] + [c.id for c in doc.retrieved_concepts]
    ids += [a.id for a in doc.retrieved_artifacts]
    ids += [n.id for m in doc.retrieved_memory_units for n in m.connected_concept_ids_and_names]
    ids += [t.id for c in doc.retrieved_concepts for t in c.related_top_memory_unit_ids_and_titles]
    ids += [i for g in doc.retrieval_metadata.phrase_grounding for i in g.seed_ids]
    return ids


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    allowed=st.integers(1, 7),
    target=st.sampled_from(USERS),
    phrases=st.lists(st.sampled_from(PHRASES), min_size=1, max_size=4, unique=True),
    depth=st.integers(0, 3),
    rerank=st.booleans(),
)
def test_no_key_ever_receives_an_id_of_a_user_outside_its_list(
    deployment: Deployment,
    tenant_keys: dict[frozenset[str], str],
    allowed: int,
    target: str,
    phrases: list[str],
    depth: int,
    rerank: bool,
) -> None:
    users = frozenset(u for i, u in enumerate(USERS) if allowed >> i & 1)
    body = {
        "user_id": target,
        "key_phrases": phrases,
        "max_depth": depth,
        "as_of": AS_OF,
        "rerank": rerank,
        "limits": {"memory_units": 50, "concepts": 50, "artifacts": 50},
    }
    r = httpx.post(
        f"{deployment.server.base_url}/v1/retrieve",
        json=body,
        headers={"authorization": f"Bearer {tenant_keys[users]}"},
        timeout=60,
    )
    if target not in users:
        assert r.status_code == 403, r.text
        assert not any(p in r.text for p in PREFIX.values())
        return
    assert r.status_code == 200, r.text
    ids = returned_ids(AugmentedMemoryContext.model_validate_json(r.content))
    assert all(i.startswith(PREFIX[target]) for i in ids), ids


# ------------------------------------------------------------------------------------------
# hrt serve's refusals to start
# ------------------------------------------------------------------------------------------


def serve(db: Path, host: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hrt.cli", "serve", "--host", host, "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HRT_DB_PATH": str(db), **env},
    )


def test_serve_refuses_to_start_without_a_key_or_with_auth_off_off_loopback(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    no_key = serve(db, "127.0.0.1", {})
    assert no_key.returncode == 2 and "no API key is defined" in no_key.stderr
    open_wide = serve(db, "0.0.0.0", {"HRT_AUTH": "off"})
    assert open_wide.returncode == 2 and "only on a loopback address" in open_wide.stderr


def test_auth_off_on_loopback_starts_with_a_warning(tmp_path: Path) -> None:
    server = start_hrt_server(tmp_path / "dev.db", tmp_path / "dev.log", env={"HRT_AUTH": "off"})
    try:
        ready = httpx.get(f"{server.base_url}/readyz", timeout=10).json()  # no key needed
        assert ready["auth"] == "off" and ready["warnings"]
    finally:
        server.stop()
    assert "HRT_AUTH=off" in server.log.read_text()


def test_the_server_log_audits_every_write_and_holds_no_secret(deployment: Deployment) -> None:
    d = deployment
    seed_writer(d)
    r = httpx.post(
        f"{d.server.base_url}/v1/ingest",
        json={"records": [concept(OTHER, "c-x", "X")]},
        headers={"authorization": f"Bearer {d.keys['ingest']}"},
        timeout=60,
    )
    assert r.status_code == 403
    assert httpx.delete(f"{d.server.base_url}/v1/users/{WRITER}", timeout=60).status_code == 401
    time.sleep(0.2)  # the log line is written after the response
    text = d.server.log.read_text()
    audit = [json.loads(line) for line in text.splitlines() if line.startswith('{"event":"write"')]
    mine = [a for a in audit if a["key"] == "m-ingest" and a["users"] == [OTHER]]
    assert mine and mine[-1]["outcome"] == "refused" and mine[-1]["status"] == 403 and mine[-1]["records"] == 1
    assert any(a["key"] is None and a["status"] == 401 for a in audit)
    assert any(a["outcome"] == "ok" and a["upserted"] == 2 for a in audit)
    assert not any(token in text for token in [*d.keys.values(), d.server.headers["authorization"][7:]] if token)


# --------------------------------------------------------------------------------------------
# a hostile tenant against a real server (#30): slow bodies, dropped bodies, auth off off loopback
# --------------------------------------------------------------------------------------------


def slow_ingest(server: ServerProcess, token: str) -> socket.socket:
    """An ingest that announces 100,000 bytes, sends 14 and holds its socket open."""
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.sendall(
        (
            f"POST /v1/ingest HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
            '{"records": ['
        ).encode()
    )
    return sock


def answer_of(sock: socket.socket) -> tuple[int, dict[str, object]]:
    """The status and JSON body the server answered on a raw socket (read until it closes)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def audit_of(server: ServerProcess) -> list[dict[str, object]]:
    lines = server.log.read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith('{"event":"write"')]


@pytest.fixture
def tenants(tmp_path: Path) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    """A real server whose body read deadline is 3 s, with ingest keys of two tenants."""
    server = start_hrt_server(tmp_path / "t.db", tmp_path / "t.log", env={"HRT_BODY_READ_TIMEOUT_S": "3"})
    made = {}
    with server.client(timeout=60) as c:
        for name, user in (("evil", "u-evil"), ("good", "u-good")):
            r = c.post("/v1/keys", json={"name": name, "scopes": ["ingest", "admin"], "users": [user]})
            assert r.status_code == 201, r.text
            made[name] = r.json()["key"]
    try:
        yield server, made
    finally:
        server.stop()


def test_slow_bodies_of_one_tenant_block_no_other_tenants_writes(tenants) -> None:
    """Finding 1: two ingests holding their sockets after 14 bytes of a 100,000-byte body once took
    both write slots, and every tenant's writes answered 429 for as long as the sockets stayed open."""
    server, keys = tenants
    held = [slow_ingest(server, keys["evil"]) for _ in range(2)]
    good = {"authorization": f"Bearer {keys['good']}"}
    with httpx.Client(base_url=server.base_url, headers=good, timeout=60) as c:
        # the server has the slow requests (they are past the key check) before the others go
        third = slow_ingest(server, keys["evil"])
        status, body = answer_of(third)  # one key holds at most half of the ingest body places
        assert status == 429 and "its share" in str(body["error"]), body
        write = c.post("/v1/ingest", json={"records": [concept("u-good", "c-1", "One")]})
        assert write.status_code == 200, write.text
        assert c.delete("/v1/users/u-good/entities/concept/c-1").status_code == 200
        assert c.delete("/v1/users/u-good").status_code == 200
    answers = [answer_of(sock) for sock in held]  # the deadline ends them, and their connections
    assert [(s, b["error"]["code"], b["error"]["field"]) for s, b in answers] == [(408, "request_timeout", "body")] * 2  # type: ignore[index]
    assert server.proc.poll() is None


def test_a_client_that_drops_its_body_is_audited_as_aborted_not_failed(tenants) -> None:
    """Finding 8: a body cut off mid-way was logged as a 500 'failed'."""
    server, keys = tenants
    sock = slow_ingest(server, keys["evil"])
    sock.close()
    deadline = time.monotonic() + 30
    while not (lines := [a for a in audit_of(server) if a["key"] == "evil"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [(a["status"], a["outcome"]) for a in lines] == [(499, "aborted")]
    assert "Traceback" not in server.log.read_text()


def non_loopback_address() -> str:
    """This machine's address on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))
        address = str(s.getsockname()[0])
    assert not address.startswith("127."), "the test needs an address other than loopback"
    return address


def test_auth_off_answers_only_on_loopback_whatever_started_the_server(tmp_path: Path) -> None:
    """Finding 12: ``uvicorn --factory hrt.api.app:create_app --host 0.0.0.0`` with HRT_AUTH=off
    served every user's data off loopback, as the check read the configured host, not the socket."""
    port = free_port()
    env = {**os.environ, "HRT_DB_PATH": str(tmp_path / "off.db"), "HRT_AUTH": "off"}
    log = (tmp_path / "uvicorn.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "hrt.api.app:create_app",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        local = httpx.get(f"http://127.0.0.1:{port}/v1/users/u1/stats", timeout=30)
        assert local.status_code == 200, local.text
        remote = httpx.get(f"http://{non_loopback_address()}:{port}/v1/users/u1/stats", timeout=30)
        assert remote.status_code == 401 and "loopback" in remote.json()["error"]["message"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
