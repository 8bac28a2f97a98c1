"""A replicated Weaviate for drills and tests: ``nodes`` Weaviate servers on loopback from the dev
stack's binary, one cluster (memberlist gossip, Raft for the schema), behind a TCP balancer that
HRT connects to as it would to a load balancer in front of a production cluster.

Tooling (the fault drill, the integration tests), outside the server's import graph, like
:mod:`hrt.devstack`. A node is stopped and started again on its old ports and data
(:meth:`WeaviateCluster.stop_node`, :meth:`WeaviateCluster.start_node`); the balancer sends each
new connection to the next node that accepts it, so a connection that the stopped node broke is
made again to a live one. Collections get their replication factor from HRT
(``HRT_WEAVIATE_REPLICATION_FACTOR``), not from the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from hrt.devstack import (
    WEAVIATE_MEMORY,
    Credentials,
    DevStackError,
    _spawn,
    _weaviate_env,
    _weaviate_ready,
    ensure_weaviate,
    free_port,
    free_port_block,
    stop_pid,
    wait_until,
)

log = logging.getLogger(__name__)

_CONNECT_TIMEOUT_S = 0.5
_CHUNK = 65536


class TcpBalancer:
    """A layer-4 balancer on 127.0.0.1: each accepted connection is piped to the next backend
    (round robin) that accepts a connection within half a second, skipping the ones that refuse;
    no backend left: the connection is closed. Runs its own event loop in a thread."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.port = free_port()
        self._next = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"balancer-{self.port}", daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def start(self) -> TcpBalancer:
        self._thread.start()
        if not self._ready.wait(10):
            raise DevStackError("the balancer did not start")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._pipe, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for _ in range(len(self.backends)):
            port = self.backends[self._next % len(self.backends)]
            self._next += 1
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), _CONNECT_TIMEOUT_S)
        return None

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = await self._connect()
        if backend is None:
            writer.close()
            return
        b_reader, b_writer = backend

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(_CHUNK):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(OSError, RuntimeError):
                dst.close()

        await asyncio.gather(copy(reader, b_writer), copy(b_reader, writer))


@dataclass
class Node:
    name: str
    http: int
    grpc: int
    gossip: int
    home: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0


@dataclass
class WeaviateCluster:
    """``nodes`` Weaviate servers in one cluster under ``root``/weaviate-cluster, and two balancers
    (HTTP and gRPC) in front of them. :meth:`start`, then use ``http_port`` / ``grpc_port``."""

    root: Path
    credentials: Credentials
    nodes: int = 3
    memory: str = WEAVIATE_MEMORY
    raft_timeouts_multiplier: int = 1
    members: list[Node] = field(default_factory=list)
    balancers: list[TcpBalancer] = field(default_factory=list)

    @property
    def http_port(self) -> int:
        return self.balancers[0].port

    @property
    def grpc_port(self) -> int:
        return self.balancers[1].port

    def env(self, replication_factor: int | None = None) -> dict[str, str]:
        """What ``hrt serve`` needs to use the cluster (through the balancers)."""
        return {
            "HRT_VECTOR_INDEX": "weaviate",
            "HRT_WEAVIATE_HOST": "127.0.0.1",
            "HRT_WEAVIATE_HTTP_PORT": str(self.http_port),
            "HRT_WEAVIATE_GRPC_PORT": str(self.grpc_port),
            "HRT_WEAVIATE_API_KEY": self.credentials.weaviate_api_key,
            "HRT_WEAVIATE_REPLICATION_FACTOR": str(replication_factor or self.nodes),
        }

    def start(self, timeout: float = 180.0) -> WeaviateCluster:
        """Start every node at once (a cluster of ``nodes`` waits for all of them to elect its
        first Raft leader), wait until each is ready and sees the others, then the balancers."""
        binary = ensure_weaviate()
        base = self.root / "weaviate-cluster"
        for i in range(self.nodes):
            home = base / f"node{i + 1}"
            (home / "data").mkdir(parents=True, exist_ok=True)
            home.chmod(0o700)
            self.members.append(Node(f"node{i + 1}", free_port(), free_port(), free_port_block(4), home))
        for node in self.members:
            self._spawn(binary, node)
        for node in self.members:
            self.wait_ready(node, timeout)
        self.wait_healthy(timeout)
        self.balancers = [
            TcpBalancer([n.http for n in self.members]).start(),
            TcpBalancer([n.grpc for n in self.members]).start(),
        ]
        return self

    def _spawn(self, binary: Path, node: Node) -> None:
        peers = {n.name: n.gossip for n in self.members}
        env = _weaviate_env(
            node.home / "data",
            self.credentials.weaviate_api_key,
            self.memory,
            grpc=node.grpc,
            gossip=node.gossip,
            node=node.name,
            peers=peers,
        )
        # Raft's timeouts at 1x, not Weaviate's default 5x: on loopback a lost schema leader is
        # replaced within ~2 s, not ~10 s (the data path needs no leader; readiness and schema do)
        env["RAFT_TIMEOUTS_MULTIPLIER"] = str(self.raft_timeouts_multiplier)
        cmd = [str(binary), "--host", "127.0.0.1", "--port", str(node.http), "--scheme", "http"]
        node.proc = _spawn(cmd, node.home / "weaviate.log", env=env, cwd=node.home)

    def wait_ready(self, node: Node, timeout: float) -> None:
        wait_until(
            _weaviate_ready(node.http, node.grpc, self.credentials.weaviate_api_key),
            f"Weaviate {node.name}",
            timeout,
            node.proc,
            node.home / "weaviate.log",
        )

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Until every node reports every other as HEALTHY."""
        deadline = time.monotonic() + timeout
        headers = {"Authorization": f"Bearer {self.credentials.weaviate_api_key}"}
        while time.monotonic() < deadline:
            try:
                views = [
                    httpx.get(f"http://127.0.0.1:{n.http}/v1/nodes", headers=headers, timeout=2).json()
                    for n in self.members
                ]
                if all(
                    sorted(m["name"] for m in v["nodes"] if m["status"] == "HEALTHY")
                    == sorted(n.name for n in self.members)
                    for v in views
                ):
                    return
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            time.sleep(0.5)
        raise DevStackError(f"the Weaviate cluster was not healthy within {timeout:.0f}s")

    def replication_factor(self, collection: str) -> int:
        """The copies ``collection`` keeps, as the cluster's schema says."""
        r = httpx.get(
            f"http://127.0.0.1:{self.http_port}/v1/schema/{collection}",
            headers={"Authorization": f"Bearer {self.credentials.weaviate_api_key}"},
            timeout=10,
        )
        r.raise_for_status()
        return int(r.json()["replicationConfig"]["factor"])

    def node_index(self, which: str) -> int:
        """The index of ``which``: ``nodeN``, ``leader`` (the schema's Raft leader now, as the
        cluster's statistics say) or ``follower`` (the first node that is not)."""
        if which not in ("leader", "follower"):
            return [n.name for n in self.members].index(which)
        r = httpx.get(
            f"http://127.0.0.1:{self.http_port}/v1/cluster/statistics",
            headers={"Authorization": f"Bearer {self.credentials.weaviate_api_key}"},
            timeout=10,
        )
        r.raise_for_status()
        leader = {s["leaderId"] for s in r.json()["statistics"]}
        if len(leader) != 1:
            raise DevStackError(f"the nodes do not agree on a leader: {sorted(leader)}")
        names = [n.name for n in self.members]
        return (
            names.index(leader.pop()) if which == "leader" else next(i for i, n in enumerate(names) if n not in leader)
        )

    def stop_node(self, index: int, *, kill: bool = False) -> None:
        """Stop one node as an operator does (SIGTERM; ``kill``: SIGKILL); its data stays."""
        node = self.members[index]
        stop_pid(node.pid, grace=0.0 if kill else 10.0, first=None if kill else signal.SIGTERM)

    def start_node(self, index: int, timeout: float = 120.0) -> None:
        """Start a stopped node again on its old ports and data; it rejoins the cluster."""
        node = self.members[index]
        self._spawn(ensure_weaviate(), node)
        self.wait_ready(node, timeout)
        self.wait_healthy(timeout)

    def stop(self) -> None:
        for balancer in self.balancers:
            balancer.stop()
        for node in self.members:
            if node.pid:
                stop_pid(node.pid, grace=10)


@contextlib.contextmanager
def running(root: Path, credentials: Credentials, nodes: int = 3) -> Iterator[WeaviateCluster]:
    """A started cluster for the duration of a block; every node it started stopped after, also
    when the start failed half way."""
    cluster = WeaviateCluster(root, credentials, nodes)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
