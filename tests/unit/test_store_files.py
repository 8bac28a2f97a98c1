"""What a local user or a copied .env can see (#30): the embedded store's files are private to
their owner, and .env.example's public placeholders never start a deployment."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from hrt.auth import new_key
from hrt.config import Settings
from hrt.stores.embedded.store import EmbeddedStore

ROOT = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_store_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "data" / "hrt.db"
    store = EmbeddedStore(db, dim=None)
    try:
        await store.records.create_key(new_key("k", ["retrieve"], None)[1])  # a write: -wal and -shm exist
        files = [db, db.with_name("hrt.db-wal"), db.with_name("hrt.db-shm")]
        assert [mode(f) for f in files] == [0o600] * 3
        assert mode(db.with_name("hrt.db.ann")) == 0o700 and mode(db.parent) == 0o700
    finally:
        store.close()


def test_an_existing_store_readable_by_others_is_warned_about(tmp_path: Path, caplog) -> None:
    db = tmp_path / "hrt.db"
    EmbeddedStore(db, dim=None).close()
    db.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="hrt.stores.embedded.store"):
        EmbeddedStore(db, dim=None).close()
    assert any(str(db) in r.getMessage() and "644" in r.getMessage() for r in caplog.records)
    caplog.clear()
    db.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="hrt.stores.embedded.store"):
        EmbeddedStore(db, dim=None).close()
    assert not [r for r in caplog.records if str(db) in r.getMessage()]


def example_settings() -> dict[str, dict[str, str]]:
    """Each secret of .env.example as the HRT setting it becomes (docker-compose.yml)."""
    values = dict(
        line.split("=", 1) for line in (ROOT / ".env.example").read_text().splitlines() if line and line[0] != "#"
    )
    return {
        "POSTGRES_HRT_PASSWORD": {
            "postgres_dsn": f"host=postgres user=hrt password={values['POSTGRES_HRT_PASSWORD']} dbname=hrt"
        },
        # the superuser's, as docker-compose.yml gave HRT before the hrt role
        "POSTGRES_PASSWORD": {"postgres_dsn": f"host=postgres user=postgres password={values['POSTGRES_PASSWORD']}"},
        "NEO4J_PASSWORD": {"neo4j_password": values["NEO4J_PASSWORD"]},
        "WEAVIATE_API_KEY": {"weaviate_api_key": values["WEAVIATE_API_KEY"]},
        "RERANKER_API_KEY": {"reranker_api_key": values["RERANKER_API_KEY"]},
    }


@pytest.mark.parametrize("variable", sorted(example_settings()))
def test_a_placeholder_of_env_example_is_refused_at_start(variable: str) -> None:
    setting = example_settings()[variable]
    with pytest.raises(ValidationError) as info:
        Settings(**setting)  # type: ignore[arg-type]
    assert "placeholder" in str(info.value) and next(iter(setting)) in str(info.value)
    Settings(**{k: "s3cret-of-its-own" for k in setting})  # type: ignore[arg-type]
