"""A write updates the loaded caches in place of a rebuild (docs/reliability.md, "The write
path"): after any interleaving of writes, deletes and reads, every retrieval answers byte for
byte what caches built afresh from the same file answer, compactions included."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hrt.config import Settings
from hrt.contract import RetrieveRequest
from hrt.errors import HRTError
from hrt.ingest import parse_jsonl
from hrt.service import HRTService
from hrt.stores.base import ExpansionCaps
from hrt.stores.embedded import graph as embedded_graph
from hrt.stores.embedded import vectors as embedded_vectors
from tests.helpers import HashingEmbedder, artifact, concept, jsonl, mu, rel

USER = "u1"
WORDS = ["river", "budget", "kernel", "garden", "quokka", "phoenix", "atlas", "oncall", "migration", "tea"]
MUS = [f"m{i}" for i in range(8)]
CONCEPTS = [f"c{i}" for i in range(4)]
ARTIFACTS = [f"a{i}" for i in range(2)]
NOW = datetime(2025, 8, 1, tzinfo=UTC)

text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)
day = st.integers(1, 28).map(lambda d: f"2025-06-{d:02d}T10:00:00Z")
weight = st.sampled_from([0.3, 0.5, 1.0])

write_mu = st.builds(
    lambda i, t, ts, tags, sup: [mu(USER, i, t, ts, tags=tags, **({"supersedes": [sup]} if sup and sup != i else {}))],
    st.sampled_from(MUS),
    text,
    day,
    st.lists(st.sampled_from(["work", "home"]), max_size=1),
    st.none() | st.sampled_from(MUS),
)
write_concept = st.builds(lambda i, t: [concept(USER, i, t, t)], st.sampled_from(CONCEPTS), text)
write_artifact = st.builds(lambda i, t, ts: [artifact(USER, i, t, ts)], st.sampled_from(ARTIFACTS), text, day)
write_rel = st.builds(
    lambda kind, m, c, a, w: [
        {
            "MENTIONS": rel(USER, "MENTIONS", m, c, weight=w),
            "DERIVED_FROM": rel(USER, "DERIVED_FROM", a, m, weight=w),
            "RELATED_TO": rel(USER, "RELATED_TO", c, CONCEPTS[(CONCEPTS.index(c) + 1) % len(CONCEPTS)], weight=w),
            "FOLLOWS": rel(USER, "FOLLOWS", m, MUS[(MUS.index(m) + 1) % len(MUS)], weight=w),
        }[kind]
    ],
    st.sampled_from(["MENTIONS", "DERIVED_FROM", "RELATED_TO", "FOLLOWS"]),
    st.sampled_from(MUS),
    st.sampled_from(CONCEPTS),
    st.sampled_from(ARTIFACTS),
    weight,
)
delete_entity = st.builds(
    lambda kind_id: [
        {
            "op": "delete",
            "kind": kind_id[0],
            "user_id": USER,
            ("muid" if kind_id[0] == "memory_unit" else "id"): kind_id[1],
        }
    ],
    st.sampled_from(
        [("memory_unit", m) for m in MUS] + [("concept", c) for c in CONCEPTS] + [("artifact", a) for a in ARTIFACTS]
    ),
)
delete_rel = st.builds(
    lambda m, c: [{"op": "delete", "kind": "relation", "user_id": USER, "type": "MENTIONS", "source": m, "target": c}],
    st.sampled_from(MUS),
    st.sampled_from(CONCEPTS),
)
read = st.builds(lambda phrases, tags: ("read", phrases, tags), st.lists(text, min_size=1, max_size=3), st.booleans())
operation = st.one_of(write_mu, write_concept, write_artifact, write_rel, write_rel, delete_entity, delete_rel, read)


def seed_graph() -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [concept(USER, c, WORDS[i], WORDS[i + 4]) for i, c in enumerate(CONCEPTS)]
    records += [
        mu(USER, m, f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]}", f"2025-05-{i + 1:02d}T10:00:00Z")
        for i, m in enumerate(MUS[:5])
    ]
    records += [rel(USER, "MENTIONS", MUS[i], CONCEPTS[i % 4]) for i in range(5)]
    records += [artifact(USER, ARTIFACTS[0], "budget summary river"), rel(USER, "DERIVED_FROM", ARTIFACTS[0], MUS[0])]
    return records


@contextlib.contextmanager
def compaction_after(rows: int) -> Iterator[None]:
    saved = embedded_vectors.COMPACT_ROWS, embedded_graph.COMPACT_NODES
    embedded_vectors.COMPACT_ROWS = embedded_graph.COMPACT_NODES = rows
    try:
        yield
    finally:
        embedded_vectors.COMPACT_ROWS, embedded_graph.COMPACT_NODES = saved


async def answer(svc: HRTService, phrases: list[str], tags: bool) -> str:
    request = RetrieveRequest(
        user_id=USER,
        key_phrases=phrases,
        max_depth=2,
        limits={"memory_units": 20, "concepts": 20, "artifacts": 20},
        as_of="2025-07-01T00:00:00Z",
        include_invalidated=tags,
        **({"filters": {"tags": ["work"]}} if tags else {}),
    )
    return (await svc.retrieve(request)).canonical_json()


async def answer_afresh(svc: HRTService, phrases: list[str], tags: bool) -> str:
    """The same request over caches built from the file now; the updated ones are put back."""
    store = svc.stores.in_process.file
    assert store is not None
    caches = [store.graph._cache, store.vectors._cache]
    kept = [c._items.get(USER) for c in caches]
    for c in caches:
        c.invalidate(USER)
    fresh = await answer(svc, phrases, tags)
    for c, entry in zip(caches, kept, strict=True):
        if entry is not None:
            c._items[USER] = entry
    return fresh


async def run(operations: list[Any], compact_rows: int) -> int:
    compared = 0
    with tempfile.TemporaryDirectory() as tmp, compaction_after(compact_rows):
        svc = HRTService(Settings(db_path=Path(tmp) / "hrt.db"), embedder=HashingEmbedder(), clock=lambda: NOW)
        try:
            await svc.ingest(parse_jsonl(jsonl(seed_graph())))
            await answer(svc, ["river"], False)  # loads the caches: every write below updates them
            store = svc.stores.in_process.file
            assert store is not None
            for op in operations:
                if isinstance(op, tuple):
                    _, phrases, tags = op
                    store.graph.wait_compacted()
                    store.vectors.wait_compacted()
                    updated = await answer(svc, phrases, tags)
                    assert updated == await answer_afresh(svc, phrases, tags)
                    compared += 1
                    continue
                with contextlib.suppress(HRTError):  # a relation to an entity deleted: refused whole
                    await svc.ingest(parse_jsonl(jsonl(op)))
            assert store.vectors._cache.peek(USER) is not None  # updated all along, never dropped
            updated = await answer(svc, WORDS[:3], False)
            assert updated == await answer_afresh(svc, WORDS[:3], False)
        finally:
            await svc.close()
    return compared


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=st.lists(operation, min_size=1, max_size=25), compact_rows=st.sampled_from([2, 5, 2_000]))
def test_updated_caches_answer_as_caches_built_afresh(operations, compact_rows):
    asyncio.run(run(operations, compact_rows))


def test_a_write_updates_the_loaded_caches_without_rebuilding_them(tmp_path):
    async def go() -> None:
        svc = HRTService(Settings(db_path=tmp_path / "hrt.db"), embedder=HashingEmbedder(), clock=lambda: NOW)
        try:
            await svc.ingest(parse_jsonl(jsonl(seed_graph())))
            await answer(svc, ["river"], False)
            store = svc.stores.in_process.file
            assert store is not None
            loads = {"n": 0}
            for cache in (store.graph._cache, store.vectors._cache):
                original = cache._load

                def counting(user_id: str, original: Any = original) -> Any:
                    loads["n"] += 1
                    return original(user_id)

                cache._load = counting  # type: ignore[method-assign]
            records = [mu(USER, "m-new", "a quokka in the phoenix garden"), rel(USER, "MENTIONS", "m-new", "c1")]
            await svc.ingest(parse_jsonl(jsonl(records)))
            found = await svc.retrieve(
                RetrieveRequest(
                    user_id=USER, key_phrases=["a quokka in the phoenix garden"], as_of="2025-12-31T00:00:00Z"
                )
            )
            assert loads["n"] == 0  # nothing was rebuilt
            ids = [m.muid for m in found.retrieved_memory_units]
            assert "m-new" in ids
            concepts = await store.graph.expand(USER, {"m-new": 1.0}, ExpansionCaps(1, 10, 100, 0.5))
            assert "c1" in {c.node.id for c in concepts}  # the new relation is walked at once
        finally:
            await svc.close()

    asyncio.run(go())
