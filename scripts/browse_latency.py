"""Measure what docs/bench.md reports under "Browsing": a page of ``GET /v1/users/{user_id}/entities``
and a read of one entity (``GET .../entities/{kind}/{id}``) at the record store, on a store built by
``hrt bench`` (the embedded file, copied first: the original is never touched), or on PostgreSQL.

    hrt bench --sizes 100k --deployments embedded --fake-vectors --keep --out DIR
    python scripts/browse_latency.py --db DIR/work/embedded-100k.db [--rounds 200] [--out FILE]
    python scripts/browse_latency.py --postgres-dsn DSN --user bench-100k [--rounds 200]
    python scripts/browse_latency.py --postgres-dsn DSN --user bench-100k --load-from DIR/work/embedded-100k.db

Each case runs ``rounds`` times after one warm-up, through ``hrt.browse`` (the store read and the
answer's models, what the route does but HTTP); ``walk`` pages through every entity at limit 500.
A measurement, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hrt.browse import BrowseRequest, browse_entities, read_entity  # noqa: E402
from hrt.records import Kind  # noqa: E402
from hrt.stores.base import RecordStore  # noqa: E402

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(rounds: int, call: Callable[[], Awaitable[Any]]) -> dict[str, float]:
    await call()  # warm-up
    ms = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await call()
        ms.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": round(statistics.median(ms), 2), "p95_ms": round(pct(ms, 0.95), 2), "n": rounds}


async def measure(records: RecordStore, user: str, rounds: int) -> dict[str, Any]:
    ids = sorted((await records.ids(user)).items())
    middle = ids[len(ids) // 2][0]
    counts = await records.counts(user)
    sample = (await records.browse(user, BrowseRequest(limit=500, kind=Kind.MEMORY_UNIT).filter(NOW)))[0].entity
    tag = next(iter(getattr(sample, "tags", []) or ["none"]))
    agent = getattr(sample, "source_agent_id", None) or "none"
    title = getattr(sample, "title", "") or "a"
    # the most connected of the first 300 concepts (Zipf: the bench's hubs have low numbers)
    degree = {}
    for ident in [i for i, k in ids if k == "concept"][:300]:
        detail = await records.entity_detail(user, Kind.CONCEPT, ident, 1)
        degree[ident] = detail.relation_count if detail is not None else 0
    hub = max(sorted(degree), key=lambda i: degree[i])

    def page(**kwargs: Any) -> Callable[[], Awaitable[Any]]:
        request = BrowseRequest(**kwargs)
        return lambda: browse_entities(records, user, request, NOW)

    cursor = BrowseRequest().cursor_after(middle)
    cases: dict[str, Callable[[], Awaitable[Any]]] = {
        "first page (50, current only)": page(),
        "page from the middle (cursor)": page(cursor=cursor),
        "kind=concept": page(kind=Kind.CONCEPT),
        "include_invalidated, limit 500": page(include_invalidated=True, limit=500),
        f"tags={tag}": page(tags=(tag,)),
        f"agent={agent}": page(agents=(agent,)),
        "created in one month": page(created_after="2023-06-01T00:00:00Z", created_before="2023-07-01T00:00:00Z"),
        "valid_at": page(valid_at="2024-01-01T00:00:00Z"),
        f"prefix={title[:4]!r}": page(prefix=title[:4]),
        f"prefix={title[:12]!r} (rare)": page(prefix=title[:12]),
        "prefix matching nothing": page(prefix="zzzz-nothing"),
        "read one memory unit": lambda: read_entity(records, user, Kind.MEMORY_UNIT, sample.id),
        f"read one concept ({hub}, {degree[hub]} relations)": lambda: read_entity(records, user, Kind.CONCEPT, hub),
    }
    out: dict[str, Any] = {"user": user, "entities": len(ids), "counts": counts, "cases": {}}
    for name, call in cases.items():
        out["cases"][name] = await timed(rounds, call)
        print(f"{name:45s} {out['cases'][name]}", flush=True)

    async def walk() -> int:
        request, seen = BrowseRequest(include_invalidated=True, limit=500), 0
        while True:
            got = await browse_entities(records, user, request, NOW)
            seen += len(got.entities)
            if got.next_cursor is None:
                return seen
            request = BrowseRequest(include_invalidated=True, limit=500, cursor=got.next_cursor)

    t0 = time.perf_counter()
    seen = await walk()
    out["walk_all_limit_500"] = {"seconds": round(time.perf_counter() - t0, 2), "entities": seen}
    print("walk", out["walk_all_limit_500"], flush=True)
    return out


async def load_from_embedded(store: Any, db: str, user: str, chunk: int = 2000) -> dict[str, Any]:
    """Copy one user of an embedded file (records, their vectors, relations) into the PostgreSQL
    record store, as ingest batches with the file's own vectors (no embedding): a services store of
    the same data for browsing, which reads the record store only."""
    import sqlite3

    import numpy as np

    from hrt.records import ENTITY_MODELS, Relation
    from hrt.stores.base import WriteBatch

    t0 = time.perf_counter()
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    ids = [r[0] for r in src.execute("SELECT id FROM entities WHERE user_id = ? ORDER BY id", (user,))]
    for i in range(0, len(ids), chunk):
        part = ids[i : i + chunk]
        marks = ",".join("?" * len(part))
        batch = WriteBatch()
        rows = src.execute(
            f"SELECT e.id, e.kind, e.data, d.vec FROM entities e JOIN docs d ON d.user_id = e.user_id AND d.id = e.id "
            f"WHERE e.user_id = ? AND e.id IN ({marks})",
            (user, *part),
        ).fetchall()
        for ident, kind, data, vec in rows:
            batch.entities.append(ENTITY_MODELS[Kind(kind)].model_validate_json(data))
            batch.vectors[(user, ident)] = np.frombuffer(vec, dtype=np.float32)
        await store.apply(batch)
    edges = src.execute(
        "SELECT source, target, type, weight, relation_type FROM edges WHERE user_id = ? ORDER BY source, target, type",
        (user,),
    ).fetchall()
    for i in range(0, len(edges), chunk * 5):
        batch = WriteBatch()
        for source, target, kind, weight, relation_type in edges[i : i + chunk * 5]:
            if kind == "SUPERSEDES":
                continue  # written by the entities' supersedes
            batch.relations.append(
                Relation(
                    user_id=user, type=kind, source=source, target=target, weight=weight, relation_type=relation_type
                )
            )
        await store.apply(batch)
    src.close()
    return {"entities": len(ids), "relations": len(edges), "load_seconds": round(time.perf_counter() - t0, 1)}


async def on_postgres(dsn: str, user: str, rounds: int, load: str | None = None) -> dict[str, Any]:
    from hrt.stores.postgres.records import PostgresRecordStore

    store = PostgresRecordStore(dsn)
    await store.open()
    try:
        loaded = await load_from_embedded(store, load, user) if load else {}
        return {**loaded, **await measure(store, user, rounds)}
    finally:
        await store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", help="an embedded store built by hrt bench (copied, never modified)")
    ap.add_argument("--postgres-dsn")
    ap.add_argument("--load-from", help="with --postgres-dsn: first copy --user of this embedded file into it")
    ap.add_argument("--user", help="the user to browse (default: the store's largest)")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--out")
    args = ap.parse_args()
    result: dict[str, Any] = {"machine": f"{platform.machine()} {platform.python_version()}"}
    if args.postgres_dsn:
        result["deployment"] = "postgres"
        result.update(asyncio.run(on_postgres(args.postgres_dsn, args.user, args.rounds, args.load_from)))
    else:
        from hrt.stores.embedded.store import EmbeddedStore

        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "browse.db"
            shutil.copyfile(args.db, copy)
            copy.chmod(0o600)
            t0 = time.perf_counter()
            store = EmbeddedStore(copy, dim=None)
            result["migrated_on_open"] = store.applied_on_open
            result["migrate_seconds"] = round(time.perf_counter() - t0, 2)
            user = args.user or store.largest_users(1)[0]
            result["deployment"] = "embedded"
            result.update(asyncio.run(measure(store.records, user, args.rounds)))
            store.close()
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
