"""Backends describe themselves (:mod:`hrt.stores.backend`) and the composition root knows them
only through the registry (:mod:`hrt.stores.registry`): a new backend is one package and one
registration (``tests/fake_backend``), a name no backend has is refused naming the setting."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hrt.config import Settings
from hrt.config_docs import render_configuration
from hrt.contract import RetrieveRequest
from hrt.errors import StoreError
from hrt.ingest import parse_jsonl
from hrt.service import HRTService
from hrt.settings_check import setting_variables
from hrt.stores import registry
from hrt.stores.backend import ROLES, Backend
from hrt.stores.factory import migrate_records, open_stores
from tests import fake_backend
from tests.conftest import FIXED_NOW
from tests.helpers import HashingEmbedder, jsonl, small_graph

REQUEST = {"user_id": "u1", "as_of": "2025-08-01T00:00:00Z", "key_phrases": ["Project Phoenix timeline", "Postgres"]}


@pytest.fixture
def memory_backend() -> Iterator[None]:
    registry.register(fake_backend.BACKEND)  # the one registration
    fake_backend.CALLS.clear()
    yield
    registry.unregister(fake_backend.NAME)


async def answer(settings: Settings) -> tuple[str, HRTService]:
    svc = HRTService(settings, embedder=HashingEmbedder(), clock=lambda: FIXED_NOW)
    await svc.ingest(parse_jsonl(jsonl(small_graph("u1") + small_graph("u2", prefix="x"))))
    out = (await svc.retrieve(RetrieveRequest.model_validate(REQUEST))).canonical_json()
    return out, svc


async def test_a_new_backend_is_one_package_and_one_registration(memory_backend, tmp_path: Path) -> None:
    chosen = Settings(
        db_path=tmp_path / "unused.db", record_store="memory", graph_store="memory", vector_index="memory"
    )
    got, svc = await answer(chosen)
    try:
        assert svc.stores.deployment == "memory"
        assert svc.stores.in_process.caches_in_process and svc.stores.in_process.reads_from_any_thread
        # the retrieval read through the new backend's three ports
        calls = fake_backend.CALLS
        assert calls["vectors.search"] >= 1 and calls["graph.expand"] >= 1 and calls["records.get_many"] >= 1
    finally:
        await svc.close()
    assert not (tmp_path / "unused.db").exists()  # nothing on disk: the embedded file was never opened
    expected, base = await answer(Settings(db_path=tmp_path / "hrt.db"))
    await base.close()
    assert json.loads(got)["retrieval_metadata"]["deployment"] == "memory"
    assert got.replace('"deployment":"memory"', '"deployment":"embedded"') == expected  # the same answer
    assert migrate_records(chosen) == {"memory": {"schema_versions": "in memory: made at each start"}}
    assert "| `memory` |" in render_configuration()  # the reference lists it


def test_a_name_no_backend_has_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as refused:
        open_stores(Settings(db_path=tmp_path / "a.db", graph_store="neo4jj"), dim=8, model_id="")
    assert str(refused.value) == "HRT_GRAPH_STORE names no graph store HRT knows; one of: embedded, neo4j"
    with pytest.raises(StoreError, match="HRT_RECORD_STORE names no record store"):
        open_stores(Settings(db_path=tmp_path / "a.db", record_store="neo4j"), dim=8, model_id="")
    assert not (tmp_path / "a.db").exists()


def test_the_embedded_record_store_projects_only_into_its_own_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as refused:
        open_stores(Settings(db_path=tmp_path / "b.db", graph_store="neo4j", neo4j_uri="bolt://x"), dim=8, model_id="")
    assert str(refused.value) == (
        "the embedded record store projects only into the embedded graph and vector stores; "
        "set HRT_GRAPH_STORE and HRT_VECTOR_INDEX to embedded, or choose another HRT_RECORD_STORE"
    )


def test_a_backend_gives_an_opener_for_each_of_its_roles_and_a_name_of_its_own(memory_backend) -> None:
    with pytest.raises(ValueError, match="an opener is given exactly for each of its roles"):
        Backend(name="half", title="half", summary="", roles=frozenset({"graph"}))
    with pytest.raises(ValueError, match="opens its key store alone"):
        Backend(name="nokeys", title="x", summary="", roles=frozenset({"records"}), open_records=lambda o: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(
            Backend(name="memory", title="x", summary="", roles=frozenset({"graph"}), open_graph=lambda o: None)
        )  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="built in"):
        registry.unregister("embedded")
    assert [registry.names(role) for role in ROLES] == [
        ["embedded", "postgres", "memory"],
        ["embedded", "neo4j", "memory"],
        ["embedded", "weaviate", "memory"],
    ]


def test_every_backend_reads_settings_that_exist() -> None:
    variables = setting_variables()
    declared = [v for b in registry.BUILT_IN for v in b.variables]
    assert len(declared) > 10
    assert sorted(set(declared) - variables) == []


def test_a_backend_s_driver_is_imported_only_when_it_is_chosen() -> None:
    """The registry lists every backend, yet an embedded deployment never imports the drivers of
    PostgreSQL, Neo4j or Weaviate (a second or more at every start)."""
    import subprocess
    import sys

    code = (
        "import sys, hrt.stores.factory as f, hrt.config as c, pathlib, tempfile\n"
        "with tempfile.TemporaryDirectory() as d:\n"
        "    f.open_stores(c.Settings(db_path=pathlib.Path(d) / 'h.db'), dim=8, model_id='').close()\n"
        "print(sorted(m for m in ('neo4j', 'weaviate', 'psycopg', 'psycopg_pool') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stderr


def test_the_dev_stack_points_each_role_at_the_backend_its_services_run() -> None:
    from hrt.devstack.stack import backend_choices

    assert backend_choices(("postgres", "weaviate")) == {
        "HRT_RECORD_STORE": "postgres",
        "HRT_GRAPH_STORE": "embedded",
        "HRT_VECTOR_INDEX": "weaviate",
    }
    assert backend_choices(("neo4j",)) == {}  # no record store in the stack: the embedded default
    served = Backend(
        name="other-graph",
        title="another graph",
        summary="",
        roles=frozenset({"graph"}),
        open_graph=lambda o: None,  # type: ignore[arg-type,return-value]
        dev_service="other-graph-server",
    )
    registry.register(served)
    try:
        assert backend_choices(("postgres", "other-graph-server"))["HRT_GRAPH_STORE"] == "other-graph"
    finally:
        registry.unregister("other-graph")
