"""API keys: tokens, their hashes, the key ring over a real SQLite key store, scopes and users, limits."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from hrt import auth
from hrt.auth import SCOPES, KeyLimiter, KeyRing, Principal, new_key, parse_expiry, token_key_id
from hrt.errors import Conflict, Forbidden, InvalidInput, RateLimited, Unauthenticated
from hrt.stores.embedded import EmbeddedStore

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
    assert record.secret_hash == auth.hash_token(token, record.salt) != hashlib.sha256(token.encode()).digest()
    assert token.encode() not in record.secret_hash and record.salt
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


async def test_the_ring_authenticates_only_the_exact_token(store, monkeypatch):
    token, record = new_key("agent", ["retrieve", "ingest"], ["u1", "u2"], now=NOW)
    await store.create_key(record)
    ring = KeyRing(store, clock=lambda: NOW + 10)
    calls = []
    real = auth.hash_token
    monkeypatch.setattr(auth, "hash_token", lambda t, s: calls.append(t) or real(t, s))
    p = await ring.authenticate(f"Bearer {token}")
    assert (p.name, p.scopes, p.users) == ("agent", frozenset({"retrieve", "ingest"}), frozenset({"u1", "u2"}))
    await ring.authenticate(f"bearer {token}")  # the scheme is case-insensitive
    assert len(calls) == 1  # scrypt once; then the token's SHA-256 in memory
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
    assert len(calls) == 1  # a wrong secret for a verified key costs no scrypt


async def test_a_wrong_secret_is_verified_once_then_remembered(store, monkeypatch):
    token, record = new_key("agent", ["retrieve"], None, now=NOW)
    await store.create_key(record)
    ring = KeyRing(store, clock=lambda: NOW)
    calls = []
    real = auth.hash_token
    monkeypatch.setattr(auth, "hash_token", lambda t, s: calls.append(t) or real(t, s))
    wrong = token[:-2] + "zz"
    for _ in range(3):
        with pytest.raises(Unauthenticated):
            await ring.authenticate(f"Bearer {wrong}")
    assert len(calls) == 1
    assert (await ring.authenticate(f"Bearer {token}")).name == "agent"


async def test_revoked_and_expired_keys_are_refused_with_their_reason(store):
    _, live_rec = new_key("live", ["retrieve"], None, now=NOW)
    gone, gone_rec = new_key("gone", ["retrieve"], None, now=NOW)
    old, old_rec = new_key("old", ["retrieve"], None, expires_at=NOW + 60, now=NOW)
    for r in (live_rec, gone_rec, old_rec):
        await store.create_key(r)
    assert (await store.revoke_key("gone", NOW + 1)).revoked_at == NOW + 1
    assert await store.revoke_key("gone", NOW + 2) is None  # already revoked
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
    await store.revoke_key("late", NOW)
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
