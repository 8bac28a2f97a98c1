"""One hostile key against one honest key on a real ``hrt serve`` (issue #45's measurement).

    python scripts/hostile_tenant.py                                 # embedded, 15 s per phase
    python scripts/hostile_tenant.py --seconds 10 --phases baseline,conversation_slots
    python scripts/hostile_tenant.py --deployment services           # starts the dev stack (hrt dev)

A measurement, not a test: it reports what the server does today, whatever that is. The server
(its own temporary directory, default settings) gets the bundled sample graph and two keys made
over HTTP, each with the server's default rate and concurrency limits:

- the **honest** key (``retrieve``, ``ingest``, ``export`` for ``u-maya`` and ``u-honest``) runs
  for the whole run, open loop on a fixed seeded schedule: ``--rate`` retrievals a second over the
  sample graph, ``--writes`` small writes a second (an ingest of two memory units and a one-message
  conversation call, in turn) and an export of its own small user every ``--export-every`` s. A
  request's latency is counted from the time it was scheduled, so a stalled server is not hidden
  by a client that waits for it (no coordinated omission); ``--honest-timeout`` counts as an error.
- the **hostile** key (``retrieve``, ``ingest``, ``export``, ``admin`` for ``u-hostile``, which it
  first fills with ``--large-entities`` memory units of ``--entity-kb`` KB) runs one attack per
  phase, for ``--seconds``, after a baseline phase with no attack. The attacks are those of issue
  #45 (the finding each aims at is in the report); ``--phases`` picks some. Before each attack a
  quiet phase of ``--quiet-seconds`` (the honest key alone) is what the attack is compared with:
  the honest key's own data grows during a run, so its later requests cost more whatever the
  attacker does, and a comparison with the first baseline alone would count that drift as harm.

Per phase: the honest key's requests, p50/p95 (ms) and error rate (any answer but 2xx, timeouts
included) per operation and overall, and its 5xx; the hostile key's statuses; the server's
resident memory at the start and at its peak (``/proc``, every 0.1 s) and, embedded, the SQLite
WAL's peak size; the echo probes' answers. Between phases the script waits (at most
``--settle-max`` s) until the server takes a write again, so the next phase starts on an idle
server; honest traffic in that wait is reported as the phase's ``settle``. Writes
``OUT/hostile-tenant-DEPLOYMENT.json`` and ``.md`` (a table) and prints the table.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import multiprocessing
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from hrt.bench.host import proc_status_kb, tree_cpu_s, tree_rss_mb
from hrt.bench.server import Server
from hrt.bench.stats import pct
from hrt.bench.targets import embedded_target, services_target
from hrt.cli import sample_data_path

ROOT = Path(__file__).resolve().parents[1]
AS_OF = "2026-01-01T00:00:00Z"
HONEST_READ, HONEST_WRITE, HOSTILE = "u-maya", "u-honest", "u-hostile"
PHRASES = ["Project Phoenix timeline", "team bandwidth", "pricing decision", "SOC 2 audit", "hiring plan"]
SEEDED = "SEEDED-CONTENT-7f3a"  # in every large entity's content: tells a full-content answer
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


# --------------------------------------------------------------------------------------------
# What was seen
# --------------------------------------------------------------------------------------------


@dataclass
class Recorder:
    """Everything both keys saw, labelled with the phase current when the request was scheduled
    (``None`` before the first phase; ``PHASE/settle`` while waiting for the server after one)."""

    label: str | None = None
    honest: list[tuple[str | None, str, float, int]] = field(default_factory=list)  # label, op, ms, status
    hostile: dict[str, Counter[str]] = field(default_factory=dict)
    probes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    rss: dict[str, list[float]] = field(default_factory=dict)
    wal: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    windows: list[tuple[float, str | None]] = field(default_factory=list)  # (monotonic start, label)

    def relabel(self, label: str | None) -> None:
        """Start ``label``'s window: honest requests scheduled from now on count under it."""
        with self.lock:
            self.label = label
            self.windows.append((time.monotonic(), label))

    def honest_rows(self, rows: list[tuple[float, str, float, int]]) -> None:
        """The honest process's requests (scheduled time, op, ms, status), each labelled with the
        window current at its scheduled time."""
        starts = [t for t, _ in self.windows]
        with self.lock:
            for due, op, ms, status in rows:
                at = bisect.bisect_right(starts, due) - 1
                self.honest.append((self.windows[at][1] if at >= 0 else None, op, ms, status))

    def hostile_saw(self, what: str) -> None:
        with self.lock:
            self.hostile.setdefault(self.label or "none", Counter())[what] += 1

    def probe(self, result: dict[str, Any]) -> None:
        with self.lock:
            self.probes.setdefault(self.label or "none", []).append(result)


# --------------------------------------------------------------------------------------------
# The honest key: a fixed, seeded, open-loop schedule
# --------------------------------------------------------------------------------------------


class Honest:
    """Three schedulers (retrievals, writes, exports) submitting to a pool at fixed times. It runs
    in a process of its own (``honest_process``), so the attacker's client threads never hold the
    honest client's interpreter lock: its latencies are the server's, not the script's."""

    def __init__(self, base: str, token: str, cfg: argparse.Namespace) -> None:
        self.base, self.cfg = base, cfg
        self.lock = threading.Lock()
        self.rows: list[tuple[float, str, float, int]] = []  # scheduled (monotonic), op, ms, status
        self.headers = {"authorization": f"Bearer {token}"}
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=24, thread_name_prefix="honest")
        self.local = threading.local()
        self.writes = 0
        self.threads = [
            threading.Thread(target=self.schedule, args=(op, every), daemon=True)
            for op, every in (("retrieve", 1 / cfg.rate), ("write", 1 / cfg.writes), ("export", cfg.export_every))
            if every > 0
        ]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)
        self.pool.shutdown(wait=True, cancel_futures=False)

    def client(self) -> httpx.Client:
        c: httpx.Client | None = getattr(self.local, "client", None)
        if c is None:
            c = self.local.client = httpx.Client(
                base_url=self.base, headers=self.headers, timeout=self.cfg.honest_timeout
            )
        return c

    def schedule(self, op: str, every: float) -> None:
        rng = random.Random(f"{self.cfg.seed}-{op}")
        due = time.monotonic() + rng.random() * every  # the three schedules out of phase
        while not self.stop.is_set():
            self.stop.wait(max(0.0, due - time.monotonic()))
            if self.stop.is_set():
                return
            self.pool.submit(self.run, op, due, rng.random())
            due += every

    def run(self, op: str, due: float, draw: float) -> None:
        try:
            status = self.request(op, draw)
        except httpx.HTTPError:
            status = 0  # a timeout or a broken connection: an error for the honest key
        with self.lock:
            self.rows.append((due, op, (time.monotonic() - due) * 1000, status))

    def request(self, op: str, draw: float) -> int:
        c = self.client()
        if op == "retrieve":
            rng = random.Random(draw)
            ask = {"user_id": HONEST_READ, "key_phrases": rng.sample(PHRASES, k=rng.randint(1, 3)), "as_of": AS_OF}
            return c.post("/v1/retrieve", json=ask).status_code
        if op == "export":
            with c.stream("GET", f"/v1/users/{HONEST_WRITE}/export") as r:
                for _ in r.iter_bytes():
                    pass
                return r.status_code
        with self.lock:
            n = self.writes = self.writes + 1
        if n % 2:
            return c.post("/v1/ingest", json={"records": honest_units(n)}).status_code
        said = {"role": "user", "content": f"Note {n}: the weekly sync moved to Thursday at {9 + n % 8}:00."}
        body: dict[str, Any] = {"user_id": HONEST_WRITE, "session_id": f"s-honest-{n % 5}", "messages": [said]}
        return c.post("/v1/conversations", json=body).status_code


def honest_process(base: str, token: str, cfg: argparse.Namespace, stop: Any, out: Any) -> None:
    """The honest key's whole run in a child process: from start until ``stop`` is set, then its
    requests through the pipe ``out``. CLOCK_MONOTONIC is shared by the processes on one host, so
    the parent labels each request by its scheduled time."""
    honest = Honest(base, token, cfg)
    honest.start()
    stop.wait()
    honest.close()
    with honest.lock:
        out.send(honest.rows)
    out.close()


def honest_units(n: int) -> list[dict[str, Any]]:
    """Two small memory units, their ids cycling over 100 so the honest data stops growing."""
    return [
        {
            "kind": "memory_unit",
            "user_id": HONEST_WRITE,
            "muid": f"honest-{(n + i) % 100}",
            "title": f"Honest note {n}.{i}",
            "content": f"Checked the Phoenix dashboard, iteration {n}; latency looked fine ({i}).",
            "creation_ts": f"2025-{1 + n % 12:02d}-{1 + i % 28:02d}T09:00:00Z",
        }
        for i in range(2)
    ]


# --------------------------------------------------------------------------------------------
# The hostile key: one attack per phase
# --------------------------------------------------------------------------------------------


@dataclass
class Attack:
    """What the hostile key does in one phase, until ``deadline``."""

    base: str
    token: str
    cfg: argparse.Namespace
    rec: Recorder
    deadline: float
    marker: str = field(default_factory=lambda: "ECHO" + uuid.uuid4().hex)

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    local: threading.local = field(default_factory=threading.local)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    @property
    def http(self) -> httpx.Client:
        """This thread's client: an attacker keeps its connections (a new client a request would
        spend the shared cores on the script's TLS setup, not on the server)."""
        c: httpx.Client | None = getattr(self.local, "client", None)
        if c is None:
            c = self.local.client = httpx.Client(timeout=None)
        return c

    def workers(self, n: int, body: Callable[[int], object]) -> None:
        """``body(i)`` over and over in ``n`` threads until the deadline; returns when all end."""

        def loop(i: int) -> None:
            while self.left() > 0.2:
                try:
                    body(i)
                except Exception as exc:  # an attack's client failing is a result, not a crash
                    self.rec.hostile_saw(f"client {type(exc).__name__}")
                    time.sleep(0.2)

        threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=max(1.0, self.left()) + 30)

    def call(self, op: str, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response | None:
        """One request bounded by the phase (a request still running at the deadline is dropped by
        the client; the server may go on with it, which the settle wait after the phase sees)."""
        headers = {"authorization": f"Bearer {token or self.token}", **kw.pop("headers", {})}
        try:
            r = self.http.request(method, self.base + path, headers=headers, timeout=max(1.0, self.left() + 1), **kw)
        except httpx.HTTPError as exc:
            self.rec.hostile_saw(f"{op} {type(exc).__name__}")
            return None
        self.rec.hostile_saw(f"{op} {r.status_code}{refusal(r.status_code, r.content)}")
        return r


def refusal(status: int, body: bytes) -> str:
    """A refusal's error code (which share was full, which bound hit), for the hostile tally."""
    if status not in (408, 413, 429, 503):
        return ""
    try:
        return " " + str(json.loads(body)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


_JUNK: dict[int, bytes] = {}


def junk(size: int) -> bytes:
    """A JSON list of empty objects of about ``size`` bytes: cheap to send, the costliest tree to
    decode (a dict per three bytes)."""
    if size not in _JUNK:
        _JUNK[size] = b"[" + b"{}," * (size // 3 - 1) + b"{}]"
    return _JUNK[size]


def body_bytes(cfg: argparse.Namespace) -> int:
    return int(cfg.body_mib * 1_048_576)


def ingest_nested(a: Attack) -> None:
    """H3: one record whose properties hold the junk, two bodies at once (the key's share)."""
    head = json.dumps(
        {"records": [{"kind": "concept", "user_id": HOSTILE, "id": "c-junk", "name": "junk", "properties": {}}]}
    )
    body = head.replace('"properties": {}', '"properties": {"x": ').encode()
    payload = body[:-3] + junk(body_bytes(a.cfg) - len(body)) + b"}}]}"
    a.workers(2, lambda i: a.call("ingest", "POST", "/v1/ingest", content=payload, headers=_JSON))


def ingest_unknown_key(a: Attack) -> None:
    """H3: a valid record and an unknown top-level key holding the junk."""
    record = {"kind": "concept", "user_id": HOSTILE, "id": "c-ok", "name": "fine"}
    head = json.dumps({"records": [record]}).encode()
    payload = head[:-1] + b', "junk": ' + junk(body_bytes(a.cfg) - len(head) - 12) + b"}"
    a.workers(2, lambda i: a.call("ingest", "POST", "/v1/ingest", content=payload, headers=_JSON))


def conversation_nested(a: Attack) -> None:
    """H3: a conversation body with its junk in an unknown key, decoded whole before validation."""
    head = json.dumps({"user_id": HOSTILE, "session_id": "s-junk", "messages": [{"content": "hi"}]}).encode()
    payload = head[:-1] + b', "junk": ' + junk(body_bytes(a.cfg) - len(head) - 12) + b"}"
    a.workers(2, lambda i: a.call("conversation", "POST", "/v1/conversations", content=payload, headers=_JSON))


_JSON = {"content-type": "application/json"}


def heavy_text(rng: random.Random, chars: int) -> str:
    """``chars`` of words from a large made-up vocabulary: many distinct terms for the statistics."""
    syllables = ["ka", "lo", "mi", "ter", "van", "qu", "os", "zel", "rin", "du", "pha", "ek", "sto", "bri"]
    out: list[str] = []
    size = 0
    while size < chars:
        word = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))
        out.append(word.capitalize() if rng.random() < 0.2 else word)
        size += len(word) + 1
    return " ".join(out)[:chars]


def conversation_slots(a: Attack) -> None:
    """H1: heavy conversation calls (``--heavy-messages`` of ``--heavy-kb`` KB) and trivial calls
    for the same user at once: each holds a write slot, the trivial one waiting for the user's lock."""
    rng = random.Random(a.cfg.seed)
    counter = iter(range(10**9))

    def send(i: int) -> None:
        n = next(counter)
        if i == 0:
            said = [{"content": heavy_text(rng, a.cfg.heavy_kb * 1000)} for _ in range(a.cfg.heavy_messages)]
        else:
            said = [{"content": f"ok {n}"}]
        body = {"user_id": HOSTILE, "session_id": f"s-heavy-{n}", "messages": said}
        a.call("conversation", "POST", "/v1/conversations", json=body)

    a.workers(2, send)


def export_unread(a: Attack) -> None:
    """M1: exports of the hostile user opened and never read, more than the server's slots."""

    def hold(i: int) -> None:
        try:
            with a.http.stream(
                "GET", f"{a.base}/v1/users/{HOSTILE}/export", headers=a.headers, timeout=max(1.0, a.left() + 5)
            ) as r:
                a.rec.hostile_saw(f"export {r.status_code}")
                if r.status_code == 200:
                    while a.left() > 0.2:  # the stream stays open, unread
                        time.sleep(0.2)
                else:
                    time.sleep(0.5)
        except httpx.HTTPError as exc:
            a.rec.hostile_saw(f"export {type(exc).__name__}")

    a.workers(3, hold)


def browse_large(a: Attack) -> None:
    """M2: pages of 500 large entities, 10 at once, every other one left unread for 2 s."""

    def page(i: int) -> None:
        path = f"{a.base}/v1/users/{HOSTILE}/entities?kind=memory_unit&limit=500"
        try:
            with a.http.stream("GET", path, headers=a.headers, timeout=max(1.0, a.left() + 5)) as r:
                a.rec.hostile_saw(f"browse {r.status_code}")
                if i % 2:
                    time.sleep(min(2.0, max(0.0, a.left())))
                else:
                    for _ in r.iter_bytes():
                        pass
        except httpx.HTTPError as exc:
            a.rec.hostile_saw(f"browse {type(exc).__name__}")

    a.workers(10, page)


def slow_body(a: Attack, token: str, op: str) -> None:
    """An ingest announcing 1 MB, trickling a byte a second until the server answers (its read
    deadline) or the phase ends."""
    host, port = a.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            (
                f"POST /v1/ingest HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
                '{"records": ['
            ).encode()
        )
        sock.settimeout(1.0)
        while a.left() > 0.2:
            try:
                answer = sock.recv(4096)
            except TimeoutError:
                with contextlib.suppress(OSError):
                    sock.sendall(b" ")
                continue
            with contextlib.suppress(OSError):  # the body may follow the head in a packet of its own
                while b"\r\n\r\n" not in answer or answer.endswith(b"\r\n\r\n"):
                    more = sock.recv(4096)
                    if not more:
                        break
                    answer += more
            head, _, body = answer.partition(b"\r\n\r\n")
            status = head.split(b"\r\n", 1)[0].split()
            code = int(status[1]) if len(status) > 1 and status[1].isdigit() else 0
            a.rec.hostile_saw(f"{op} {code or 'closed'}{refusal(code, body)}")
            time.sleep(0.25)  # a refused body is retried, not flooded: the attack is the holding
            return
        a.rec.hostile_saw(f"{op} held to the end")


def many_bodies(a: Attack) -> None:
    """Slow ingest bodies, 8 at once from the one key (which may hold 2 of the server's places)."""
    a.workers(8, lambda i: slow_body(a, a.token, "slow-body"))


def child_keys(a: Attack) -> None:
    """M3: two child keys made over HTTP, then 4 slow bodies from each of the three keys."""
    tokens = [a.token]
    for i in range(2):
        body = {"name": f"child-{i}-{uuid.uuid4().hex[:6]}", "scopes": ["ingest"], "users": [HOSTILE]}
        r = a.call("keys", "POST", "/v1/keys", json=body)
        if r is not None and r.status_code == 201:
            tokens.append(r.json()["key"])
    a.workers(4 * len(tokens), lambda i: slow_body(a, tokens[i % len(tokens)], "slow-body"))


def mcp_body(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def mcp_call(a: Attack, op: str, body: dict[str, Any] | bytes, token: str | None = None) -> httpx.Response | None:
    """A JSON-RPC POST to /mcp (stateless: no session to open first); the status and whether the
    tool answered an error."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"authorization": f"Bearer {token or a.token}", **MCP_HEADERS}
    try:
        r = a.http.post(a.base + "/mcp", content=content, headers=headers, timeout=max(1.0, a.left() + 1))
    except httpx.HTTPError as exc:
        a.rec.hostile_saw(f"{op} {type(exc).__name__}")
        return None
    tool_error = ""
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        doc = r.json()
        if doc.get("result", {}).get("isError"):
            tool_error = " tool-error " + json.loads(doc["result"]["content"][0]["text"])["error"]["code"]
        elif "error" in doc:
            tool_error = " jsonrpc-error"
    a.rec.hostile_saw(f"{op} {r.status_code}{tool_error}")
    return r


def mcp_remember(a: Attack) -> None:
    """L5: MCP remember with ``--mcp-records`` records (the REST bound is 10,000), two at once."""
    records = [
        {"kind": "concept", "user_id": HOSTILE, "id": f"c-mcp-{i}", "name": f"Thing {i}"}
        for i in range(a.cfg.mcp_records)
    ]
    payload = json.dumps(mcp_body("tools/call", {"name": "remember", "arguments": {"records": records}})).encode()
    a.workers(2, lambda i: mcp_call(a, "mcp-remember", payload))


def echo_probes(a: Attack) -> None:
    """M5 and M4: inputs the server may echo (a 200 KB unknown key, a long id, a tool name, a
    JSON-RPC method), each sent over and over, and a retrieve-only child key browsing full content.
    The first answer of each that is not a 429 (a refusal by a rate says nothing of echoes) is
    reported: status, bytes in and out, whether the marker came back."""
    big = a.marker + "x" * 200_000
    probes: list[tuple[str, str, Callable[[], tuple[httpx.Response | None, int]]]] = [
        ("rest unknown key (retrieve)", "M5", lambda: rest_probe(a, "/v1/retrieve", {big: 1, "user_id": HOSTILE})),
        ("rest unknown key (conversations)", "M5", lambda: rest_probe(a, "/v1/conversations", {big: 1})),
        ("mcp id value (recall_entity)", "M5", lambda: mcp_probe(a, "recall_entity", {"entity_id": big + "!"})),
        ("mcp unknown tool", "M5", lambda: mcp_probe(a, big, {})),
        ("jsonrpc unknown method", "M5", lambda: raw_mcp_probe(a, mcp_body(big, {}))),
    ]
    reader_key = {"name": f"reader-{a.marker[-6:]}", "scopes": ["retrieve"], "users": [HOSTILE]}
    child = a.call("keys", "POST", "/v1/keys", json=reader_key)
    if child is not None and child.status_code == 201:
        reader = child.json()["key"]
        probes.append(("retrieve-only key browses full content", "M4", lambda: browse_probe(a, reader)))
    seen: set[str] = set()

    def run(i: int) -> None:
        name, finding, probe = probes[i % len(probes)]
        r, sent = probe()
        if r is None or r.status_code == 429 or name in seen:
            return
        seen.add(name)
        text = r.text
        marker = SEEDED if finding == "M4" else a.marker
        a.rec.probe(
            {
                "probe": name,
                "finding": finding,
                "status": r.status_code,
                "request_bytes": sent,
                "response_bytes": len(r.content),
                "echoed" if finding == "M5" else "full_content": marker in text,
            }
        )

    a.workers(len(probes), run)


def rest_probe(a: Attack, path: str, body: dict[str, Any]) -> tuple[httpx.Response | None, int]:
    content = json.dumps(body).encode()
    return a.call("echo", "POST", path, content=content, headers=_JSON), len(content)


def mcp_probe(a: Attack, tool: str, args: dict[str, Any]) -> tuple[httpx.Response | None, int]:
    body = json.dumps(mcp_body("tools/call", {"name": tool, "arguments": {"kind": "concept", **args}})).encode()
    return mcp_call(a, "echo-mcp", body), len(body)


def raw_mcp_probe(a: Attack, body: dict[str, Any]) -> tuple[httpx.Response | None, int]:
    content = json.dumps(body).encode()
    return mcp_call(a, "echo-mcp", content), len(content)


def browse_probe(a: Attack, token: str) -> tuple[httpx.Response | None, int]:
    return a.call("browse-reader", "GET", f"/v1/users/{HOSTILE}/entities?limit=500", token=token), 0


@dataclass(frozen=True)
class Phase:
    name: str
    findings: str
    what: str
    attack: Callable[[Attack], None] | None


PHASES = [
    Phase("baseline", "", "no attack", None),
    Phase("ingest_nested", "H3", "/v1/ingest: one record holding --body-mib of nested junk, 2 at once", ingest_nested),
    Phase(
        "ingest_unknown_key", "H3", "/v1/ingest: a valid record + an unknown key of junk, 2 at once", ingest_unknown_key
    ),
    Phase("conversation_nested", "H3", "/v1/conversations: an unknown key of junk, 2 at once", conversation_nested),
    Phase("conversation_slots", "H1", "heavy conversation calls + trivial ones for the same user", conversation_slots),
    Phase("export_unread", "M1", "3 exports of the large user, opened and never read", export_unread),
    Phase("browse_large", "M2", "browse pages of 500 large entities, 10 at once, half unread", browse_large),
    Phase("many_bodies", "", "8 slow ingest bodies at once from one key", many_bodies),
    Phase("child_keys", "M3", "2 child keys made over HTTP, 4 slow bodies from each key", child_keys),
    Phase("mcp_remember", "L5", "MCP remember with --mcp-records records, 2 at once", mcp_remember),
    Phase(
        "echo_probes", "M5 M4", "200 KB keys and ids, unknown tools and methods; a retrieve-only browse", echo_probes
    ),
]


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def sample_memory(pid: int, wal: Path | None, rec: Recorder, stop: threading.Event) -> None:
    """The server's resident size every 0.1 s (and the WAL's size), under the current label."""
    while not stop.is_set():
        mb = (proc_status_kb(pid, "VmRSS") or 0) / 1024
        wal_mb = wal.stat().st_size / 1_048_576 if wal is not None and wal.exists() else 0.0
        with rec.lock:
            label = rec.label or "none"
            rec.rss.setdefault(label, []).append(mb)
            rec.wal[label] = max(rec.wal.get(label, 0.0), wal_mb)
        stop.wait(0.1)


def settle(base: str, headers: dict[str, str], limit: float) -> float:
    """Seconds until the server takes a small write again (a write slot is free), at most ``limit``."""
    t0 = time.monotonic()
    record = {"kind": "concept", "user_id": "u-probe", "id": "c-probe", "name": "probe"}
    while time.monotonic() - t0 < limit:
        with contextlib.suppress(httpx.HTTPError):
            r = httpx.post(f"{base}/v1/ingest", json={"records": [record]}, headers=headers, timeout=limit)
            if r.status_code == 200:
                break
        time.sleep(0.5)
    return round(time.monotonic() - t0, 1)


def setup(server: Server, cfg: argparse.Namespace) -> tuple[str, str]:
    """The sample graph, the two keys (with the server's default limits), the hostile user's
    large entities; the honest and hostile tokens."""
    with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=600) as c:
        for user in ("u-maya", "u-tom", "u-sara", HONEST_WRITE, HOSTILE, "u-probe"):
            c.delete(f"/v1/users/{user}")
        ndjson = {"content-type": "application/x-ndjson"}
        c.post("/v1/ingest", content=sample_data_path().read_bytes(), headers=ndjson).raise_for_status()
        c.post("/v1/ingest", json={"records": honest_units(0)}).raise_for_status()
        limits = {"rate_limit": 100.0, "max_concurrency": 32}  # HRT_KEY_RATE_LIMIT, HRT_KEY_MAX_CONCURRENCY
        tokens = []
        for name, scopes, users in (
            ("honest", ["retrieve", "ingest", "export"], [HONEST_READ, HONEST_WRITE]),
            ("hostile", ["retrieve", "ingest", "export", "admin"], [HOSTILE]),
        ):
            r = c.post(
                "/v1/keys", json={"name": f"{name}-{uuid.uuid4().hex[:6]}", "scopes": scopes, "users": users, **limits}
            )
            r.raise_for_status()
            tokens.append(r.json()["key"])
        rng = random.Random(cfg.seed)
        for start in range(0, cfg.large_entities, 20):
            units = [
                {
                    "kind": "memory_unit",
                    "user_id": HOSTILE,
                    "muid": f"big-{i}",
                    "title": f"Large {i}",
                    "content": SEEDED + " " + heavy_text(rng, cfg.entity_kb * 1000 - len(SEEDED) - 1),
                    "creation_ts": "2025-06-01T09:00:00Z",
                }
                for i in range(start, min(start + 20, cfg.large_entities))
            ]
            # loaded by the operator's key: the attack is what the phases do, not this setup
            c.post("/v1/ingest", json={"records": units}).raise_for_status()
    return tokens[0], tokens[1]


def run_phases(server: Server, cfg: argparse.Namespace, wal: Path | None, rec: Recorder) -> list[dict[str, Any]]:
    honest_token, hostile_token = setup(server, cfg)
    stop = threading.Event()
    sampler = threading.Thread(target=sample_memory, args=(server.proc.pid, wal, rec, stop), daemon=True)
    sampler.start()
    spawn = multiprocessing.get_context("spawn")
    honest_stop = spawn.Event()
    rows_in, rows_out = spawn.Pipe(duplex=False)
    honest = spawn.Process(
        target=honest_process, args=(server.base_url, honest_token, cfg, honest_stop, rows_out), daemon=True
    )
    rec.relabel(None)
    honest.start()
    if cfg.attacker_nice:
        os.nice(cfg.attacker_nice)  # after the honest process started: it keeps the default priority
    timings: list[tuple[Phase, float, float, tuple[float, float]]] = []
    try:
        for phase in selected(cfg.phases):
            print(f"phase {phase.name} ({cfg.seconds:.0f} s)", file=sys.stderr, flush=True)
            if phase.attack is not None and cfg.quiet_seconds:
                rec.relabel(f"{phase.name}/quiet")  # the honest key alone, just before the attack
                time.sleep(cfg.quiet_seconds)
            rec.relabel(phase.name)
            started = time.monotonic()
            cpu = (tree_cpu_s(server.proc.pid), time.process_time())
            if phase.attack is None:
                time.sleep(cfg.seconds)
            else:
                phase.attack(Attack(server.base_url, hostile_token, cfg, rec, started + cfg.seconds))
            ran = time.monotonic() - started
            cpu = (tree_cpu_s(server.proc.pid) - cpu[0], time.process_time() - cpu[1])
            rec.relabel(f"{phase.name}/settle")
            waited = settle(server.base_url, server.headers, cfg.settle_max)
            timings.append((phase, round(ran, 1), waited, cpu))
            rec.relabel(None)
            if server.proc.poll() is not None:
                break  # the server died: what ran is the report
            time.sleep(1.0)
    finally:
        honest_stop.set()
        if rows_in.poll(cfg.honest_timeout + 30):
            rec.honest_rows(rows_in.recv())
        honest.join(timeout=10)
        stop.set()
        sampler.join(timeout=5)
    reports = [phase_report(*t, rec) for t in timings]
    against_quiet(reports, rec, cfg.seed)
    return reports


def selected(names: str | None) -> list[Phase]:
    if not names:
        return PHASES
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = wanted - {p.name for p in PHASES}
    if unknown:
        raise SystemExit(f"unknown phases: {sorted(unknown)}; known: {[p.name for p in PHASES]}")
    return [p for p in PHASES if p.name == "baseline" or p.name in wanted]


def honest_stats(rows: list[tuple[str, float, int]]) -> dict[str, Any]:
    ms = [m for _, m, _ in rows]
    statuses = Counter(str(s) for _, _, s in rows)
    errors = sum(not 200 <= s < 300 for _, _, s in rows)
    return {
        "requests": len(rows),
        "p50_ms": round(pct(ms, 0.5), 1) if ms else None,
        "p95_ms": round(pct(ms, 0.95), 1) if ms else None,
        "error_rate": round(errors / len(rows), 4) if rows else None,
        "server_errors": sum(s >= 500 for _, _, s in rows),
        "statuses": dict(sorted(statuses.items())),
    }


def versus(base: list[float], ms: list[float], seed: int, rounds: int = 2000) -> dict[str, Any] | None:
    """The phase's p95 against the baseline's: their ratio and a 95% bootstrap interval of the
    difference (ms; both samples resampled, seeded); ``within_noise`` when the interval reaches 0
    or below (no evidence the phase is slower)."""
    if len(base) < 5 or len(ms) < 5:
        return None
    rng = random.Random(seed)
    diffs = sorted(
        pct(rng.choices(ms, k=len(ms)), 0.95) - pct(rng.choices(base, k=len(base)), 0.95) for _ in range(rounds)
    )
    low, high = diffs[int(0.025 * rounds)], diffs[int(0.975 * rounds) - 1]
    return {
        "ratio": round(pct(ms, 0.95) / pct(base, 0.95), 2),
        "diff_ci_ms": [round(low, 1), round(high, 1)],
        "within_noise": low <= 0,
    }


def against_quiet(reports: list[dict[str, Any]], rec: Recorder, seed: int) -> None:
    """Each attack phase's honest p95, all requests and retrievals alone, against the quiet phase
    just before it (``p95_vs_quiet``; the first baseline's when it had none)."""
    with rec.lock:
        rows = list(rec.honest)
    for op in ("all", "retrieve"):

        def sample(phase: str, op: str = op) -> list[float]:
            return [ms for label, o, ms, _ in rows if label == phase and op in ("all", o)]

        for report in reports:
            if report["phase"] != "baseline" and op in report["honest"]:
                quiet = sample(f"{report['phase']}/quiet")
                against = versus(quiet or sample("baseline"), sample(report["phase"]), seed)
                if against is not None:
                    against["against"] = "quiet" if quiet else "baseline"
                report["honest"][op]["p95_vs_quiet"] = against


def phase_report(
    phase: Phase, seconds: float, settle_s: float, cpu: tuple[float, float], rec: Recorder
) -> dict[str, Any]:
    """One phase's figures; ``cpu`` is the CPU seconds the server and the attacker's process (this
    one, the honest key running in its own) used during the attack."""
    with rec.lock:
        mine = [(op, ms, st) for label, op, ms, st in rec.honest if label == phase.name]
        after = [(op, ms, st) for label, op, ms, st in rec.honest if label == f"{phase.name}/settle"]
        quiet = [(op, ms, st) for label, op, ms, st in rec.honest if label == f"{phase.name}/quiet"]
        rss = rec.rss.get(phase.name, []) + rec.rss.get(f"{phase.name}/settle", [])
        wal = max(rec.wal.get(phase.name, 0.0), rec.wal.get(f"{phase.name}/settle", 0.0))
        hostile = dict(sorted((rec.hostile.get(phase.name, Counter())).items()))
        probes = rec.probes.get(phase.name, [])
    ops = sorted({op for op, _, _ in mine})
    return {
        "phase": phase.name,
        "findings": phase.findings.split(),
        "attack": phase.what,
        "seconds": seconds,
        "settle_s": settle_s,
        "cpu_s": {"server": round(cpu[0], 2), "attacker": round(cpu[1], 2)},
        "honest": {
            "all": honest_stats(mine),
            **{op: honest_stats([r for r in mine if r[0] == op]) for op in ops},
            "settle": honest_stats(after),
            "quiet": honest_stats(quiet),
        },
        "hostile": hostile,
        "rss_start_mb": round(rss[0], 1) if rss else None,
        "rss_peak_mb": round(max(rss), 1) if rss else None,
        "wal_peak_mb": round(wal, 1) if wal else None,
        "probes": sorted(probes, key=lambda p: p["probe"]),
    }


def markdown(result: dict[str, Any]) -> str:
    head = (
        f"Hostile tenant, {result['deployment']}, {result['date']}, commit {result['commit'][:10]}, "
        f"{result['config']['seconds']:.0f} s per phase\n\n"
        "| phase | findings | honest requests | p50 ms | p95 ms | p95 vs quiet: all, retrievals | errors | 5xx | "
        "writes refused | hostile statuses | RSS start MB | RSS peak MB | settle s | CPU s server / attacker |\n"
        + "|---" * 14
        + "|\n"
    )
    rows = []
    for p in result["phases"]:
        h = p["honest"]["all"]
        write = p["honest"].get("write", {})
        refused = write.get("statuses", {}).get("429", 0)
        hostile = ", ".join(f"{k}: {v}" for k, v in p["hostile"].items()) or "-"
        rate = f"{100 * h['error_rate']:.1f}%" if h["error_rate"] is not None else "-"
        rows.append(
            f"| {p['phase']} | {' '.join(p['findings']) or '-'} | {h['requests']} | {h['p50_ms']} | {h['p95_ms']} | "
            f"{noise(h)}, {noise(p['honest'].get('retrieve', {}))} | {rate} | {h['server_errors']} | "
            f"{refused}/{write.get('requests', 0)} | {hostile} | "
            f"{p['rss_start_mb']} | {p['rss_peak_mb']} | {p['settle_s']} | "
            f"{p['cpu_s']['server']} / {p['cpu_s']['attacker']} |"
        )
    probes = [pr for p in result["phases"] for pr in p["probes"]]
    tail = ""
    if probes:
        tail = "\n\n| probe | finding | status | bytes in | bytes out | echoed / full content |\n"
        tail += "|---|---|---|---|---|---|\n"
        tail += "\n".join(
            f"| {pr['probe']} | {pr['finding']} | {pr['status']} | {pr['request_bytes']} | {pr['response_bytes']} | "
            f"{pr.get('echoed', pr.get('full_content'))} |"
            for pr in probes
        )
    return head + "\n".join(rows) + tail + "\n"


def noise(stats: dict[str, Any]) -> str:
    """``1.12x [-4.1, 9.0]``: the p95's ratio to the quiet phase's and the interval of the
    difference (ms), marked ``*`` when the phase is slower beyond noise."""
    v = stats.get("p95_vs_quiet")
    if not v:
        return "-"
    low, high = v["diff_ci_ms"]
    return f"{v['ratio']}x [{low}, {high}]{'' if v['within_noise'] else ' *'}"


@contextlib.contextmanager
def deployment(cfg: argparse.Namespace, work: Path) -> Iterator[tuple[Server, Path | None, dict[str, int]]]:
    """The server of ``--deployment`` (and in services, the dev stack): the server, the embedded
    WAL's path, the stores' pids."""
    stack_ctx = None
    if cfg.deployment == "services":
        from hrt import devstack

        stack_ctx = devstack.running(cfg.stack_dir or work / "stack", devstack.SERVICES)
        target = services_target(stack_ctx.__enter__(), "hostile")
        wal = None
    else:
        target = embedded_target(work, "hostile")
        wal = Path(target.env["HRT_DB_PATH"] + "-wal")
    try:
        server = Server(target.env, work / "server.log", None)
        try:
            yield server, wal, target.service_pids
        finally:
            server.stop()
    finally:
        if stack_ctx is not None:
            stack_ctx.__exit__(None, None, None)


def commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deployment", choices=["embedded", "services"], default="embedded")
    ap.add_argument("--seconds", type=float, default=15.0, help="each phase's length")
    ap.add_argument(
        "--quiet-seconds", type=float, default=10.0, help="the honest key alone before each attack (0: none)"
    )
    ap.add_argument("--phases", default=None, help="comma-separated phases to run (baseline always runs)")
    ap.add_argument("--rate", type=float, default=4.0, help="honest retrievals a second")
    ap.add_argument("--writes", type=float, default=1.0, help="honest small writes a second")
    ap.add_argument("--export-every", type=float, default=5.0, help="seconds between honest exports (0: none)")
    ap.add_argument("--honest-timeout", type=float, default=30.0)
    ap.add_argument(
        "--attacker-nice",
        type=int,
        default=19,
        help="the attacking process's niceness (0: none); on one host it keeps the attacker's own "
        "client from taking the CPU the server and the honest key would have on separate hosts",
    )
    ap.add_argument("--seed", type=int, default=45)
    ap.add_argument("--body-mib", type=float, default=15.0, help="junk bodies' size (the server's bound is 16)")
    ap.add_argument("--heavy-kb", type=int, default=100, help="each heavy conversation message's size")
    ap.add_argument("--heavy-messages", type=int, default=3)
    ap.add_argument("--large-entities", type=int, default=500, help="the hostile user's large memory units")
    ap.add_argument("--entity-kb", type=int, default=100, help="each large memory unit's content")
    ap.add_argument("--mcp-records", type=int, default=12_000)
    ap.add_argument("--settle-max", type=float, default=120.0, help="longest wait for an idle server after a phase")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "hostile-tenant")
    ap.add_argument("--stack-dir", type=Path, default=None, help="a dev stack to reuse (services)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (database, server log)")
    cfg = ap.parse_args(argv)
    if cfg.export_every <= 0:
        cfg.export_every = 0.0
    return cfg


def main(argv: list[str] | None = None) -> int:
    cfg = parse(argv)
    cfg.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="hrt-hostile-"))
    work.chmod(0o755)  # the dev stack's PostgreSQL runs as its own user and must traverse it
    rec = Recorder()
    try:
        with deployment(cfg, work) as (server, wal, store_pids):
            phases = run_phases(server, cfg, wal, rec)
            died = server.proc.poll() is not None
            stores = {name: tree_rss_mb(pid) for name, pid in store_pids.items()}
            log = server.log_tail(10**7)
    finally:
        if not cfg.keep:
            shutil.rmtree(work, ignore_errors=True)
    first = log.find("Traceback")
    result = {
        "command": "python scripts/hostile_tenant.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "commit": commit(),
        "deployment": cfg.deployment,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()},
        "server": {
            "died": died,
            "tracebacks": log.count("Traceback"),
            "first_traceback": log[first : first + 3000] if first >= 0 else None,
            "stores_rss_mb_at_end": stores,
        },
        "phases": phases,
    }
    out = cfg.out / f"hostile-tenant-{cfg.deployment}.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    table = markdown(result)
    out.with_suffix(".md").write_text(table, encoding="utf-8")
    print(table)
    print(f"wrote {out} and {out.with_suffix('.md')}")
    return 1 if died else 0


if __name__ == "__main__":
    raise SystemExit(main())
