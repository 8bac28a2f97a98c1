"""PostgreSQL as the record store: migrations, concurrent writers, the outbox and the projector,
against a real PostgreSQL started by the fixtures."""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import subprocess
import sys
from datetime import UTC, datetime

import numpy as np
import psycopg
import pytest
from psycopg.types.json import Jsonb

from hrt.config import Settings
from hrt.contract import RetrieveRequest
from hrt.errors import InvalidInput, StoreError, StoreUnavailable
from hrt.ingest import build_batch, parse_jsonl
from hrt.projector import Projector
from hrt.records import Concept, EdgeType, Kind
from hrt.service import HRTService
from hrt.stores.base import GraphEdge, WriteBatch
from hrt.stores.embedded.store import EmbeddedStore
from hrt.stores.postgres.migrate import Migration, applied_versions, bundled_migrations, migrate
from hrt.stores.postgres.records import PostgresRecordStore
from tests.conftest import FIXED_NOW
from tests.helpers import HashingEmbedder, artifact, concept, jsonl, mu, outbox_rows, rel, small_graph

pytestmark = pytest.mark.integration


def test_migrations_from_empty_rerun_and_refusals(postgres_dsn):
    versions = [m.version for m in bundled_migrations()]
    assert versions == list(range(1, len(versions) + 1)) and len(versions) >= 2  # 0002: API keys
    assert migrate(postgres_dsn) == versions
    assert migrate(postgres_dsn) == []  # idempotent
    assert applied_versions(postgres_dsn) == versions
    with psycopg.connect(postgres_dsn) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    expected = {"hrt_entities", "hrt_relations", "hrt_preferences", "hrt_outbox", "hrt_api_keys"}
    assert expected | {"hrt_schema_migrations"} <= tables
    changed = [Migration(1, "records_and_outbox", bundled_migrations()[0].sql + "\n-- edited")]
    with pytest.raises(StoreError, match="changed after it was applied"):
        migrate(postgres_dsn, changed)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO hrt_schema_migrations (version, name, checksum) VALUES (%s, 'half', 'x')", (versions[-1] + 1,)
        )
    with pytest.raises(StoreError, match="not finished"):
        migrate(postgres_dsn)


def test_a_failing_migration_leaves_nothing_behind(postgres_dsn):
    applied = migrate(postgres_dsn)
    broken = Migration(applied[-1] + 1, "broken", "CREATE TABLE t_ok (x int); SELECT * FROM no_such_table;")
    with pytest.raises(psycopg.Error):
        migrate(postgres_dsn, [*bundled_migrations(), broken])
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute("SELECT to_regclass('t_ok')").fetchone() == (None,)
    assert applied_versions(postgres_dsn) == applied


def test_unreachable_postgres_is_store_unavailable():
    with pytest.raises(StoreUnavailable):
        migrate("host=127.0.0.1 port=1 user=postgres dbname=postgres connect_timeout=2")


# ------------------------------------------------------------------------------------------
# concurrent writers (separate OS processes)
# ------------------------------------------------------------------------------------------

IDS = [f"c{i:02d}" for i in range(12)]


def _writer(dsn: str, worker: int, rounds: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    async def main() -> list[tuple[str, int, str]]:
        store = PostgresRecordStore(dsn, max_size=1)
        await store.open()
        rng = random.Random(worker)
        log = []
        try:
            for r in range(rounds):
                batch = WriteBatch()
                for ident in rng.sample(IDS, 4):
                    name = f"w{worker}-r{r}-{ident}"
                    batch.entities.append(Concept(user_id="race", id=ident, name=name))
                    batch.vectors[("race", ident)] = np.ones(8, dtype=np.float32) / np.sqrt(8)
                result = await store.apply(batch)
                log += [(i, v, f"w{worker}-r{r}-{i}") for (_, i), v in result.versions.items()]
        finally:
            await store.close()
        return log

    out.put(asyncio.run(main()))


def test_concurrent_writers_end_with_the_last_write_per_id(postgres_dsn):
    migrate(postgres_dsn)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(postgres_dsn, w, 25, queue)) for w in range(4)]
    for p in procs:
        p.start()
    writes = [entry for _ in procs for entry in queue.get(timeout=120)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    with psycopg.connect(postgres_dsn) as conn:
        rows = {
            i: (v, d["name"])
            for i, v, d in conn.execute("SELECT id, version, data FROM hrt_entities WHERE user_id = 'race'")
        }
        events = conn.execute("SELECT key->>'id', version FROM hrt_outbox WHERE user_id = 'race'").fetchall()
    assert len(writes) == 4 * 25 * 4
    for ident in IDS:
        mine = sorted((v, name) for i, v, name in writes if i == ident)
        if not mine:
            assert ident not in rows
            continue
        versions = [v for v, _ in mine]
        assert versions == list(range(1, len(mine) + 1)), f"lost or duplicated writes on {ident}"
        assert rows[ident] == mine[-1], "the stored row is not the last committed write"
        assert sorted(v for i, v in events if i == ident) == versions  # one outbox event per write


async def test_a_batch_is_written_set_based_with_the_last_write_per_key_and_events_in_key_order(pg_records):
    """One batch, whatever its size, is a handful of statements: check that it keeps what a write
    per record gave (last write per key, relations to entities of the same batch, one event per
    key in key order, versions per write) and that a bad relation still fails the whole batch."""
    embedder = HashingEmbedder()
    first = parse_jsonl(
        jsonl(
            [
                mu("sb", "m2", "second"),
                concept("sb", "c1", "Alpha"),
                mu("sb", "m1", "first", tags=["x"]),
                rel("sb", "MENTIONS", "m2", "c1", weight=0.2),
                rel("sb", "MENTIONS", "m1", "c1", weight=0.5),
                rel("sb", "MENTIONS", "m2", "c1", weight=0.7),  # the same key again: this one wins
                {"kind": "preference", "user_id": "sb", "target_kind": "concept", "target": "c1", "weight": 0.1},
                {"kind": "preference", "user_id": "sb", "target_kind": "concept", "target": "c1", "weight": 0.8},
            ]
        )
    )
    result = await pg_records.apply(build_batch(first, embedder))
    assert result.versions == {("sb", "c1"): 1, ("sb", "m1"): 1, ("sb", "m2"): 1}
    assert result.upserted == 3 + 3 + 2  # every record applied counts, as one write per record did

    def state():
        with psycopg.connect(pg_records._dsn) as conn:
            relations = conn.execute(
                "SELECT source, target, weight, version FROM hrt_relations WHERE user_id = 'sb' ORDER BY source"
            ).fetchall()
            prefs = conn.execute("SELECT target, weight FROM hrt_preferences WHERE user_id = 'sb'").fetchall()
            events = conn.execute(
                "SELECT op, key, version, vector_done FROM hrt_outbox WHERE user_id = 'sb' ORDER BY seq"
            ).fetchall()
            stored = conn.execute("SELECT id, data FROM hrt_entities WHERE user_id = 'sb' AND id = 'm1'").fetchone()
        return relations, prefs, events, stored

    relations, prefs, events, stored = state()
    assert relations == [("m1", "c1", 0.5, 1), ("m2", "c1", 0.7, 1)]
    assert prefs == [("c1", 0.8)]
    assert stored[1]["tags"] == ["x"]
    assert events == [
        ("upsert_entity", {"id": "c1", "kind": "concept"}, 1, False),
        ("upsert_entity", {"id": "m1", "kind": "memory_unit"}, 1, False),
        ("upsert_entity", {"id": "m2", "kind": "memory_unit"}, 1, False),
        ("upsert_relation", {"source": "m1", "target": "c1", "type": "MENTIONS"}, 1, True),
        ("upsert_relation", {"source": "m2", "target": "c1", "type": "MENTIONS"}, 1, True),
    ]

    # written again: every key's version moves on by one, with one more event each
    again = parse_jsonl(jsonl([mu("sb", "m1", "first, edited"), rel("sb", "MENTIONS", "m1", "c1", weight=0.9)]))
    result = await pg_records.apply(build_batch(again, embedder))
    assert result.versions == {("sb", "m1"): 2}
    relations, _, events, stored = state()
    assert relations[0] == ("m1", "c1", 0.9, 2)
    assert stored[1]["content"] == "first, edited"
    assert events[-2:] == [
        ("upsert_entity", {"id": "m1", "kind": "memory_unit"}, 2, False),
        ("upsert_relation", {"source": "m1", "target": "c1", "type": "MENTIONS"}, 2, True),
    ]

    # a batch made by hand may repeat an entity (build_batch keeps the last): the last write wins here too
    m2 = parse_jsonl(jsonl([mu("sb", "m2", "second, draft")]))[0]
    m2_final = parse_jsonl(jsonl([mu("sb", "m2", "second, final")]))[0]
    by_hand = WriteBatch(entities=[m2, m2_final], vectors={("sb", "m2"): embedder.embed(["second"])[0]})
    result = await pg_records.apply(by_hand)
    assert result.versions == {("sb", "m2"): 2}
    assert (await pg_records.get_many("sb", Kind.MEMORY_UNIT, ["m2"]))["m2"].content == "second, final"
    events = state()[2]
    assert events[-1] == ("upsert_entity", {"id": "m2", "kind": "memory_unit"}, 2, False)

    # a relation to a missing entity, or between the wrong kinds, fails the batch: nothing of it stays
    for bad, field, message in (
        (rel("sb", "MENTIONS", "m3", "c-missing"), "target", "'c-missing' is not an entity of user 'sb'"),
        (rel("sb", "MENTIONS", "c1", "m3"), "source", "MENTIONS source must be memory_unit"),
    ):
        batch = build_batch(parse_jsonl(jsonl([mu("sb", "m3", "third"), bad])), embedder)
        with pytest.raises(InvalidInput) as info:
            await pg_records.apply(batch)
        assert info.value.field == field and message in info.value.message
        assert set(await pg_records.ids("sb")) == {"c1", "m1", "m2"}
        assert state()[2] == events


# ------------------------------------------------------------------------------------------
# outbox and projector
# ------------------------------------------------------------------------------------------


class FlakyGraph:
    """Wraps a real graph store; fails the first ``failures`` write calls as if it were down."""

    def __init__(self, inner, failures: int) -> None:
        self.inner = inner
        self.failures = failures
        self.calls = 0

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name not in ("upsert_nodes", "upsert_edges", "delete_nodes", "delete_edges", "delete_user"):
            return attr

        async def call(*args, **kwargs):
            self.calls += 1
            if self.failures > 0:
                self.failures -= 1
                raise StoreUnavailable("graph store down (injected)")
            return await attr(*args, **kwargs)

        return call


async def projected_state(store: EmbeddedStore, user: str) -> tuple[set[str], set[tuple[str, str, str]], set[str]]:
    nodes = {r[0] for r in store.db.execute("SELECT id FROM nodes WHERE user_id = ?", (user,))}
    edges = {tuple(r) for r in store.db.execute("SELECT source, target, type FROM edges WHERE user_id = ?", (user,))}
    docs = {r[0] for r in store.db.execute("SELECT id FROM docs WHERE user_id = ?", (user,))}
    return nodes, edges, docs


async def test_projector_delivers_everything_once_in_effect_after_a_target_outage(pg_records, tmp_path):
    embedder = HashingEmbedder()
    target = EmbeddedStore(tmp_path / "proj.db", embedder.dim)
    flaky = FlakyGraph(target.graph, failures=3)
    projector = Projector(pg_records, flaky, target.vectors)
    records = parse_jsonl(jsonl(small_graph("u1")))
    await pg_records.apply(build_batch(records, embedder))
    for _ in range(3):  # the graph is down: the vector target is not held back by it
        report = await projector.drain()
        assert not report.ok and "graph" in report.failed
    assert (await projected_state(target, "u1"))[2] == {"c-phx", "c-bw", "c-pg", "m1", "m2", "m3", "m4", "a1"}
    report = await projector.drain()  # recovered
    assert report.ok and report.delivered["graph"] > 0
    nodes, edges, docs = await projected_state(target, "u1")
    assert nodes == docs == set(await pg_records.ids("u1"))
    with psycopg.connect(pg_records._dsn) as conn:
        pg_edges = {
            tuple(r) for r in conn.execute("SELECT source, target, type FROM hrt_relations WHERE user_id = 'u1'")
        }
    assert edges == pg_edges
    assert await outbox_rows(pg_records) == 0
    # replaying everything again changes nothing (idempotent)
    await pg_records.apply(build_batch(records, embedder))
    assert (await projector.drain()).ok
    assert await projected_state(target, "u1") == (nodes, edges, docs)
    target.close()


class CountingVectors:
    """Wraps a real vector index; counts the documents each upsert delivers."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.delivered: list[str] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def upsert(self, user_id, docs):
        self.delivered.extend(d.id for d in docs)
        await self.inner.upsert(user_id, docs)


async def test_concurrent_drains_deliver_each_event_once(pg_records, tmp_path):
    # `hrt serve`'s background loop and an ingest's read-your-writes drain run at the same time: a
    # second delivery of the same data would rewrite Weaviate objects while requests are served
    embedder = HashingEmbedder()
    target = EmbeddedStore(tmp_path / "proj.db", embedder.dim)
    vectors = CountingVectors(target.vectors)
    projector = Projector(pg_records, target.graph, vectors)
    await pg_records.apply(build_batch(parse_jsonl(jsonl(small_graph("u1"))), embedder))
    first, second = await asyncio.gather(projector.drain(), projector.drain())
    assert first.ok and second.ok
    assert sorted(vectors.delivered) == sorted(["c-phx", "c-bw", "c-pg", "m1", "m2", "m3", "m4", "a1"])
    assert first.delivered["vector"] + second.delivered["vector"] == 8
    assert await outbox_rows(pg_records) == 0
    target.close()


async def test_the_graph_and_vector_targets_drain_side_by_side(pg_records, tmp_path):
    # the graph target's first write waits until the vector target has written: one drain after the
    # other would never get there (the wait times out), side by side both finish and the outbox empties
    embedder = HashingEmbedder()
    target = EmbeddedStore(tmp_path / "proj.db", embedder.dim)
    vector_wrote = asyncio.Event()

    class WaitingGraph:
        def __getattr__(self, name):
            return getattr(target.graph, name)

        async def upsert_nodes(self, user_id, nodes):
            await asyncio.wait_for(vector_wrote.wait(), timeout=10)
            await target.graph.upsert_nodes(user_id, nodes)

    class SignallingVectors:
        def __getattr__(self, name):
            return getattr(target.vectors, name)

        async def upsert(self, user_id, docs):
            await target.vectors.upsert(user_id, docs)
            vector_wrote.set()

    projector = Projector(pg_records, WaitingGraph(), SignallingVectors())
    await pg_records.apply(build_batch(parse_jsonl(jsonl(small_graph("u1"))), embedder))
    report = await projector.drain()
    assert report.ok, report.failed
    assert report.delivered["vector"] == 8 and report.delivered["graph"] > 8
    assert await outbox_rows(pg_records) == 0
    nodes, edges, docs = await projected_state(target, "u1")
    assert nodes == docs == set(await pg_records.ids("u1")) and edges
    target.close()


async def test_a_bounded_drain_gives_up_behind_a_stuck_one(pg_records, tmp_path):
    # a write's read-your-writes drain waits a bounded time behind the background drain (held up
    # here by a target that hangs), then returns and leaves its events in the outbox
    embedder = HashingEmbedder()
    target = EmbeddedStore(tmp_path / "proj.db", embedder.dim)
    vectors = CountingVectors(target.vectors)
    gate = asyncio.Event()
    upsert = vectors.upsert

    async def held(user_id, docs):
        await gate.wait()
        await upsert(user_id, docs)

    vectors.upsert = held  # type: ignore[method-assign]
    projector = Projector(pg_records, target.graph, vectors)
    await pg_records.apply(build_batch(parse_jsonl(jsonl(small_graph("u1"))), embedder))
    stuck = asyncio.ensure_future(projector.drain())
    await asyncio.sleep(0.2)
    bounded = await projector.drain(wait=0.2)
    assert bounded.busy and bounded.delivered == {"graph": 0, "vector": 0}
    gate.set()
    assert (await stuck).ok and await outbox_rows(pg_records) == 0
    assert len(vectors.delivered) == 8  # delivered once, by the drain that held the projector
    target.close()


async def test_deletes_reach_every_projection(pg_records, tmp_path):
    embedder = HashingEmbedder()
    target = EmbeddedStore(tmp_path / "proj.db", embedder.dim)
    projector = Projector(pg_records, target.graph, target.vectors)
    await pg_records.apply(build_batch(parse_jsonl(jsonl(small_graph("u1") + small_graph("u2", "x"))), embedder))
    await projector.drain()
    await pg_records.apply(
        build_batch(
            parse_jsonl(
                jsonl(
                    [
                        {"op": "delete", "kind": "concept", "user_id": "u1", "id": "c-pg"},
                        {
                            "op": "delete",
                            "kind": "relation",
                            "user_id": "u1",
                            "type": "FOLLOWS",
                            "source": "m2",
                            "target": "m1",
                        },
                    ]
                )
            ),
            embedder,
        )
    )
    await projector.drain()
    nodes, edges, docs = await projected_state(target, "u1")
    assert "c-pg" not in nodes | docs and ("m2", "m1", "FOLLOWS") not in edges
    assert not any("c-pg" in e for e in edges)
    await pg_records.delete_user("u1")
    await projector.drain()
    assert await projected_state(target, "u1") == (set(), set(), set())
    assert (await projected_state(target, "u2"))[0]  # the other user is untouched
    target.close()


CRASHING_WRITER = """
import asyncio, os, sys
from hrt.ingest import build_batch, parse_jsonl
from hrt.stores.postgres.records import PostgresRecordStore
from tests.helpers import HashingEmbedder, outbox_rows, concept, jsonl, mu, rel, small_graph

async def main():
    store = PostgresRecordStore(sys.argv[1])
    await store.open()
    await store.apply(build_batch(parse_jsonl(jsonl(small_graph("u7"))), HashingEmbedder()))
    os._exit(9)  # dies after the commit, before any projection

asyncio.run(main())
"""


async def test_a_crash_between_commit_and_projection_loses_nothing(pg_records, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", CRASHING_WRITER, pg_records._dsn],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]),
    )
    assert proc.returncode == 9, proc.stderr
    assert await outbox_rows(pg_records) > 0  # the events survived the crash
    target = EmbeddedStore(tmp_path / "proj.db", HashingEmbedder().dim)
    report = await Projector(pg_records, target.graph, target.vectors).drain()  # "restart"
    assert report.ok
    nodes, _, docs = await projected_state(target, "u7")
    assert nodes == docs == set(await pg_records.ids("u7")) and len(nodes) == 8
    target.close()


async def test_postgres_deployment_answers_like_the_embedded_one(postgres_dsn, tmp_path):
    migrate(postgres_dsn)
    data = parse_jsonl(jsonl(small_graph("u1") + small_graph("u2", "x")))
    embedded = HRTService(Settings(db_path=tmp_path / "e.db"), embedder=HashingEmbedder(), clock=lambda: FIXED_NOW)
    services = await HRTService(
        Settings(db_path=tmp_path / "p.db", record_store="postgres", postgres_dsn=postgres_dsn),
        embedder=HashingEmbedder(),
        clock=lambda: FIXED_NOW,
    ).start()
    try:
        await embedded.ingest(data)
        await services.ingest(data)
        for phrases in (["Project Phoenix", "bandwidth"], ["Postgres billing"], ["nothing like this"]):
            req = RetrieveRequest(user_id="u1", key_phrases=phrases, as_of="2025-08-01T00:00:00Z")
            a = (await embedded.retrieve(req)).model_dump()
            b = (await services.retrieve(req)).model_dump()
            assert a["retrieval_metadata"].pop("deployment") == "embedded"
            assert b["retrieval_metadata"].pop("deployment") == "postgres+embedded"
            assert a == b
        assert await services.records.counts("u1") == await embedded.records.counts("u1")
        got = await services.records.get_many("u1", Kind.CONCEPT, ["c-phx", "xc-phx"])
        assert list(got) == ["c-phx"]
    finally:
        await embedded.close()
        await services.close()


async def test_doctor_reports_drift_and_repair_rebuilds_from_postgres(pg_records, tmp_path):
    from hrt.doctor import check, repair_user
    from hrt.stores.base import VectorDoc

    embedder = HashingEmbedder()
    target = EmbeddedStore(tmp_path / "proj.db", embedder.dim)
    await pg_records.apply(build_batch(parse_jsonl(jsonl(small_graph("u1") + small_graph("u2", "x"))), embedder))
    assert (await Projector(pg_records, target.graph, target.vectors).drain()).ok
    assert all(d.clean for d in await check(pg_records, target.graph, target.vectors))
    # drift: a node lost from the graph, an edge lost, a stray document in the index
    await target.graph.delete_nodes("u1", ["m1"])
    await target.vectors.upsert("u1", [VectorDoc("ghost", Kind.MEMORY_UNIT, "ghost", embedder.embed(["g"])[0], None)])
    drift = {d.user_id: d for d in await check(pg_records, target.graph, target.vectors)}
    assert drift["u1"].missing_in_graph == {"memory_unit": ["m1"]}
    assert drift["u1"].orphans_in_vectors == {"memory_unit": ["ghost"]}
    assert drift["u2"].clean
    await repair_user(pg_records, target.graph, target.vectors, drift["u1"])
    assert all(d.clean for d in await check(pg_records, target.graph, target.vectors))
    _nodes, edges, docs = await projected_state(target, "u1")
    assert ("m1", "c-phx", "MENTIONS") in edges and ("m2", "m1", "FOLLOWS") in edges and "ghost" not in docs
    target.close()


def test_hrt_doctor_and_project_commands(postgres_dsn, tmp_path):
    import json
    import os

    migrate(postgres_dsn)
    env = {
        **os.environ,
        "HRT_RECORD_STORE": "postgres",
        "HRT_POSTGRES_DSN": postgres_dsn,
        "HRT_DB_PATH": str(tmp_path / "proj.db"),
    }
    data = tmp_path / "g.jsonl"
    data.write_text("\n".join(jsonl(small_graph("u1"))) + "\n")

    def hrt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hrt.cli", *args], capture_output=True, text=True, env=env, timeout=300
        )

    assert hrt("ingest", str(data)).returncode == 0
    clean = hrt("doctor")
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["drift"] == []
    store = EmbeddedStore(tmp_path / "proj.db", 384)
    with store.transaction() as db:
        db.execute("DELETE FROM nodes WHERE user_id = 'u1' AND id = 'a1'")
    store.close()
    dirty = hrt("doctor")
    assert dirty.returncode == 1 and json.loads(dirty.stdout)["drift"][0]["missing_in_graph"] == {"artifact": ["a1"]}
    fixed = hrt("doctor", "--repair")
    assert fixed.returncode == 0, fixed.stdout
    assert json.loads(fixed.stdout)["drift_after_repair"] == []
    projected = hrt("project")
    assert projected.returncode == 0 and json.loads(projected.stdout)["failed"] == {}


# ------------------------------------------------------------------------------------------
# facts that change (#20): intervals and SUPERSEDES
# ------------------------------------------------------------------------------------------


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


HISTORY = [
    concept("iv", "c-atlas", "Project Atlas"),
    concept("iv", "c-lee", "Lee", valid_from="2025-03-01T00:00:00Z"),
    mu("iv", "m-old", "Atlas deadline is March 31", "2025-01-10T09:00:00Z"),
    mu(
        "iv",
        "m-new",
        "Atlas deadline moved to June 30",
        "2025-03-20T09:00:00Z",
        supersedes=["m-old"],
        valid_from="2025-03-15T00:00:00Z",
    ),
    mu("iv", "m-kick", "Atlas kickoff", "2025-01-05T09:00:00Z", valid_to="2025-02-01T00:00:00Z"),
    artifact("iv", "a-v1", "Atlas design v1", "2025-01-12T00:00:00Z"),
    artifact("iv", "a-v2", "Atlas design v2", "2025-04-02T00:00:00Z", supersedes=["a-v1", "m-kick"]),
    rel("iv", "MENTIONS", "m-new", "c-atlas"),
    rel("iv", "RELATED_TO", "c-atlas", "c-lee", valid_from="2025-04-01T00:00:00Z", valid_to="2025-09-01T00:00:00Z"),
]


JUNE_30 = "2025-06-30T00:00:00Z"


def test_migration_0004_backfills_the_intervals_of_rows_written_before_it(postgres_dsn):
    before = [m for m in bundled_migrations() if m.version < 4]
    assert [m.version for m in before] == [1, 2, 3]
    migrate(postgres_dsn, before)
    data = {
        "m1": {"kind": "memory_unit", "muid": "m1", "creation_ts": "2025-01-10T09:00:00Z"},
        "c1": {"kind": "concept", "id": "c1", "name": "Atlas"},
        # a record that carries an interval (written by a newer HRT before its migration ran)
        "m2": {"kind": "memory_unit", "muid": "m2", "valid_from": "2025-03-15T00:00:00Z", "valid_to": JUNE_30},
    }
    ts = {"m1": _epoch("2025-01-10T09:00:00Z"), "c1": None, "m2": _epoch("2025-03-20T09:00:00Z")}
    entity = "INSERT INTO hrt_entities (user_id, id, kind, data, vector, ts) VALUES ('old', %s, %s, %s, '\\x00', %s)"
    relation = "INSERT INTO hrt_relations (user_id, source, target, type, weight) VALUES ('old', %s, %s, %s, 1)"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for ident, d in data.items():
            conn.execute(entity, (ident, d["kind"], Jsonb({"user_id": "old", **d}), ts[ident]))
        conn.execute(relation, ("m1", "c1", "MENTIONS"))
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(relation, ("m2", "m1", "SUPERSEDES"))
    assert migrate(postgres_dsn) == [m.version for m in bundled_migrations() if m.version >= 4]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        rows = {i: (vf, vt) for i, vf, vt in conn.execute("SELECT id, valid_from, valid_to FROM hrt_entities")}
        assert rows == {
            "m1": (ts["m1"], None),  # no interval of its own: valid from its creation
            "c1": (None, None),
            "m2": (_epoch("2025-03-15T00:00:00Z"), _epoch(JUNE_30)),
        }
        assert conn.execute("SELECT valid_from, valid_to FROM hrt_relations").fetchall() == [(None, None)]
        # 0008: a browsing title backfilled (a concept's name, lower-cased), the writer unknown
        titles = conn.execute("SELECT id, title_key, written_at, written_by FROM hrt_entities ORDER BY id").fetchall()
        assert titles == [("c1", "atlas", None, None), ("m1", "", None, None), ("m2", "", None, None)]
        conn.execute(relation, ("m2", "m1", "SUPERSEDES"))
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(relation, ("m2", "m1", "REPLACES"))


async def test_intervals_and_supersedes_round_trip(pg_records):
    embedder = HashingEmbedder()
    result = await pg_records.apply(build_batch(parse_jsonl(jsonl(HISTORY)), embedder))
    assert result.upserted == 7 + 2 + 3  # entities, the relations given, the SUPERSEDES relations
    got = await pg_records.get_many("iv", Kind.MEMORY_UNIT, ["m-new", "m-kick", "m-old"])
    assert got["m-new"].supersedes == ["m-old"] and got["m-new"].valid_from == datetime(2025, 3, 15, tzinfo=UTC)
    assert got["m-kick"].valid_to == datetime(2025, 2, 1, tzinfo=UTC) and got["m-old"].valid_from is None
    assert (await pg_records.get_many("iv", Kind.ARTIFACT, ["a-v2"]))["a-v2"].supersedes == ["a-v1", "m-kick"]
    with psycopg.connect(pg_records._dsn) as conn:
        columns = {i: (vf, vt) for i, vf, vt in conn.execute("SELECT id, valid_from, valid_to FROM hrt_entities")}
    assert columns["m-new"] == (_epoch("2025-03-15T00:00:00Z"), None)
    assert columns["m-old"] == (_epoch("2025-01-10T09:00:00Z"), None)  # as projected: its creation
    assert columns["m-kick"] == (_epoch("2025-01-05T09:00:00Z"), _epoch("2025-02-01T00:00:00Z"))
    assert columns["c-atlas"] == (None, None) and columns["c-lee"] == (_epoch("2025-03-01T00:00:00Z"), None)
    rels = {(r.source, r.target, r.type.value): r for r in await pg_records.all_relations("iv")}
    assert set(rels) == {
        ("m-new", "c-atlas", "MENTIONS"),
        ("c-atlas", "c-lee", "RELATED_TO"),
        ("m-new", "m-old", "SUPERSEDES"),
        ("a-v2", "a-v1", "SUPERSEDES"),
        ("a-v2", "m-kick", "SUPERSEDES"),
    }
    lee = rels[("c-atlas", "c-lee", "RELATED_TO")]
    assert (lee.valid_from, lee.valid_to) == (datetime(2025, 4, 1, tzinfo=UTC), datetime(2025, 9, 1, tzinfo=UTC))
    assert rels[("m-new", "m-old", "SUPERSEDES")].valid_from is None
    keys = list(rels)
    assert await pg_records.relation_rows("iv", keys) == rels
    async with pg_records.outbox_lease("graph", wait=True) as lease:
        assert lease is not None and await lease.relation_rows("iv", keys) == rels
    # an interval changed, then taken back: the row follows
    moved = rel("iv", "RELATED_TO", "c-atlas", "c-lee", valid_from="2025-05-01T00:00:00Z")
    await pg_records.apply(build_batch(parse_jsonl(jsonl([moved])), embedder))
    (lee,) = (await pg_records.relation_rows("iv", [("c-atlas", "c-lee", "RELATED_TO")])).values()
    assert (lee.valid_from, lee.valid_to) == (datetime(2025, 5, 1, tzinfo=UTC), None)


async def test_supersedes_is_checked_and_goes_with_either_end(pg_records):
    embedder = HashingEmbedder()
    await pg_records.apply(build_batch(parse_jsonl(jsonl(HISTORY)), embedder))
    # only memory units and artifacts supersede or are superseded
    for bad, field in (
        (rel("iv", "SUPERSEDES", "m-new", "c-atlas"), "target"),
        (rel("iv", "SUPERSEDES", "c-lee", "m-old"), "source"),
        (mu("iv", "m-x", "x", supersedes=["c-atlas"]), "target"),
        (mu("iv", "m-y", "y", supersedes=["nowhere"]), "target"),
    ):
        with pytest.raises(InvalidInput) as info:
            await pg_records.apply(build_batch(parse_jsonl(jsonl([bad])), embedder))
        assert info.value.field == field and "SUPERSEDES" in info.value.message
    assert set(await pg_records.ids("iv")) == {"c-atlas", "c-lee", "m-old", "m-new", "m-kick", "a-v1", "a-v2"}

    def supersedes() -> set[tuple[str, str]]:
        with psycopg.connect(pg_records._dsn) as conn:
            return {
                (s, t) for s, t in conn.execute("SELECT source, target FROM hrt_relations WHERE type = 'SUPERSEDES'")
            }

    assert supersedes() == {("m-new", "m-old"), ("a-v2", "a-v1"), ("a-v2", "m-kick")}
    deletes = [
        {"op": "delete", "kind": "memory_unit", "user_id": "iv", "muid": "m-new"},  # the successor
        {"op": "delete", "kind": "artifact", "user_id": "iv", "id": "a-v1"},  # the old one
    ]
    await pg_records.apply(build_batch(parse_jsonl(jsonl(deletes)), embedder))
    assert supersedes() == {("a-v2", "m-kick")}
    await pg_records.apply(
        build_batch(
            parse_jsonl(
                jsonl(
                    [
                        {
                            "op": "delete",
                            "kind": "relation",
                            "user_id": "iv",
                            "type": "SUPERSEDES",
                            "source": "a-v2",
                            "target": "m-kick",
                        }
                    ]
                )
            ),
            embedder,
        )
    )
    assert supersedes() == set()


class RecordingGraph:
    """Wraps a real graph store; keeps the edges each write delivers."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.upserted: list[GraphEdge] = []
        self.deleted: list[GraphEdge] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def upsert_edges(self, user_id, edges):
        self.upserted.extend(edges)
        await self.inner.upsert_edges(user_id, edges)

    async def delete_edges(self, user_id, edges):
        self.deleted.extend(edges)
        await self.inner.delete_edges(user_id, edges)


async def test_the_outbox_delivers_supersedes_and_intervals(pg_records, tmp_path):
    embedder = HashingEmbedder()
    target = EmbeddedStore(tmp_path / "proj.db", embedder.dim)
    graph = RecordingGraph(target.graph)
    vectors = CountingVectors(target.vectors)
    projector = Projector(pg_records, graph, vectors)
    await pg_records.apply(build_batch(parse_jsonl(jsonl(HISTORY)), embedder))
    with psycopg.connect(pg_records._dsn) as conn:
        events = conn.execute(
            "SELECT key FROM hrt_outbox WHERE op = 'upsert_relation' AND key->>'type' = 'SUPERSEDES' ORDER BY seq"
        ).fetchall()
    assert [e[0]["source"] + ">" + e[0]["target"] for e in events] == ["a-v2>a-v1", "a-v2>m-kick", "m-new>m-old"]
    assert (await projector.drain()).ok
    delivered = {(e.source, e.target, e.type.value): e for e in graph.upserted}
    assert delivered[("m-new", "m-old", "SUPERSEDES")] == GraphEdge("m-new", "m-old", EdgeType.SUPERSEDES, 1.0)
    lee = delivered[("c-atlas", "c-lee", "RELATED_TO")]
    assert (lee.valid_from, lee.valid_to) == (_epoch("2025-04-01T00:00:00Z"), _epoch("2025-09-01T00:00:00Z"))
    assert "m-new" in vectors.delivered
    edges = (await projected_state(target, "iv"))[1]
    assert {("m-new", "m-old", "SUPERSEDES"), ("a-v2", "a-v1", "SUPERSEDES")} <= edges
    # deleting the successor: its entity and its SUPERSEDES edge leave the projections
    await pg_records.apply(
        build_batch(
            parse_jsonl(jsonl([{"op": "delete", "kind": "memory_unit", "user_id": "iv", "muid": "m-new"}])), embedder
        )
    )
    assert (await projector.drain()).ok
    nodes, edges, docs = await projected_state(target, "iv")
    assert "m-new" not in nodes | docs
    assert not {e for e in edges if "m-new" in e}
    assert await outbox_rows(pg_records) == 0
    target.close()
