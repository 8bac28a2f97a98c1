"""Who is calling: the :class:`Principal` a key stands for and the tenant whose shares it draws
on, and the :class:`KeyRing`, the keys a server knows, read from its record store, refreshed, and
checked against the keys read last while that store is down."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from hrt.auth.keys import (
    ALL_USERS_TENANT,
    FAILED_MEMORY,
    MAX_LINEAGE,
    SCOPES,
    KeyRecord,
    KeyStore,
    hash_token,
    legacy_hash,
    lineage_status,
    token_key_id,
)
from hrt.errors import Forbidden, StoreDown, Unauthenticated

log = logging.getLogger("hrt.auth")


def users_tenant(users: Iterable[str] | None) -> str:
    """The tenant of a set of users: its digest (``*``: every user)."""
    if users is None:
        return ALL_USERS_TENANT
    return "users:" + hashlib.sha256("\x1f".join(sorted(users)).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Principal:
    """The key a request was made with, as far as authorisation needs it."""

    name: str
    key_id: str
    scopes: frozenset[str]
    users: frozenset[str] | None  # None: every user
    rate_limit: float | None = None
    max_concurrency: int | None = None
    expires_at: float | None = None
    # whose share of the server's bounded resources this key draws on (:func:`tenant_of`); by
    # default that of its own users
    tenant: str = ""

    def __post_init__(self) -> None:
        if not self.tenant:
            object.__setattr__(self, "tenant", users_tenant(self.users))

    def can(self, scope: str) -> bool:
        return scope in self.scopes

    def require_scope(self, scope: str) -> None:
        if scope not in self.scopes:
            raise Forbidden(f"this API key lacks the {scope!r} scope", reason="scope")

    def require_users(self, user_ids: Iterable[str]) -> None:
        """Forbidden unless the key may act for every one of ``user_ids``. The answer never
        depends on whether a user exists, so a 403 tells nothing about who is stored."""
        if self.users is None:
            return
        outside = sorted(set(user_ids) - self.users)
        if outside:
            raise Forbidden(f"this API key may not act for user {outside[0]!r}", reason="user", field="user_id")


# When HRT_AUTH=off (loopback only): every scope, every user.
UNAUTHENTICATED_DEV = Principal(name="auth-off", key_id="-", scopes=frozenset(SCOPES), users=None)


def tenant_of(key: KeyRecord, by_id: Mapping[str, KeyRecord]) -> str:
    """The tenant a key belongs to: the users of the topmost key of its line that is bound to
    users (``*`` for a key of every user). A key made over HTTP acts for a subset of its maker's
    users, so a child key (or a grandchild, or a sibling) of a user-bound key draws on that key's
    shares, never on new ones; an every-user key (an operator's, a platform's admin key) that makes
    a key for some users makes a tenant of them, not one tenant of all its keys. Keys for the same
    users share one tenant, whoever made them."""
    tenant = key
    ancestor = key
    for _ in range(MAX_LINEAGE):
        parent = by_id.get(ancestor.parent) if ancestor.parent is not None else None
        if parent is None:
            break
        ancestor = parent
        if ancestor.users is not None:
            tenant = ancestor
    return users_tenant(tenant.users)


def principal_of(key: KeyRecord, tenant: str | None = None) -> Principal:
    return Principal(
        name=key.name,
        key_id=key.key_id,
        scopes=frozenset(key.scopes),
        users=frozenset(key.users) if key.users is not None else None,
        rate_limit=key.rate_limit,
        max_concurrency=key.max_concurrency,
        expires_at=key.expires_at,
        tenant=tenant or "",
    )


@dataclass
class KeyRing:
    """The keys a server knows, read from its record store and refreshed every ``refresh_s``."""

    store: KeyStore
    refresh_s: float = 1.0
    outage_grace_s: float = 60.0
    clock: Callable[[], float] = time.time
    _keys: dict[str, KeyRecord] = field(default_factory=dict)
    _loaded_at: float = -math.inf
    _failed: OrderedDict[bytes, None] = field(default_factory=OrderedDict)  # wrong tokens of scrypt keys
    _used: dict[str, float] = field(default_factory=dict)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _scrypt: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    _touching: asyncio.Future[None] | None = None  # the last-use write in flight
    _outage: StoreDown | None = None  # the keys could not be read again: they are the last read

    async def refresh(self) -> None:
        """Read every key again, and write the last-use times gathered since the last refresh
        beside it: the request that finds the ring stale waits for the read only, not for a
        write transaction (a commit of the embedded store, once a second)."""
        used, self._used = self._used, {}
        if used and (self._touching is None or self._touching.done()):
            self._touching = asyncio.ensure_future(self._touch(used))
        elif used:  # the previous write is still running: these go with the next one
            self._merge_used(used)
        keys = await self.store.keys()
        self._keys = {k.key_id: k for k in keys}
        self._loaded_at = time.monotonic()
        self._outage = None

    async def _touch(self, used: dict[str, float]) -> None:
        try:
            await self.store.touch_keys(used)
        except StoreDown:  # its circuit logged the outage: keep them for the next round
            self._merge_used(used)
        except Exception as exc:  # last use is bookkeeping: keep it for the next round
            log.warning("recording the keys' last use failed: %s", exc)
            self._merge_used(used)

    def _merge_used(self, used: Mapping[str, float]) -> None:
        for k, v in used.items():
            self._used[k] = max(v, self._used.get(k, v))

    async def _fresh(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._loaded_at < self.refresh_s:
            return
        async with self._lock:
            if time.monotonic() - self._loaded_at >= (0.0 if force else self.refresh_s):
                try:
                    await self.refresh()
                except StoreDown as exc:
                    # the record store's circuit is open: the keys read last, within the grace
                    self._outage = exc
                    if force or time.monotonic() - self._loaded_at > self.outage_grace_s:
                        raise

    def forget(self, key_id: str) -> None:
        """Read the keys again at the next request (a key created or revoked through this server)."""
        self._keys.pop(key_id, None)
        self._loaded_at = -math.inf

    def active_count(self) -> int:
        now = self.clock()
        return sum(1 for k in self._keys.values() if lineage_status(k, self._keys, now) == "active")

    async def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an ``Authorization: Bearer <key>`` header, or :class:`Unauthenticated`."""
        if not authorization:
            raise Unauthenticated("missing API key: send 'Authorization: Bearer <key>'", reason="missing")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("the Authorization header must be 'Bearer <key>'", reason="malformed")
        key_id = token_key_id(token)
        if key_id is None:
            raise Unauthenticated("malformed API key (HRT keys look like hrt_<id>_<secret>)", reason="malformed")
        await self._fresh()
        key = self._keys.get(key_id)
        if key is None:
            # created a moment ago by `hrt keys create` or another server: look once more, at most
            # once per 0.2 s whatever a client sends
            if time.monotonic() - self._loaded_at >= 0.2:
                await self._fresh(force=True)
                key = self._keys.get(key_id)
            if key is None and self._outage is not None:
                raise self._outage.with_traceback(None)  # perhaps made since the keys were read: unknown, not refused
            if key is None:
                raise Unauthenticated("unknown API key")
        digest = hash_token(token)
        if key.salt:
            key = await self._verify_scrypt(key, token, digest)
        elif not hmac.compare_digest(digest, key.secret_hash):
            raise Unauthenticated("unknown API key")
        # only the holder of the secret learns that the key (or one above it) was revoked or expired
        now = self.clock()
        status = lineage_status(key, self._keys, now)
        if status == "revoked":
            raise Unauthenticated(f"this API key ({key.name}) was revoked", reason="revoked")
        if status == "expired":
            raise Unauthenticated(f"this API key ({key.name}) has expired", reason="expired")
        self._used[key_id] = now
        return principal_of(key, tenant_of(key, self._keys))

    async def _verify_scrypt(self, key: KeyRecord, token: str, digest: bytes) -> KeyRecord:
        """A key stored by an older version: scrypt once (one at a time, off the event loop), then
        its SHA-256 replaces the scrypt hash in the store, so its next request costs microseconds."""
        if digest in self._failed:
            raise Unauthenticated("unknown API key")
        async with self._scrypt:
            current = self._keys.get(key.key_id, key)
            if not current.salt:  # re-stored while this request waited
                if hmac.compare_digest(digest, current.secret_hash):
                    return current
                raise Unauthenticated("unknown API key")
            computed = await asyncio.to_thread(legacy_hash, token, key.salt)
            if not hmac.compare_digest(computed, key.secret_hash):
                self._failed[digest] = None
                while len(self._failed) > FAILED_MEMORY:
                    self._failed.popitem(last=False)
                raise Unauthenticated("unknown API key")
            try:
                await self.store.rehash_key(key.key_id, key.secret_hash, digest)
            except Exception as exc:  # the key works; re-storing it is tried again after a restart
                log.warning("re-storing key %s with SHA-256 failed: %s", key.key_id, exc)
            rehashed = replace(key, secret_hash=digest, salt=b"")
            self._keys[key.key_id] = rehashed
            return rehashed

    async def flush(self) -> None:
        """Write pending last-use times (at shutdown): after the write in flight, if any."""
        if self._touching is not None:
            await self._touching
        used, self._used = self._used, {}
        if used:
            await self.store.touch_keys(used)
