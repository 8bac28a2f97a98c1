"""API keys: tokens, their hashes, the key ring over a real SQLite key store, scopes and users, limits."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hrt import auth
from hrt.auth import SCOPES, KeyLimiter, KeyRing, Principal, new_key, parse_expiry, token_key_id
from hrt.errors import Conflict, Forbidden, InvalidInput, RateLimited, Unauthenticated
from hrt.stores.embedded.store import EmbeddedStore

NOW = 1_764_000_000.0  # 2025-11-24


@pytest.fixture
def store(tmp_path: Path):
    db = EmbeddedStore(tmp_path / "keys.db", dim=None)
    yield db.records
    db.close()


def test_a_token_is_long_random_recognisable_and_never_stored(tmp_path):
    token, record = new_key("agent", ["retrieve"], ["u1"], now=NOW)
    again, _ = new_key("agent", ["retrieve"], ["u1"], now=NOW)
    assert token.startswith("hrt_") and token != again
    assert token_key_id(token) == record.key_id and len(token) == len("hrt_") + 12 + 1 + 43
    # the SHA-256 of 256 random bits: no salt, no slow hash (nothing to guess; #30)
    assert record.secret_hash == hashlib.sha256(token.encode()).digest() and record.salt == b""
    assert token.encode() not in record.secret_hash
    assert token_key_id(token + "\n") is None and token_key_id("hrt_" + "x" * 56) is None


@pytest.mark.parametrize(
    ("name", "scopes", "users", "field"),
    [
        ("has space", ["retrieve"], None, "name"),
        ("ok", [], None, "scope"),
        ("ok", ["retrieve", "root"], None, "scope"),
        ("ok", ["ingest"], [], "user"),
        ("ok", ["ingest"], ["../etc"], "user"),
    ],
)
def test_a_bad_key_definition_names_its_field(name, scopes, users, field):
    with pytest.raises(InvalidInput) as info:
        new_key(name, scopes, users, now=NOW)
    assert info.value.field == field


def test_expiry_takes_durations_and_dates():
    assert parse_expiry("30d", NOW) == NOW + 30 * 86400
    assert parse_expiry("12h", NOW) == NOW + 12 * 3600
    assert parse_expiry("2026-01-01", NOW) == 1767225600.0
    assert parse_expiry("2026-01-01T01:00:00+01:00", NOW) == 1767225600.0
    for bad in ("tomorrow", "0d", "-3d", "30x"):
        with pytest.raises(InvalidInput):
            parse_expiry(bad, NOW)
    with pytest.raises(InvalidInput) as info:
        new_key("old", ["retrieve"], None, expires_at=NOW - 1, now=NOW)
    assert info.value.field == "expires"


async def test_the_ring_authenticates_only_the_exact_token(store):
    token, record = new_key("agent", ["retrieve", "ingest"], ["u1", "u2"], now=NOW)
    await store.create_key(record)
    ring = KeyRing(store, clock=lambda: NOW + 10)
    p = await ring.authenticate(f"Bearer {token}")
    assert (p.name, p.scopes, p.users) == ("agent", frozenset({"retrieve", "ingest"}), frozenset({"u1", "u2"}))
    await ring.authenticate(f"bearer {token}")  # the scheme is case-insensitive
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    for header, reason in [
        (None, "missing"),
        ("", "missing"),
        (f"Basic {token}", "malformed"),
        ("Bearer", "malformed"),
        ("Bearer sk-123", "malformed"),
        (f"Bearer {wrong}", "unknown"),
        (f"Bearer hrt_{'0' * 12}_{'A' * 43}", "unknown"),
    ]:
        with pytest.raises(Unauthenticated) as info:
            await ring.authenticate(header)
        assert info.value.reason == reason, header


async def test_revoked_and_expired_keys_are_refused_with_their_reason(store):
    _, live_rec = new_key("live", ["retrieve"], None, now=NOW)
    gone, gone_rec = new_key("gone", ["retrieve"], None, now=NOW)
    old, old_rec = new_key("old", ["retrieve"], None, expires_at=NOW + 60, now=NOW)
    for r in (live_rec, gone_rec, old_rec):
        await store.create_key(r)
    assert (await store.revoke_key(gone_rec.key_id, NOW + 1)).revoked_at == NOW + 1
    assert await store.revoke_key(gone_rec.key_id, NOW + 2) is None  # already revoked
    clock = [NOW + 30]
    ring = KeyRing(store, clock=lambda: clock[0])
    assert (await ring.authenticate(f"Bearer {old}")).name == "old"
    with pytest.raises(Unauthenticated) as info:
        await ring.authenticate(f"Bearer {gone}")
    assert info.value.reason == "revoked"
    clock[0] = NOW + 61
    with pytest.raises(Unauthenticated) as info:
        await ring.authenticate(f"Bearer {old}")
    assert info.value.reason == "expired"
    assert ring.active_count() == 1
    # a revoked key's name can be given again; an unrevoked one's cannot
    _, again = new_key("gone", ["retrieve"], None, now=NOW)
    await store.create_key(again)
    _, dup = new_key("live", ["retrieve"], None, now=NOW)
    with pytest.raises(Conflict):
        await store.create_key(dup)
    assert [(k.name, k.revoked_at is None) for k in await store.keys()] == [
        ("gone", True) if k.key_id == again.key_id else ("gone", False) for k in await store.keys() if k.name == "gone"
    ] + [("live", True), ("old", True)]


async def test_keys_made_or_revoked_elsewhere_take_effect_within_the_refresh(store):
    ring = KeyRing(store, refresh_s=0.0, clock=lambda: NOW)
    await ring.refresh()
    token, record = new_key("late", ["retrieve"], None, now=NOW)
    await store.create_key(record)  # as `hrt keys create` would, in another process
    assert (await ring.authenticate(f"Bearer {token}")).name == "late"
    await store.revoke_key(record.key_id, NOW)
    with pytest.raises(Unauthenticated) as info:
        await ring.authenticate(f"Bearer {token}")
    assert info.value.reason == "revoked"


async def test_last_use_is_written_on_refresh_and_never_goes_back(store):
    token, record = new_key("agent", ["retrieve"], None, now=NOW)
    await store.create_key(record)
    clock = [NOW + 100]
    ring = KeyRing(store, clock=lambda: clock[0])
    await ring.authenticate(f"Bearer {token}")
    await ring.flush()
    assert (await store.keys())[0].last_used_at == NOW + 100
    await store.touch_keys({record.key_id: NOW + 50})
    assert (await store.keys())[0].last_used_at == NOW + 100


def test_a_principal_acts_only_within_its_scopes_and_users():
    p = Principal("k", "id", frozenset({"retrieve"}), frozenset({"u1"}))
    p.require_scope("retrieve")
    p.require_users(["u1", "u1"])
    with pytest.raises(Forbidden) as scope:
        p.require_scope("ingest")
    with pytest.raises(Forbidden) as known:
        p.require_users(["u1", "u2"])
    with pytest.raises(Forbidden) as unknown:
        p.require_users(["nobody-at-all"])
    assert (scope.value.reason, known.value.reason, unknown.value.reason) == ("scope", "user", "user")
    assert known.value.field == unknown.value.field == "user_id"
    everyone = Principal("k", "id", frozenset(SCOPES), None)
    everyone.require_users(["anyone"])


def test_the_limiter_bounds_rate_and_concurrency_per_key():
    t = [0.0]
    limiter = KeyLimiter(rate=2.0, max_concurrency=3, clock=lambda: t[0])
    a = Principal("a", "ida", frozenset(SCOPES), None)
    b = Principal("b", "idb", frozenset(SCOPES), None)
    for _ in range(3):  # the bucket holds two seconds' worth
        limiter.acquire(a)
    with pytest.raises(RateLimited) as conc:
        limiter.acquire(a)
    assert conc.value.reason == "concurrency" and conc.value.retry_after_s == 1
    for _ in range(3):
        limiter.release(a)
    limiter.acquire(a)
    limiter.release(a)
    with pytest.raises(RateLimited) as rate:
        limiter.acquire(a)
    assert rate.value.reason == "rate" and rate.value.retry_after_s == 1
    limiter.acquire(b)  # another key has its own bucket
    t[0] = 0.5
    limiter.acquire(a)  # half a second refills one request at 2/s
    unlimited = Principal("c", "idc", frozenset(SCOPES), None, rate_limit=0, max_concurrency=0)
    for _ in range(100):
        limiter.acquire(unlimited)
    slow = Principal("d", "idd", frozenset(SCOPES), None, rate_limit=0.1)
    limiter.acquire(slow)
    with pytest.raises(RateLimited) as info:
        limiter.acquire(slow)
    assert info.value.retry_after_s == 10


def old_store_with_scrypt_key(path: Path, token: str, key_id: str) -> bytes:
    """A SQLite file as HRT wrote it before #30: schema steps 1 to 5, and a key row holding the
    scrypt hash of its token (N=2^14, r=8, p=1) with a 16-byte salt. Returns that hash."""
    import sqlite3

    from hrt.stores.embedded.schema import SCHEMA

    salt = b"0123456789abcdef"
    old_hash = hashlib.scrypt(token.encode(), salt=salt, n=2**14, r=8, p=1, maxmem=64 * 2**20, dklen=32)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    for version, sql in SCHEMA[:5]:
        db.executescript(sql)
        db.execute("INSERT INTO schema_migrations VALUES (?, datetime('now'))", (version,))
    db.execute(
        "INSERT INTO api_keys VALUES (?, 'old-agent', '[\"retrieve\"]', '[\"u1\"]', ?, ?, ?, NULL, NULL, NULL, "
        "NULL, NULL)",
        (key_id, old_hash, salt, NOW),
    )
    db.commit()
    db.close()
    return old_hash


async def test_a_key_stored_with_scrypt_works_once_then_is_stored_as_sha256(tmp_path):
    """Keys made before #30 keep working without being re-issued: the first request that proves the
    secret re-stores the key as the SHA-256 of its token; a wrong secret changes nothing."""
    key_id = "a1b2c3d4e5f6"
    token = f"hrt_{key_id}_{'Q' * 43}"
    old_hash = old_store_with_scrypt_key(tmp_path / "old.db", token, key_id)
    store = EmbeddedStore(tmp_path / "old.db", dim=None)  # the new code opens (and migrates) it
    try:
        ring = KeyRing(store.records, clock=lambda: NOW + 10)
        with pytest.raises(Unauthenticated):
            await ring.authenticate(f"Bearer hrt_{key_id}_{'R' * 43}")
        [untouched] = await store.records.keys()
        assert (untouched.secret_hash, untouched.describe(NOW)["hash"]) == (old_hash, "scrypt")
        p = await ring.authenticate(f"Bearer {token}")
        assert (p.name, p.users) == ("old-agent", frozenset({"u1"}))
        [stored] = await store.records.keys()
        assert stored.secret_hash == hashlib.sha256(token.encode()).digest() and stored.salt == b""
        assert stored.describe(NOW)["hash"] == "sha256"
        # a server started afterwards (a fresh ring) verifies it by its SHA-256 alone
        fresh = KeyRing(store.records, clock=lambda: NOW + 20)
        assert (await fresh.authenticate(f"Bearer {token}")).name == "old-agent"
        with pytest.raises(Unauthenticated):
            await fresh.authenticate(f"Bearer hrt_{key_id}_{'R' * 43}")
    finally:
        store.close()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"expires_at": NOW + auth.MAX_KEY_LIFETIME_S + 1}, "expires"),
        ({"expires_at": float("inf")}, "expires"),
        ({"rate_limit": 5e-324}, "rate_limit"),
        ({"rate_limit": 0.001}, "rate_limit"),
        ({"rate_limit": float("inf")}, "rate_limit"),
        ({"max_concurrency": 10**9}, "max_concurrency"),
        ({"max_concurrency": -1}, "max_concurrency"),
    ],
)
def test_a_key_beyond_the_bounds_is_refused_naming_its_field(kwargs, field):
    with pytest.raises(InvalidInput) as info:
        new_key("k", ["retrieve"], None, now=NOW, **kwargs)
    assert info.value.field == field


def test_expiries_far_away_parse_and_are_then_refused():
    for text in ("999999w", "9999-12-31T23:59:59-01:00", "9999-12-31"):
        with pytest.raises(InvalidInput) as info:
            new_key("k", ["retrieve"], None, expires_at=parse_expiry(text, NOW), now=NOW)
        assert info.value.field == "expires"
    new_key("k", ["retrieve"], None, expires_at=parse_expiry("520w", NOW), now=NOW)  # ten years less a bit


async def test_rows_from_before_the_bounds_are_listed_and_limited_without_errors(store):
    """A key row the old code could commit (expiry in year 21192, a rate of 5e-324) neither breaks
    listing nor the limiter."""
    token, record = new_key("odd", ["retrieve"], None, now=NOW)
    from dataclasses import replace

    await store.create_key(replace(record, expires_at=NOW + 600_000 * 7 * 86400 * 100, rate_limit=5e-324))
    [odd] = await store.keys()
    assert odd.describe(NOW)["expires_at"] == "9999-12-31T23:59:59Z"
    p = await KeyRing(store, clock=lambda: NOW).authenticate(f"Bearer {token}")
    limiter = KeyLimiter(rate=100.0, max_concurrency=0, clock=lambda: 0.0)
    limiter.acquire(p)
    with pytest.raises(RateLimited) as info:
        limiter.acquire(p)
    assert info.value.retry_after_s == 100  # held to the lowest rate there is, 0.01 per second


async def test_a_child_key_stops_with_any_key_above_it(store):
    _, parent = new_key("admin", ["admin", "retrieve"], ["u1"], now=NOW)
    child_token, child = new_key("reader", ["retrieve"], ["u1"], parent=parent.key_id, now=NOW)
    grand_token, grand = new_key("sub", ["retrieve"], ["u1"], parent=child.key_id, now=NOW)
    for r in (parent, child, grand):
        await store.create_key(r)
    ring = KeyRing(store, refresh_s=0.0, clock=lambda: NOW)
    assert (await ring.authenticate(f"Bearer {grand_token}")).name == "sub"
    await store.revoke_key(parent.key_id, NOW)
    for token in (child_token, grand_token):
        with pytest.raises(Unauthenticated) as info:
            await ring.authenticate(f"Bearer {token}")
        assert info.value.reason == "revoked"
    by_id = {k.key_id: k for k in await store.keys()}
    assert [auth.lineage_status(k, by_id, NOW) for k in by_id.values()] == ["revoked"] * 3


async def test_names_are_unique_per_parent_not_across_tenants(store):
    _, mine = new_key("tom-rw", ["retrieve"], ["u1"], parent="aaaaaaaaaaaa", now=NOW)
    _, theirs = new_key("tom-rw", ["retrieve"], ["u2"], parent="bbbbbbbbbbbb", now=NOW)
    _, operators = new_key("tom-rw", ["retrieve"], ["u2"], now=NOW)
    for r in (mine, theirs, operators):
        await store.create_key(r)
    _, again = new_key("tom-rw", ["retrieve"], ["u1"], parent="aaaaaaaaaaaa", now=NOW)
    with pytest.raises(Conflict):
        await store.create_key(again)
    assert {k.key_id for k in auth.live_keys_named(await store.keys(), "tom-rw")} == {
        mine.key_id,
        theirs.key_id,
        operators.key_id,
    }


async def test_a_refresh_does_not_wait_for_the_last_use_write(store, monkeypatch):
    """The request that finds the ring stale reads the keys; the last-use write runs beside it
    and a slow one is awaited only by flush (at shutdown)."""
    import asyncio

    token, record = new_key("agent", ["retrieve"], None, now=NOW)
    await store.create_key(record)
    ring = KeyRing(store, refresh_s=0.0, clock=lambda: NOW + 100)
    await ring.authenticate(f"Bearer {token}")  # first refresh, then the use is noted
    release = asyncio.Event()
    real_touch = store.touch_keys

    async def slow_touch(used):
        await release.wait()
        await real_touch(used)

    monkeypatch.setattr(store, "touch_keys", slow_touch)
    await asyncio.wait_for(ring.authenticate(f"Bearer {token}"), timeout=5)  # refreshes: not blocked
    assert (await store.keys())[0].last_used_at is None  # the write is still waiting
    release.set()
    await ring.flush()
    assert (await store.keys())[0].last_used_at == NOW + 100
