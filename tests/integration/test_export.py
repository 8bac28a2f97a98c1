"""Export and import (#33) across deployments and over real servers.

Round trip: users exported from the embedded store (the sample graph, and a user built through
``add_messages``) and ingested, in batches, into a fresh services deployment (PostgreSQL + Neo4j +
Weaviate) and into a second embedded file. Both hold the same records and relations, and their own
exports are byte-identical to the first. Retrievals at a fixed ``as_of`` are byte-identical in the
second embedded file; the services deployment answers within the congruence tolerance of
tests/integration/test_congruence.py (docs/deployment.md: the two lexical engines rank some
phrases differently), with the same facts set aside as superseded.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from hrt.cli import sample_data_path
from hrt.config import Settings
from hrt.contract import RetrieveRequest
from hrt.export import export_lines
from hrt.ingest import parse_jsonl
from hrt.records import Kind
from hrt.service import HRTService
from hrt.stores.postgres.migrate import migrate
from tests.helpers import services_settings as make_services_settings
from tests.integration.conftest import start_hrt_server
from tests.integration.test_congruence import CASES as CONGRUENCE_CASES
from tests.integration.test_congruence import top_alike
from tests.unit.test_conversations import calls

pytestmark = pytest.mark.integration

AS_OF = "2025-12-31T00:00:00Z"
# (user, phrases, request fields, ids that must be returned, ids that must not): the sample graph's
# supersessions (as tests/integration/test_congruence.py's VALIDITY_CASES) must come through
CASES = [
    ("u-maya", ["Phoenix pricing decision"], {}, {"maya-a-003"}, {"maya-mu-017", "maya-a-002"}),
    ("u-maya", ["Phoenix pricing decision"], {"valid_at": "2025-04-01T00:00:00Z"}, {"maya-mu-017"}, {"maya-a-003"}),
    ("u-tom", ["who owns Dagster"], {"valid_at": "2026-02-01T00:00:00Z"}, {"tom-mu-048"}, {"tom-mu-051"}),
]
LIMITS = {"memory_units": 8, "concepts": 5, "artifacts": 4}


async def export_bytes(svc: HRTService, user: str) -> bytes:
    out = b""
    async with svc.records.export_reader(user) as reader:
        async for part in export_lines(reader, chunk=64):  # many chunks, as a large user's
            out += part
    return out


async def same_records(a: HRTService, b: HRTService, user: str) -> None:
    assert await a.records.counts(user) == await b.records.counts(user)
    assert await a.records.all_relations(user) == await b.records.all_relations(user)
    assert await a.records.preferences(user) == await b.records.preferences(user)
    ids = await a.records.ids(user)
    assert ids == await b.records.ids(user)
    for kind in Kind:
        wanted = sorted(i for i, k in ids.items() if k == kind.value)
        assert await a.records.get_many(user, kind, wanted) == await b.records.get_many(user, kind, wanted)


async def test_an_embedded_export_rebuilds_the_user_in_services_and_in_another_file(
    real_embedder, postgres_dsn, stack_manager, tmp_path: Path
):
    stack = stack_manager.need("neo4j", "weaviate")
    migrate(postgres_dsn)
    services_settings = make_services_settings(stack, postgres_dsn, tmp_path / "s.db", "HRTExport")
    talker = "conv-" + uuid.uuid4().hex[:8]
    users = ["u-maya", "u-tom", "u-sara", talker]
    source = await HRTService(Settings(db_path=tmp_path / "source.db"), embedder=real_embedder).start()
    copy = await HRTService(Settings(db_path=tmp_path / "copy.db"), embedder=real_embedder).start()
    services = await HRTService(services_settings, embedder=real_embedder).start()
    try:
        for u in users:
            await services.graph.delete_user(u)
        await source.ingest(parse_jsonl(sample_data_path().read_text().splitlines()))
        for c in calls(user=talker):
            await source.add_messages(c)
        exports = {u: await export_bytes(source, u) for u in users}
        for u in users:
            assert exports[u] == await export_bytes(source, u)  # deterministic
        supersedes = [json.loads(x) for x in exports["u-tom"].splitlines() if b'"supersedes"' in x]
        assert [r["muid"] for r in supersedes] == ["tom-mu-048"]  # it sorts before what it supersedes
        for u in users:
            lines = exports[u].decode().splitlines()
            for i in range(0, len(lines), 97):  # consecutive batches, cut anywhere
                await services.ingest(parse_jsonl(lines[i : i + 97]))
            await copy.ingest(parse_jsonl(lines))
        assert services.projector is not None and (await services.projector.drain()).ok
        for u in users:
            await same_records(source, copy, u)
            await same_records(source, services, u)
            # the imported users export the same bytes, from either deployment
            assert await export_bytes(copy, u) == exports[u]
            assert await export_bytes(services, u) == exports[u], u
        # an imported user's conversation statistics start empty (docs/api.md, "Export and import")
        assert await source.records.state_scan(talker, "term", "") != {}
        assert await copy.records.state_scan(talker, "term", "") == {}
        assert await services.records.state_scan(talker, "term", "") == {}

        # the congruence test's requests, within its tolerance: same top unit, at most one of the five
        # swapped, shared scores within 0.08
        worst = 0.0
        for user, phrases in [*CONGRUENCE_CASES, (talker, ["pottery class at Clayworks"])]:
            request = RetrieveRequest(user_id=user, key_phrases=phrases, as_of=AS_OF)
            a, b, s = (await source.retrieve(request), await copy.retrieve(request), await services.retrieve(request))
            assert a.canonical_json() == b.canonical_json(), phrases  # the same deployment: byte-identical
            assert not s.retrieval_metadata.degraded
            ids_a = [m.muid for m in a.retrieved_memory_units]
            ids_s = [m.muid for m in s.retrieved_memory_units]
            assert top_alike(a.retrieved_memory_units, s.retrieved_memory_units, 0.08), (phrases, ids_a, ids_s)
            assert len(set(ids_a) & set(ids_s)) >= len(ids_a) - 1, (phrases, ids_a, ids_s)
            scores = {m.muid: m.final_retrieval_score for m in s.retrieved_memory_units}
            for m in a.retrieved_memory_units:
                if m.muid in scores:
                    worst = max(worst, abs(m.final_retrieval_score - scores[m.muid]))
        # the same facts returned and set aside as superseded: SUPERSEDES came through
        for user, phrases, extra, present, absent in CASES:
            body = {"user_id": user, "key_phrases": phrases, "as_of": AS_OF, "limits": LIMITS, **extra}
            request = RetrieveRequest.model_validate(body)
            a, b, s = (await source.retrieve(request), await copy.retrieve(request), await services.retrieve(request))
            assert a.canonical_json() == b.canonical_json(), phrases
            for doc in (a, s):
                returned = {m.muid for m in doc.retrieved_memory_units} | {x.id for x in doc.retrieved_artifacts}
                assert present <= returned and not absent & returned, (phrases, extra, returned)
        print(f"export round trip: largest score gap embedded vs services {worst:.4f}")
        assert worst <= 0.08
    finally:
        await services.close()
        await copy.close()
        await source.close()


def test_the_route_between_two_servers(tmp_path: Path):
    a = start_hrt_server(tmp_path / "a.db", tmp_path / "a.log")
    b = start_hrt_server(tmp_path / "b.db", tmp_path / "b.log")
    try:
        with a.client(timeout=120) as ca, b.client(timeout=120) as cb:
            assert ca.post(
                "/v1/ingest",
                content=sample_data_path().read_bytes(),
                headers={"content-type": "application/x-ndjson"},
            ).is_success
            keys = {}
            for name, scopes, users in [("tom-export", ["export"], ["u-tom"]), ("maya-read", ["retrieve"], ["u-maya"])]:
                made = ca.post("/v1/keys", json={"name": name, "scopes": scopes, "users": users})
                assert made.status_code == 201, made.text
                keys[name] = {"authorization": f"Bearer {made.json()['key']}"}
            url = f"{a.base_url}/v1/users/u-maya/export"
            assert httpx.get(url).status_code == 401
            assert httpx.get(url, headers=keys["maya-read"]).status_code == 403  # no export scope
            other = httpx.get(url, headers=keys["tom-export"])
            absent = httpx.get(f"{a.base_url}/v1/users/nobody/export", headers=keys["tom-export"])
            assert other.status_code == absent.status_code == 403  # the same whether the user exists
            assert other.json()["error"]["field"] == absent.json()["error"]["field"] == "user_id"
            assert ca.get("/v1/users/nobody/export").status_code == 404
            with ca.stream("GET", "/v1/users/u-maya/export") as streamed:
                assert streamed.status_code == 200
                assert streamed.headers["content-type"] == "application/x-ndjson"
                assert streamed.headers.get("transfer-encoding") == "chunked"  # streamed, not sized first
                first = b"".join(streamed.iter_bytes())
            assert ca.get("/v1/users/u-maya/export").content == first  # byte-identical again
            tom = httpx.get(f"{a.base_url}/v1/users/u-tom/export", headers=keys["tom-export"])
            assert tom.status_code == 200 and tom.content.count(b"\n") > 300
            for export in (first, tom.content):
                written = cb.post("/v1/ingest", content=export, headers={"content-type": "application/x-ndjson"})
                assert written.status_code == 200, written.text
            assert cb.get("/v1/users/u-maya/export").content == first
            assert cb.get("/v1/users/u-tom/export").content == tom.content
            assert cb.get("/v1/users/u-maya/stats").json() == ca.get("/v1/users/u-maya/stats").json()
            assert cb.get("/v1/users/u-sara/export").status_code == 404  # only what was imported
    finally:
        a.stop()
        b.stop()
    audit = [json.loads(x) for x in (tmp_path / "a.log").read_text().splitlines() if x.startswith('{"event":"export"')]
    done = [x for x in audit if x["status"] == 200]
    assert [(x["users"], x["records"], x["complete"]) for x in done] == [
        (["u-maya"], first.count(b"\n"), True),
        (["u-maya"], first.count(b"\n"), True),
        (["u-tom"], tom.content.count(b"\n"), True),
    ]
    assert sorted(x["status"] for x in audit if x["status"] != 200) == [401, 403, 403, 403, 404]


def test_hrt_export_then_hrt_ingest_with_a_progress_bar(tmp_path: Path):
    """The CLI in process on the configured store: ``hrt ingest`` prints its summary alone on
    stdout, with a bar on stderr only when asked (not a terminal here); ``hrt export`` the lines."""

    def hrt(*argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "hrt.cli", *argv], capture_output=True, timeout=600, check=True)

    quiet = hrt("ingest", "--db", str(tmp_path / "a.db"), str(sample_data_path()))
    assert json.loads(quiet.stdout) == {"upserted": 1051, "deleted": 0} and b"ingest sample_graph" not in quiet.stderr
    out = tmp_path / "sara.ndjson"
    hrt("export", "--db", str(tmp_path / "a.db"), "--user", "u-sara", "--out", str(out))
    shown = hrt("ingest", "--db", str(tmp_path / "b.db"), str(out), "--progress")
    assert json.loads(shown.stdout) == {"upserted": out.read_bytes().count(b"\n"), "deleted": 0}
    assert b"ingest sara.ndjson" in shown.stderr and b"100%" in shown.stderr
    again = hrt("export", "--db", str(tmp_path / "b.db"), "--user", "u-sara", "--progress")
    assert again.stdout == out.read_bytes() and b"export u-sara" in again.stderr
