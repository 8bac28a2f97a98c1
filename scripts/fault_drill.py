"""Fault drill: stop each store of a services deployment under a bounded load and bring it back as an
operator does, measuring what the operator and the clients see (issue #50).

    python scripts/fault_drill.py                      # weaviate, neo4j, postgres, one after another
    python scripts/fault_drill.py --stores weaviate --outage-s 10 --clients 2
    python scripts/fault_drill.py --weaviate-nodes 3 --stores weaviate-node2,weaviate-node1   # replicated

A measurement, not a test. It starts a dev stack of its own (``hrt dev up`` in a temporary folder:
the shared one is never touched), migrates it, loads the sample graph and starts ``hrt serve`` on
127.0.0.1. Then, per store: ``--clients`` threads retrieve back to back (a fixed request, pinned
``as_of``) and one thread writes a memory unit every ``--write-every-s``; the store is stopped by
its PID (as ``hrt dev status`` gives it) as an operator stops it (PostgreSQL: ``pg_ctl stop``'s
fast shutdown; ``--postgres-crash``: SIGKILL on a stack run durable), left down for ``--outage-s``,
and brought back with ``hrt dev up`` (the same function); ``hrt serve`` is never restarted.
With ``--weaviate-nodes 3`` Weaviate is a cluster of three nodes from the same binary behind a
TCP balancer (:mod:`hrt.devcluster`), HRT's collection created with replication factor 3, and each
round stops one node (``--kill-node``: SIGKILL) and starts it again on its old ports and data: ``weaviate-node2``, or
``weaviate-leader`` / ``weaviate-follower`` (the schema's Raft leader when the round starts, or a
node that is not); the rounds run in turn, so a later round's reads rely on the copy a node brought back in an earlier
one. Reported per store (or node):

- ``first_failover_ms``: from the stop to the first answer that is a 503 or marked degraded;
- ``known_down_ms``: from the stop to the first ``/readyz`` that says the store is unavailable;
- ``answer_ms_known_down``: p50 / max latency of the retrievals sent once it was known down;
- ``readyz_ms``: max ``/readyz`` latency during the outage;
- ``writes``: accepted and refused (503, with the slowest refusal) during the outage; every write
  acknowledged (200) during the store's round still held afterwards (``acknowledged_missing``
  lists those that are not), and whether all reached both projections (``hrt doctor`` clean);
- ``full_service_s``: from ``hrt dev up`` returning (the store answering) to ``/readyz`` 200 and
  a retrieval answering undegraded;
- ``same_answer_after``: the retrieval after recovery byte-identical to the one before the fault;
- ``whole_answers_differing``: of the round's whole answers (200, not degraded), those whose bytes
  differ from the answer before the stop (a replicated store must keep this at 0);
- ``replication_factor`` (a node's round): the copies the collection keeps, read from the cluster.

Writes ``--out`` (JSON; by default into the drill's folder, never into the repository) and prints a
Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from hrt import devcluster, devstack
from hrt.bench.server import Server
from hrt.cli import sample_data_path

AS_OF = "2025-12-31T00:00:00Z"
REQUEST = {"user_id": "u-maya", "key_phrases": ["Project Phoenix timeline", "team bandwidth"], "as_of": AS_OF}
PORT_OF = {"weaviate": "vectors", "neo4j": "graph", "postgres": "records"}


class Load:
    """Retrieving clients and one writer, recording every answer (start, end, status, degraded)."""

    def __init__(self, server: Server, clients: int, write_every_s: float) -> None:
        self.server, self.clients, self.write_every_s = server, clients, write_every_s
        self.answers: list[tuple[float, float, int, bool, bytes]] = []
        self.writes: list[tuple[float, str, int, float]] = []  # (start, id, status, seconds)
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._retrieve, daemon=True) for _ in range(clients)]
        self.threads.append(threading.Thread(target=self._write, daemon=True))

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)

    def _retrieve(self) -> None:
        with httpx.Client(base_url=self.server.base_url, headers=self.server.headers, timeout=60) as c:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    r = c.post("/v1/retrieve", json=REQUEST)
                    degraded = r.status_code == 200 and r.json()["retrieval_metadata"]["degraded"]
                    self.answers.append((started, time.monotonic(), r.status_code, degraded, r.content))
                except httpx.TransportError:
                    self.answers.append((started, time.monotonic(), -1, False, b""))

    def _write(self) -> None:
        with httpx.Client(base_url=self.server.base_url, headers=self.server.headers, timeout=60) as c:
            while not self.stop.wait(self.write_every_s):
                ident = f"drill-{uuid.uuid4().hex[:12]}"
                record = {
                    "kind": "memory_unit",
                    "user_id": "u-drill",
                    "muid": ident,
                    "content": f"drill write {ident}",
                    "creation_ts": "2025-06-01T09:00:00Z",
                }
                started = time.monotonic()
                try:
                    status = c.post("/v1/ingest", json={"records": [record]}).status_code
                except httpx.TransportError:
                    status = -1
                self.writes.append((started, ident, status, time.monotonic() - started))


def readyz_watch(server: Server, port: str, stop: threading.Event, out: list[tuple[float, float, str]]) -> None:
    with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=10) as c:
        while not stop.is_set():
            started = time.monotonic()
            try:
                state = c.get("/readyz").json().get("stores", {}).get(port, "?")
            except (httpx.HTTPError, ValueError):
                state = "error"
            out.append((started, time.monotonic(), state))
            stop.wait(0.1)


def doctor_clean(env: dict[str, str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = subprocess.run(
            [sys.executable, "-m", "hrt.cli", "doctor", "--user", "u-drill"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            return True
        time.sleep(2)
    return False


def drill_one(
    store: str,
    directory: Path,
    server: Server,
    env: dict[str, str],
    args: argparse.Namespace,
    cluster: devcluster.WeaviateCluster | None = None,
) -> dict[str, Any]:
    with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=60) as c:
        before = c.post("/v1/retrieve", json=REQUEST).content
    watch: list[tuple[float, float, str]] = []
    watching = threading.Event()
    watcher = threading.Thread(
        target=readyz_watch, args=(server, PORT_OF[store.split("-")[0]], watching, watch), daemon=True
    )
    with Load(server, args.clients, args.write_every_s) as load:
        time.sleep(2.0)
        watcher.start()
        stopped_at = time.monotonic()
        if cluster is not None:  # one node of the replicated Weaviate ("weaviate-node2")
            node = cluster.node_index(store.removeprefix("weaviate-"))
            cluster.stop_node(node, kill=args.kill_node)
            time.sleep(args.outage_s)
            up_started = time.monotonic()
            cluster.start_node(node)  # on its old ports and data, as `hrt dev up` starts a store
        else:
            stop(store, devstack.status(directory)["services"][store]["pid"], args.postgres_crash)
            time.sleep(args.outage_s)
            up_started = time.monotonic()
            devstack.up(directory, (store,))  # what `hrt dev up` runs
        up_done = time.monotonic()
        full_at = wait_full_service(server, before, timeout=120)
        time.sleep(1.0)
    watching.set()
    watcher.join()
    out = summarise(store, load, watch, before, server, env, (stopped_at, up_started, up_done, full_at))
    if cluster is not None:
        out["replication_factor"] = cluster.replication_factor(env["HRT_WEAVIATE_COLLECTION"])
    return out


def stop(store: str, pid: int, crash: bool) -> None:
    """As an operator stops it: PostgreSQL with ``pg_ctl stop``'s fast shutdown (SIGINT: sessions
    end, a checkpoint, exit), the others with SIGTERM (SIGKILL after 5 s); ``crash``: PostgreSQL
    killed (SIGKILL), which loses nothing acknowledged only when it runs durable
    (``HRT_DEV_POSTGRES_DURABLE=1``, which ``--postgres-crash`` sets for the drill's stack)."""
    if store == "postgres" and crash:
        devstack.stop_pid(pid, grace=0.0, first=None)
    elif store == "postgres":
        devstack.stop_postgres(pid, grace=10)
    else:
        devstack.stop_pid(pid, grace=5)


def acknowledged_missing(server: Server, writes: list[tuple[float, str, int, float]]) -> list[str]:
    """The acknowledged (200) writes that the store does not hold."""
    with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=60) as c:
        return [
            ident
            for _, ident, status, _ in writes
            if status == 200 and c.get(f"/v1/users/u-drill/entities/memory_unit/{ident}").status_code != 200
        ]


def wait_full_service(server: Server, before: bytes, timeout: float) -> float | None:
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=30) as c:
        while time.monotonic() < deadline:
            try:
                if c.get("/readyz").status_code == 200:
                    r = c.post("/v1/retrieve", json=REQUEST)
                    if r.status_code == 200 and not r.json()["retrieval_metadata"]["degraded"]:
                        return time.monotonic()
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    return None


def summarise(
    store: str,
    load: Load,
    watch: list[tuple[float, float, str]],
    before: bytes,
    server: Server,
    env: dict[str, str],
    marks: tuple[float, float, float, float | None],
) -> dict[str, Any]:
    stopped_at, up_started, up_done, full_at = marks
    failover = [
        end for start, end, status, degraded, _ in load.answers if start >= stopped_at and (status != 200 or degraded)
    ]
    known = [end for start, end, state in watch if state == "unavailable"]
    known_at = min(known) if known else None
    during = [
        (end - start) * 1000
        for start, end, _, _, _ in load.answers
        if known_at is not None and known_at <= start < up_started
    ]
    statuses = sorted(
        {(status, degraded) for start, _, status, degraded, _ in load.answers if stopped_at <= start < up_started}
    )
    outage_writes = [w for w in load.writes if stopped_at <= w[0] < up_started]
    whole = [body for start, _, status, degraded, body in load.answers if status == 200 and not degraded]
    with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=60) as c:
        after = c.post("/v1/retrieve", json=REQUEST).content
    return {
        "store": store,
        "first_failover_ms": round((min(failover) - stopped_at) * 1000, 1) if failover else None,
        "known_down_ms": round((known_at - stopped_at) * 1000, 1) if known_at else None,
        "answer_ms_known_down": {
            "n": len(during),
            "p50": round(statistics.median(during), 1) if during else None,
            "max": round(max(during), 1) if during else None,
        },
        "answers_during_outage": [f"{s}{' degraded' if d else ''}" for s, d in statuses],
        "answer_ms_before_stop_p50": _p50(
            [(end - start) * 1000 for start, end, _, _, _ in load.answers if start < stopped_at]
        ),
        # whole (200, not degraded) answers of the round that are not the bytes of before the stop
        "whole_answers_differing": sum(1 for body in whole if body != before),
        "whole_answers": len(whole),
        "readyz_ms_max": round(max(((e - s) * 1000 for s, e, _ in watch), default=0.0), 1),
        "readyz_slowest": _slowest(watch, stopped_at, up_started, up_done),
        "writes": {
            "during_outage": len(outage_writes),
            "accepted": sum(1 for w in outage_writes if w[2] == 200),
            "accepted_ms_max": round(max((w[3] * 1000 for w in outage_writes if w[2] == 200), default=0.0), 1),
            "refused_503": sum(1 for w in outage_writes if w[2] == 503),
            "refused_ms_max": round(max((w[3] * 1000 for w in outage_writes if w[2] == 503), default=0.0), 1),
            "acknowledged": sum(1 for w in load.writes if w[2] == 200),
            "acknowledged_missing": acknowledged_missing(server, load.writes),
            "all_delivered": doctor_clean(env, 120),
        },
        "dev_up_s": round(up_done - up_started, 1),
        "full_service_s": round(full_at - up_done, 2) if full_at else None,
        "same_answer_after": after == before,
        "server_restarted": server.proc.poll() is not None,
    }


def _slowest(
    watch: list[tuple[float, float, str]], stopped_at: float, up_started: float, up_done: float
) -> dict[str, Any] | None:
    """When the slowest ``/readyz`` was sent (seconds after the stop), in which phase (``outage``,
    ``starting``: while ``hrt dev up`` ran, ``back``), and what it said of the store."""
    if not watch:
        return None
    start, end, state = max(watch, key=lambda w: w[1] - w[0])
    phase = "outage" if start < up_started else "starting" if start < up_done else "back"
    return {"ms": round((end - start) * 1000, 1), "at_s": round(start - stopped_at, 2), "phase": phase, "said": state}


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stores", default="weaviate,neo4j,postgres")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--outage-s", type=float, default=10.0)
    p.add_argument("--write-every-s", type=float, default=0.5)
    p.add_argument("--dir", default=None, help="the drill's own stack folder (default: a temporary one)")
    p.add_argument("--out", default=None, help="the JSON report (default: fault-drill.json in the drill's folder)")
    p.add_argument(
        "--postgres-crash",
        action="store_true",
        help="kill PostgreSQL (SIGKILL), not its fast shutdown, on a stack run durable (HRT_DEV_POSTGRES_DURABLE=1)",
    )
    p.add_argument("--kill-node", action="store_true", help="a Weaviate node is killed (SIGKILL), not stopped")
    p.add_argument(
        "--weaviate-nodes",
        type=int,
        default=1,
        help="run Weaviate as a cluster of this many nodes behind a balancer, with replication factor as many "
        "(hrt/devcluster.py); --stores then names nodes: weaviate-node1, ..., weaviate-leader, weaviate-follower",
    )
    args = p.parse_args()
    directory = Path(args.dir or tempfile.mkdtemp(prefix="hrt-drill-"))
    if args.postgres_crash:
        os.environ["HRT_DEV_POSTGRES_DURABLE"] = "1"  # what a deployment runs: a crash keeps every commit
    results = []
    replicated = args.weaviate_nodes > 1
    with contextlib.ExitStack() as stacks:
        services = ("postgres", "neo4j") if replicated else devstack.SERVICES
        stack = stacks.enter_context(devstack.running(directory, services))
        env = {**stack.env(), "HRT_WEAVIATE_COLLECTION": "HRTDrill", "HRT_DB_PATH": str(directory / "unused.db")}
        cluster = None
        if replicated:
            cluster = stacks.enter_context(devcluster.running(directory, stack._creds, args.weaviate_nodes))
            env.update(cluster.env())
        subprocess.run(
            [sys.executable, "-m", "hrt.cli", "migrate"], env={**os.environ, **env}, check=True, capture_output=True
        )
        subprocess.run(
            [sys.executable, "-m", "hrt.cli", "ingest", str(sample_data_path())],
            env={**os.environ, **env},
            check=True,
            capture_output=True,
        )
        server = Server(env, directory / "server.log", None)
        try:
            for store in args.stores.split(","):
                results.append(drill_one(store, directory, server, env, args, cluster))
                print(json.dumps(results[-1]), flush=True)
        finally:
            server.stop()
        log = (directory / "server.log").read_text(errors="replace")
    out = {"results": results, "server_log": {"tracebacks": log.count("Traceback"), "lines": log.count("\n")}}
    report = Path(args.out) if args.out else directory / "fault-drill.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(out, indent=2) + "\n")
    print(f"report: {report}; server log: {out['server_log']}")
    print(table(results))
    return 0


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| store | first 503/degraded after stop (ms) | known down after (ms) | answers once known down p50 / max (ms) "
        "| /readyz max (ms) | writes accepted / refused 503 (max ms) / sent during outage | acknowledged kept, "
        "all delivered | full service after `hrt dev up` (s) | same answer after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        a, w = r["answer_ms_known_down"], r["writes"]
        rows.append(
            f"| {r['store']} | {r['first_failover_ms']} | {r['known_down_ms']} | {a['p50']} / {a['max']} "
            f"| {r['readyz_ms_max']} | {w['accepted']} / {w['refused_503']} ({w['refused_ms_max']}) "
            f"/ {w['during_outage']} "
            f"| {w['acknowledged'] - len(w['acknowledged_missing'])} of {w['acknowledged']}, {w['all_delivered']} "
            f"| {r['full_service_s']} | {r['same_answer_after']} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
