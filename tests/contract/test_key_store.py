"""The KeyStore port (API keys in the record store) on both record stores: the embedded SQLite
file and PostgreSQL (a real server, migration 0002)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from hrt.auth import SCOPES, KeyRing, KeyStore, new_key
from hrt.config import Settings
from hrt.errors import Conflict, StoreError
from hrt.stores.factory import open_record_store

NOW = 1_764_000_000.0


@pytest.fixture(params=["embedded", pytest.param("postgres", marks=pytest.mark.integration)])
async def keys(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KeyStore]:
    settings = Settings(db_path=tmp_path / "k.db")
    if request.param == "postgres":
        from hrt.stores.postgres.migrate import migrate

        dsn = request.getfixturevalue("postgres_dsn")
        migrate(dsn)
        settings = settings.model_copy(update={"record_store": "postgres", "postgres_dsn": dsn})
    async with open_record_store(settings) as store:
        yield store


async def test_a_key_round_trips_without_its_secret(keys: KeyStore) -> None:
    token, record = new_key(
        "agent", ["ingest", "retrieve"], ["u2", "u1"], expires_at=NOW + 3600, rate_limit=5.0, max_concurrency=2, now=NOW
    )
    await keys.create_key(record)
    [back] = await keys.keys()
    assert back == record  # scopes and users in canonical order, times to the second fraction
    assert back.scopes == ("retrieve", "ingest") and back.users == ("u1", "u2")
    everyone_token, everyone = new_key("ops", ["ops"], None, now=NOW + 1)
    await keys.create_key(everyone)
    assert [k.name for k in await keys.keys()] == ["agent", "ops"] and (await keys.keys())[1].users is None
    ring = KeyRing(keys, clock=lambda: NOW + 10)
    assert (await ring.authenticate(f"Bearer {token}")).users == frozenset({"u1", "u2"})
    assert (await ring.authenticate(f"Bearer {everyone_token}")).users is None


async def test_names_are_unique_among_live_keys_of_a_parent_and_revocation_frees_them(keys: KeyStore) -> None:
    _, first = new_key("agent", SCOPES, None, now=NOW)
    await keys.create_key(first)
    _, clash = new_key("agent", ["retrieve"], None, now=NOW)
    with pytest.raises(Conflict) as info:
        await keys.create_key(clash)
    assert info.value.field == "name"
    # another parent's key of that name is no clash: names say nothing across tenants (#30)
    _, child = new_key("agent", ["retrieve"], None, parent=first.key_id, now=NOW)
    await keys.create_key(child)
    revoked = await keys.revoke_key(first.key_id, NOW + 5)
    assert revoked is not None and revoked.key_id == first.key_id and revoked.revoked_at == NOW + 5
    assert await keys.revoke_key(first.key_id, NOW + 6) is None
    await keys.create_key(clash)
    assert sorted((k.key_id, k.revoked_at, k.parent) for k in await keys.keys()) == sorted(
        [(first.key_id, NOW + 5, None), (clash.key_id, None, None), (child.key_id, None, first.key_id)]
    )


async def test_a_scrypt_hash_is_replaced_only_while_it_is_still_stored(keys: KeyStore) -> None:
    token, record = new_key("old", ["retrieve"], None, now=NOW)
    old = replace(record, secret_hash=b"s" * 32, salt=b"t" * 16)  # as an older HRT stored it
    await keys.create_key(old)
    await keys.rehash_key(old.key_id, b"x" * 32, hashlib.sha256(token.encode()).digest())  # not its hash
    assert (await keys.keys())[0] == old
    await keys.rehash_key(old.key_id, old.secret_hash, record.secret_hash)
    assert (await keys.keys())[0] == record


async def test_last_use_only_moves_forward(keys: KeyStore) -> None:
    _, a = new_key("a", ["retrieve"], None, now=NOW)
    _, b = new_key("b", ["retrieve"], None, now=NOW)
    await keys.create_key(a)
    await keys.create_key(b)
    await keys.touch_keys({a.key_id: NOW + 100, b.key_id: NOW + 50, "000000000000": NOW})
    await keys.touch_keys({a.key_id: NOW + 60})
    used = {k.name: k.last_used_at for k in await keys.keys()}
    assert used == {"a": NOW + 100, "b": NOW + 50}


@pytest.mark.integration
async def test_an_unmigrated_postgres_says_to_migrate(postgres_dsn: str, tmp_path: Path) -> None:
    settings = Settings(db_path=tmp_path / "x.db", record_store="postgres", postgres_dsn=postgres_dsn)
    async with open_record_store(settings) as store:
        with pytest.raises(StoreError) as info:
            await store.keys()
    assert "hrt migrate" in info.value.message
