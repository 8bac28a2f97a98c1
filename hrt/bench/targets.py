"""Where one (deployment, size) lives: its settings for ingest and the environment of its server."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Target:
    """Where one (deployment, size) lives: the settings overrides for ingest and the server's env."""

    deployment: str
    settings: dict[str, Any]
    env: dict[str, str]
    service_pids: dict[str, int] = field(default_factory=dict)


def embedded_target(work: Path, label: str, reuse: bool = False) -> Target:
    db = work / f"embedded-{label}.db"
    if not reuse:
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        shutil.rmtree(Path(str(db) + ".ann"), ignore_errors=True)
    stores = {"record_store": "embedded", "graph_store": "embedded", "vector_index": "embedded"}
    env = {f"HRT_{k.upper()}": v for k, v in stores.items()}
    return Target("embedded", {"db_path": str(db), **stores}, {"HRT_DB_PATH": str(db), **env})


def services_target(stack: Any, label: str, create: bool = True) -> Target:
    """The services deployment of one size: its own PostgreSQL database and Weaviate collection
    (made afresh with ``create``), the shared Neo4j (each size is its own user)."""
    import psycopg

    from hrt import devstack
    from hrt.config import Settings
    from hrt.stores.factory import migrate_records

    name = f"hrt_bench_{label}"
    dsn = stack.postgres_dsn_for(name)  # HRT connects as the hrt role (no superuser), which owns it
    if create:
        with psycopg.connect(stack.postgres_admin_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name} OWNER {devstack.HRT_POSTGRES_ROLE}")
        migrate_records(
            Settings(record_store="postgres", graph_store="neo4j", vector_index="weaviate", postgres_dsn=dsn)
        )
    collection = f"HRTBench{label.upper()}"
    settings = {
        "record_store": "postgres",
        "graph_store": "neo4j",
        "vector_index": "weaviate",
        "postgres_dsn": dsn,
        "neo4j_uri": stack.neo4j_uri,
        "neo4j_user": stack.neo4j_user,
        "neo4j_password": stack.neo4j_password,  # the dev stack runs every store with auth on
        "weaviate_host": "127.0.0.1",
        "weaviate_http_port": stack.weaviate_http_port,
        "weaviate_grpc_port": stack.weaviate_grpc_port,
        "weaviate_api_key": stack.weaviate_api_key,
        "weaviate_collection": collection,
    }
    env = {**stack.env(), "HRT_POSTGRES_DSN": dsn, "HRT_WEAVIATE_COLLECTION": collection}
    env.update({"HRT_RECORD_STORE": "postgres", "HRT_GRAPH_STORE": "neo4j", "HRT_VECTOR_INDEX": "weaviate"})
    pids = {n: s.pid for n, s in stack.services.items()}
    return Target("services", settings, env, pids)
