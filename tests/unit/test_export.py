"""Export (#33): the NDJSON of one user in the ingest format, in an order any batching of which
rebuilds the user; the route's refusals and audit, in process; the clients; ``hrt export``. The
services deployment and real servers: tests/integration/test_export.py."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from hrt.api import create_app
from hrt.auth import SCOPES, new_key
from hrt.cli import main
from hrt.client import AsyncHRTClient, HRTClient, RetryPolicy
from hrt.config import Settings
from hrt.errors import HRTError, NotFound, RateLimited
from hrt.export import ExportSlots, _chain_order, export_lines, record_line
from hrt.ingest import build_batch, parse_jsonl
from hrt.records import Kind, MemoryUnit
from hrt.service import HRTService
from hrt.stores.base import ExportReader
from hrt.stores.embedded.export import EmbeddedExportReader
from hrt.stores.postgres.export import PostgresExportReader
from tests.helpers import HashingEmbedder, artifact, bearer, concept, jsonl, mu, rel, small_graph
from tests.unit.test_ports import conformance_problems

U = "u-ex"


def supersession_graph(user: str = U) -> list[dict[str, Any]]:
    """Supersessions an export must keep: a chain whose newest sorts first (m-b supersedes m-c,
    the artifact a-1 supersedes m-b), a supersession rewritten since (m-e), one whose target is
    deleted later (m-g -> m-f), beside concepts, mentions, metadata and preferences."""
    return [
        mu(user, "m-c", "The launch is on 3 March.", "2025-01-01T10:00:00Z", tags=["launch"]),
        mu(user, "m-b", "The launch moved to 9 June.", "2025-02-01T10:00:00Z", supersedes=["m-c"]),
        artifact(user, "a-1", "Launch date: 1 September, final.", "2025-03-01T10:00:00Z", supersedes=["m-b"]),
        mu(user, "m-d", "Ana owns pricing.", "2025-01-05T10:00:00Z", metadata={"z": 1, "a": {"y": [1, 2], "b": None}}),
        mu(user, "m-e", "Ben owns pricing now.", "2025-02-05T10:00:00Z", supersedes=["m-d"]),
        mu(user, "m-f", "The office is in Lyon.", "2025-01-07T10:00:00Z"),
        mu(user, "m-g", "The office moved to Nantes.", "2025-02-07T10:00:00Z", supersedes=["m-f"]),
        concept(user, "c-launch", "Launch", "The product launch.", properties={"q": 3, "owner": "Ana"}),
        concept(user, "c-price", "Pricing", valid_from="2025-01-01T00:00:00Z"),
        rel(user, "MENTIONS", "m-c", "c-launch"),
        rel(user, "MENTIONS", "m-b", "c-launch", weight=0.5),
        rel(user, "MENTIONS", "m-e", "c-price", valid_to="2026-01-01T00:00:00Z"),
        rel(user, "DERIVED_FROM", "a-1", "m-b"),
        rel(user, "RELATED_TO", "c-launch", "c-price", relation_type="affects", weight=0.7),
        {"kind": "preference", "user_id": user, "target_kind": "concept", "target": "c-launch", "weight": 0.9},
        {"kind": "preference", "user_id": user, "target_kind": "source_type", "target": "chat", "weight": 0.2},
    ]


async def export_bytes(svc: HRTService, user: str = U, chunk: int = 500) -> bytes:
    out = b""
    async with svc.records.export_reader(user) as reader:
        async for part in export_lines(reader, chunk=chunk):
            out += part
    return out


@pytest.fixture
async def source(hashing_service: HRTService) -> HRTService:
    svc = hashing_service
    await svc.ingest(parse_jsonl(jsonl(supersession_graph())))
    # rewritten since: the supersession of m-d by m-e holds from a date (an interval of its own)
    await svc.ingest(parse_jsonl(jsonl([rel(U, "SUPERSEDES", "m-e", "m-d", valid_from="2025-02-05T00:00:00Z")])))
    await svc.delete_entity(U, Kind.MEMORY_UNIT, "m-f")  # m-g's supersedes now names nothing stored
    await svc.ingest(parse_jsonl(jsonl(small_graph("other"))))  # another user, never exported with U
    return svc


async def test_the_export_is_the_ingest_format_in_dependency_order(source: HRTService):
    text = (await export_bytes(source)).decode()
    assert text.endswith("\n")
    lines = text.splitlines()
    records = [json.loads(line) for line in lines]
    assert all(r["user_id"] == U for r in records) and all(line.startswith('{"kind":') for line in lines)
    assert len(set(lines)) == len(lines)
    parse_jsonl(lines)  # every line is a valid ingest record
    order = [(r["kind"], r.get("muid") or r.get("id") or (r.get("source"), r.get("target"))) for r in records]
    kinds = [k for k, _ in order]
    # entities first (those superseding nothing: units, concepts, artifacts by id), then relations,
    # then preferences
    assert kinds.index("relation") > max(i for i, k in enumerate(kinds) if k in ("memory_unit", "concept", "artifact"))
    assert kinds[-2:] == ["preference", "preference"]
    ids = [x for k, x in order if k != "relation" and k != "preference"]
    assert ids == ["m-c", "m-d", "m-g", "c-launch", "c-price", "m-b", "m-e", "a-1"]
    # what a successor supersedes is stored before it, whatever the ids' order
    assert ids.index("m-c") < ids.index("m-b") < ids.index("a-1") and ids.index("m-d") < ids.index("m-e")
    by_id = {r.get("muid") or r.get("id"): r for r in records if r["kind"] != "relation"}
    # the implied supersessions are written once, by the entities' supersedes
    supersedes = [(r["source"], r["target"]) for r in records if r["kind"] == "relation" and r["type"] == "SUPERSEDES"]
    assert by_id["m-b"]["supersedes"] == ["m-c"] and by_id["a-1"]["supersedes"] == ["m-b"]
    assert ("m-b", "m-c") not in supersedes and ("a-1", "m-b") not in supersedes
    # the one rewritten since is a line of its own, with its interval, besides the entity's field
    assert by_id["m-e"]["supersedes"] == ["m-d"] and supersedes == [("m-e", "m-d")]
    # a supersession of a deleted entity is not written: ingest would refuse it
    assert "supersedes" not in by_id["m-g"]
    # canonical: defaults left out, the rest by name, nested objects too
    assert "importance_score" not in by_id["m-c"] and by_id["m-c"]["tags"] == ["launch"]
    assert '"metadata":{"a":{"b":null,"y":[1,2]},"z":1}' in lines[ids.index("m-d")]
    assert by_id["c-launch"]["properties"] == {"owner": "Ana", "q": 3}


@pytest.mark.parametrize("batch", [1, 2, 5, 1000])
async def test_ingesting_the_export_in_any_batches_rebuilds_the_user(source: HRTService, tmp_path: Path, batch: int):
    first = await export_bytes(source, chunk=3)  # chunk size changes nothing
    assert first == await export_bytes(source)
    target = HRTService(Settings(db_path=tmp_path / f"copy-{batch}.db"), embedder=HashingEmbedder())
    try:
        lines = first.decode().splitlines()
        for i in range(0, len(lines), batch):
            await target.ingest(parse_jsonl(lines[i : i + batch]))
        assert await export_bytes(target) == first  # byte-identical
        assert await target.records.counts(U) == await source.records.counts(U)
        assert await target.records.all_relations(U) == await source.records.all_relations(U)
        assert await target.records.preferences(U) == await source.records.preferences(U)
        assert await target.records.user_exists("other") is False
        for kind in Kind:
            ids = sorted(i for i, k in (await source.records.ids(U)).items() if k == kind.value)
            mine, theirs = await source.records.get_many(U, kind, ids), await target.records.get_many(U, kind, ids)
            assert mine.keys() == theirs.keys()
            for ident in ids:
                if ident == "m-g":  # names the deleted m-f: left out, as its relation is gone
                    assert isinstance(mine[ident], MemoryUnit) and mine[ident].supersedes == ["m-f"]
                    assert theirs[ident] == mine[ident].model_copy(update={"supersedes": []})
                else:
                    assert theirs[ident] == mine[ident], ident
    finally:
        await target.close()


async def test_an_explicit_supersedes_relation_wins_over_the_implied_one_in_one_batch(hashing_service: HRTService):
    records = parse_jsonl(
        jsonl(
            [
                rel(U, "SUPERSEDES", "m2", "m1", valid_from="2025-03-01T00:00:00Z", weight=0.5),
                mu(U, "m1", "Old fact.", "2025-01-01T10:00:00Z"),
                mu(U, "m2", "New fact.", "2025-02-01T10:00:00Z", supersedes=["m1"]),
            ]
        )
    )
    batch = build_batch(records, HashingEmbedder())
    assert [r.weight for r in batch.relations] == [1.0, 0.5]  # the implied one first: the last wins
    await hashing_service.ingest(records)
    [stored] = await hashing_service.records.all_relations(U)
    assert stored.weight == 0.5 and stored.valid_from is not None


async def test_a_supersession_cycle_is_exported_and_rebuilt_in_one_batch(hashing_service: HRTService, tmp_path):
    cycle = [
        mu(U, "m-x", "X replaces Y.", "2025-01-01T10:00:00Z", supersedes=["m-y"]),
        mu(U, "m-y", "Y replaces X.", "2025-01-02T10:00:00Z", supersedes=["m-x"]),
        mu(U, "m-z", "Z replaces X.", "2025-01-03T10:00:00Z", supersedes=["m-x"]),
        mu(U, "m-a", "A stands alone.", "2025-01-04T10:00:00Z"),
    ]
    await hashing_service.ingest(parse_jsonl(jsonl(cycle)))
    text = await export_bytes(hashing_service)
    assert [json.loads(line)["muid"] for line in text.decode().splitlines()] == ["m-a", "m-x", "m-y", "m-z"]
    copy = HRTService(Settings(db_path=tmp_path / "cycle.db"), embedder=HashingEmbedder())
    try:
        await copy.ingest(parse_jsonl(text.decode().splitlines()))
        assert await export_bytes(copy) == text
        assert await copy.records.all_relations(U) == await hashing_service.records.all_relations(U)
    finally:
        await copy.close()


def test_chain_order_puts_each_successor_after_what_it_supersedes():
    mu_, art = Kind.MEMORY_UNIT, Kind.ARTIFACT
    chain = {"a": (mu_, ["b"]), "b": (mu_, ["c"]), "c": (art, ["d"]), "z": (mu_, ["q"])}
    # d and q are not deferred (they supersede nothing): depth 1 for c and z, then b, then a
    assert _chain_order(chain) == ["z", "c", "b", "a"]
    looped = {"x": (mu_, ["y"]), "y": (mu_, ["x"]), "w": (mu_, ["x"]), "v": (mu_, ["k"])}
    assert _chain_order(looped) == ["v", "w", "x", "y"]  # the cycle and what is above it last
    long = {f"n{i:05d}": (mu_, [f"n{i + 1:05d}"]) for i in range(5000)}  # no recursion limit
    assert _chain_order(long)[:2] == ["n04999", "n04998"]


def test_a_line_is_canonical_json():
    record = parse_jsonl(jsonl([mu(U, "m1", "Ünïcode — kept.", metadata={"b": 1, "a": 2.5})]))[0]
    assert isinstance(record, MemoryUnit)
    line = record_line(record)
    assert line == (
        '{"kind":"memory_unit","content":"Ünïcode — kept.","creation_ts":"2025-06-01T10:00:00Z",'
        '"metadata":{"a":2.5,"b":1},"muid":"m1","title":"m1","user_id":"u-ex"}'
    )
    assert parse_jsonl([line])[0] == record


def test_the_export_readers_have_the_port():
    for adapter in (EmbeddedExportReader, PostgresExportReader):
        assert conformance_problems(adapter, ExportReader) == []


def test_export_slots_bound_the_exports_at_once():
    slots = ExportSlots(limit=1)
    with slots.slot():
        with pytest.raises(RateLimited) as refused, slots.slot():
            pass
        assert refused.value.reason == "export_concurrency" and refused.value.retry_after_s >= 1
    with slots.slot():  # released
        assert slots.running == 1


# ------------------------------------------------------------------------------------------
# the route, in process
# ------------------------------------------------------------------------------------------


@pytest.fixture
async def keys(loaded_service: HRTService) -> dict[str, str]:
    made = {}
    for name, scopes, users in [
        ("u1-export", ["export"], ["u1"]),
        ("u1-read", ["retrieve"], ["u1"]),
        ("root", SCOPES, None),
    ]:
        token, record = new_key(name, scopes, users)
        await loaded_service.records.create_key(record)
        made[name] = token
    return made


async def test_the_route_streams_ndjson_to_a_key_with_export_for_the_user(api, keys, loaded_service, caplog):
    caplog.set_level(logging.INFO, logger="hrt.audit")
    r = await api.get("/v1/users/u1/export", headers=bearer(keys["u1-export"]))
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
    assert r.content == await export_bytes(loaded_service, "u1")
    n = len(r.content.splitlines())
    assert n == sum((await loaded_service.records.counts("u1")).values())  # no supersessions here
    [line] = [json.loads(m.getMessage()) for m in caplog.records if m.name == "hrt.audit"]
    assert line["event"] == "export" and line["route"] == "/v1/users/{user_id}/export"
    assert line["users"] == ["u1"] and line["records"] == n and line["complete"] is True
    assert line["outcome"] == "ok" and line["key"] == "u1-export"


async def test_the_route_refuses_as_the_other_user_routes_do(api, keys, caplog):
    caplog.set_level(logging.INFO, logger="hrt.audit")
    assert (await api.get("/v1/users/u1/export")).status_code == 401
    scope = await api.get("/v1/users/u1/export", headers=bearer(keys["u1-read"]))
    assert scope.status_code == 403 and "'export' scope" in scope.json()["error"]["message"]
    # another user's id: the same 403 whether the user exists or not, as /v1/users/{u}/stats
    mine = bearer(keys["u1-export"])
    other, absent = (
        await api.get("/v1/users/u2/export", headers=mine),
        await api.get("/v1/users/nobody/export", headers=mine),
    )
    stats = await api.get("/v1/users/u2/stats", headers=bearer(keys["u1-read"]))
    assert other.status_code == absent.status_code == stats.status_code == 403
    assert other.json()["error"]["message"].replace("u2", "X") == absent.json()["error"]["message"].replace(
        "nobody", "X"
    )
    assert other.json()["error"]["field"] == absent.json()["error"]["field"] == stats.json()["error"]["field"]
    # a key for every user tells an unknown user (404) from data
    root = bearer(keys["root"])
    unknown = await api.get("/v1/users/nobody/export", headers=root)
    assert unknown.status_code == 404 and unknown.json()["error"]["field"] == "user_id"
    bad = await api.get("/v1/users/u1%0A/export", headers=root)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "user_id"
    audited = [json.loads(m.getMessage()) for m in caplog.records if m.name == "hrt.audit"]
    assert [a["status"] for a in audited] == [401, 403, 403, 403, 404, 422]
    assert all(a["event"] == "export" and a["records"] == 0 and a["complete"] is False for a in audited[1:])


async def test_the_openapi_document_declares_the_route(api, keys):
    doc = (await api.get("/openapi.json", headers=bearer(keys["root"]))).json()
    answer = doc["paths"]["/v1/users/{user_id}/export"]["get"]["responses"]["200"]
    assert "application/x-ndjson" in answer["content"]
    assert "export" in doc["components"]["securitySchemes"]["bearer"]["description"]


# ------------------------------------------------------------------------------------------
# the clients
# ------------------------------------------------------------------------------------------


async def test_the_async_client_iterates_and_writes_the_export(loaded_service, settings, keys, tmp_path):
    app = create_app(settings, service=loaded_service)
    expected = await export_bytes(loaded_service, "u1")
    async with AsyncHRTClient(
        "http://hrt", keys["u1-export"], transport=httpx.ASGITransport(app=app), retry=RetryPolicy(max_attempts=1)
    ) as hrt:
        got = [r async for r in hrt.export("u1")]
        assert got == [json.loads(line) for line in expected.splitlines()]
        path = tmp_path / "u1.ndjson"
        with path.open("wb") as fh:
            assert await hrt.export_to("u1", fh) == len(got)
        assert path.read_bytes() == expected
        with pytest.raises(NotFound):
            async with AsyncHRTClient("http://hrt", keys["root"], transport=httpx.ASGITransport(app=app)) as root:
                [r async for r in root.export("nobody")]


def test_the_sync_client_retries_before_the_first_line_and_detects_a_cut_stream():
    answers = [
        httpx.Response(429, headers={"retry-after": "0"}, json={"error": {"code": "rate_limited", "message": "x"}}),
        httpx.Response(
            200,
            content=b'{"kind":"preference","user_id":"u1"}\n{"kind":"pref',
            headers={"content-type": "application/x-ndjson"},
        ),
        httpx.Response(200, content=b'{"a":1}\n\n{"b":2}\n'),
    ]
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path} {request.headers['accept']}")
        return answers.pop(0)

    hrt = HRTClient("http://hrt", "k", transport=httpx.MockTransport(handler), sleep=lambda s: None)
    with pytest.raises(HRTError) as cut:
        list(hrt.export("u1"))
    assert cut.value.code == "export_incomplete"
    assert seen == ["GET /v1/users/u1/export application/x-ndjson"] * 2
    assert list(hrt.export("u1")) == [{"a": 1}, {"b": 2}]


# ------------------------------------------------------------------------------------------
# hrt export
# ------------------------------------------------------------------------------------------


async def test_hrt_export_writes_the_same_bytes_as_the_route(loaded_service, settings, tmp_path, capsysbinary):
    expected = await export_bytes(loaded_service, "u1")
    db = str(settings.db_path)

    async def hrt(*argv: str) -> int:  # the command runs its own event loop: in a thread
        return await asyncio.to_thread(main, list(argv))

    out = tmp_path / "u1.ndjson"
    assert await hrt("export", "--db", db, "--user", "u1", "--out", str(out)) == 0
    assert out.read_bytes() == expected and not (tmp_path / "u1.ndjson.partial").exists()
    err = capsysbinary.readouterr().err.decode()
    assert (
        f"# exported {len(expected.splitlines())} records of u1" in err and "export u1" not in err
    )  # no bar off a TTY
    assert await hrt("export", "--db", db, "--user", "u1", "--progress") == 0
    captured = capsysbinary.readouterr()
    assert captured.out == expected and b"export u1" in captured.err and b"rec" in captured.err
    assert await hrt("export", "--db", db, "--user", "nobody", "--out", str(tmp_path / "n")) == 2
    assert b"no user 'nobody'" in capsysbinary.readouterr().err and not (tmp_path / "n").exists()


async def test_hrt_export_out_is_readable_by_its_owner_only(loaded_service, settings, tmp_path):
    """#45 L6: a whole user's memory is written 0600, whatever the umask and a stale partial file."""
    out = tmp_path / "u1.ndjson"
    stale = tmp_path / "u1.ndjson.partial"
    stale.write_bytes(b"stale")
    stale.chmod(0o644)
    old = os.umask(0o022)
    try:
        argv = ["export", "--db", str(settings.db_path), "--user", "u1", "--out", str(out)]
        assert await asyncio.to_thread(main, argv) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert out.read_bytes() == await export_bytes(loaded_service, "u1") and not stale.exists()


async def test_the_export_is_sent_in_pieces_bounded_in_bytes_built_off_the_loop(source: HRTService, monkeypatch):
    """#45 M2: a chunk of large records is never one send; its lines are written in a worker thread."""
    import threading

    from hrt import export as export_module

    loop_thread = threading.get_ident()
    writers: set[int] = set()
    real = export_module.record_line

    def spied(record: Any) -> str:
        writers.add(threading.get_ident())
        return real(record)

    monkeypatch.setattr(export_module, "record_line", spied)
    whole = await export_bytes(source, U)
    async with source.records.export_reader(U) as reader:
        pieces = [p async for p in export_lines(reader, max_bytes=512)]
    assert b"".join(pieces) == whole and len(pieces) > 1
    assert all(len(p) <= 512 or p.count(b"\n") == 1 for p in pieces)  # a line over the bound goes alone
    assert writers and loop_thread not in writers
