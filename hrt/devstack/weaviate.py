"""The dev stack's Weaviate: the binary on loopback with API-key authentication, its environment
and its readiness."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from hrt.devstack.common import (
    WEAVIATE_MEMORY,
    WEAVIATE_USER,
    _spawn,
    free_port,
    free_port_block,
    port_open,
    wait_until,
)
from hrt.devstack.install import ensure_weaviate
from hrt.devstack.stack import Credentials, ServiceInfo


def start_weaviate(
    root: Path,
    credentials: Credentials,
    timeout: float = 120.0,
    memory: str = WEAVIATE_MEMORY,
    ports: Mapping[str, int] | None = None,
) -> ServiceInfo:
    binary = ensure_weaviate()
    home = root / "weaviate"
    data = home / "data"
    data.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)  # its files are the vectors and texts: other local users must not read past the key
    http, grpc = (ports["http"], ports["grpc"]) if ports else (free_port(), free_port())
    gossip = ports["gossip"] if ports else free_port_block(4)
    raft = gossip + 2
    env = _weaviate_env(data, credentials.weaviate_api_key, memory, grpc=grpc, gossip=gossip)
    logfile = home / "weaviate.log"
    started = time.monotonic()
    proc = _spawn(
        [
            str(binary),
            "--host",
            "127.0.0.1",
            "--port",
            str(http),
            "--scheme",
            "http",
            "--read-timeout=600s",
            "--write-timeout=600s",
        ],
        logfile,
        env=env,
        cwd=home,
    )
    wait_until(_weaviate_ready(http, grpc, credentials.weaviate_api_key), "Weaviate", timeout, proc, logfile)
    return ServiceInfo(
        "weaviate",
        proc.pid,
        {"http": http, "grpc": grpc, "gossip": gossip, "raft": raft},
        str(data),
        str(logfile),
        round(time.monotonic() - started, 2),
    )


def _weaviate_env(
    data: Path,
    api_key: str,
    memory: str,
    *,
    grpc: int,
    gossip: int,
    node: str = "node1",
    peers: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """Weaviate's whole environment: a node on loopback whose cluster ports follow ``gossip``
    (data +1, raft +2, raft RPC +3). ``peers`` (node name -> gossip port, this node included)
    makes it one node of a cluster (:mod:`hrt.devcluster`); without, a cluster of one."""
    data_port, raft, raft_rpc = gossip + 1, gossip + 2, gossip + 3
    peers = dict(peers or {node: gossip})
    first = min(peers.values())
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PERSISTENCE_DATA_PATH": str(data),
        # one API key, one user; without an authorization module an authenticated user may do
        # everything, an anonymous request nothing (401)
        "AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED": "false",
        "AUTHENTICATION_APIKEY_ENABLED": "true",
        "AUTHENTICATION_APIKEY_ALLOWED_KEYS": api_key,
        "AUTHENTICATION_APIKEY_USERS": WEAVIATE_USER,
        "DEFAULT_VECTORIZER_MODULE": "none",
        "CLUSTER_HOSTNAME": node,
        "CLUSTER_IN_LOCALHOST": "true",
        "CLUSTER_BIND_ADDR": "127.0.0.1",
        "CLUSTER_ADVERTISE_ADDR": "127.0.0.1",
        "CLUSTER_GOSSIP_BIND_PORT": str(gossip),
        "CLUSTER_DATA_BIND_PORT": str(data_port),
        "RAFT_PORT": str(raft),
        "RAFT_INTERNAL_RPC_PORT": str(raft_rpc),
        "RAFT_BOOTSTRAP_EXPECT": str(len(peers)),
        "RAFT_JOIN": ",".join(f"{name}:{port + 2}" for name, port in sorted(peers.items())),
        **({"CLUSTER_JOIN": f"127.0.0.1:{first}"} if len(peers) > 1 else {}),
        "GRPC_PORT": str(grpc),
        "GO_PROFILING_DISABLE": "true",
        "DISABLE_TELEMETRY": "true",
        "QUERY_DEFAULTS_LIMIT": "25",
        "GOMEMLIMIT": memory,
        "GOMAXPROCS": "2",
        "LOG_LEVEL": "warning",
        "DISK_USE_READONLY_PERCENTAGE": "100",
        "DISK_USE_WARNING_PERCENTAGE": "100",
    }


def _weaviate_ready(http: int, grpc: int, api_key: str) -> Callable[[], bool]:
    """The readiness check of :func:`wait_until`: ready, the schema readable with the key, gRPC open."""

    def ready() -> bool:
        import httpx

        r = httpx.get(f"http://127.0.0.1:{http}/v1/.well-known/ready", timeout=2)  # open to anyone
        schema = httpx.get(
            f"http://127.0.0.1:{http}/v1/schema",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=2,
        )
        return r.status_code == 200 and schema.status_code == 200 and port_open(grpc)

    return ready
