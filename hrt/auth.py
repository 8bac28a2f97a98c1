"""API keys: who may call HRT, for which users, with which scopes.

A key is a random token ``hrt_<id>_<secret>``: ``hrt_`` makes it recognisable (secret scanners, logs
to scrub), ``<id>`` (12 hex digits) finds its record without a scan, ``<secret>`` is 32 random bytes
(base64url). The record store keeps only the SHA-256 of the token, compared in constant time: with
256 random bits no one chose, a slow hash adds nothing but a CPU lever for whoever knows a key id
(ids are not secret). Keys stored by older versions carry an scrypt hash and its salt: the first
request that proves such a key's secret replaces its hash with the SHA-256 (docs/security.md).

A key made over HTTP (``POST /v1/keys``) records the admin key that made it (``parent``): it never
expires after it, is never less limited, and stops working when any key above it is revoked or
expires. Names are unique among the live keys of one parent (the operator's ``hrt keys`` is one),
so a name says nothing about other tenants' keys; logs and metrics carry the key id.

Scopes (each route declares its own, ``dependencies=[needs(scope)]`` in ``hrt/api/routes/``;
``hrt.api.access.route_rules`` reads them back):

    retrieve   POST /v1/retrieve, GET /v1/users/{u}/stats, GET /v1/users/{u}/entities[/{kind}/{id}]
    ingest     POST /v1/ingest, POST /v1/conversations, DELETE /v1/users/{u}/entities/{kind}/{id},
               POST /v1/users/{u}/concepts/{id}/merge
    admin      DELETE /v1/users/{u}, the /v1/keys routes
    ops        GET /readyz, GET /metrics
    export     GET /v1/users/{u}/export (everything of a user, in bulk: a right of access, per user)
    read       whole records in bulk where a retrieve key gets ids and titles (the records of
               GET /v1/users/{u}/entities pages); export implies it. Never granted by default.

A key acts for the users it lists, or for every user (``--all-users``). ``/healthz`` needs no key.

Keys are read from the record store into a :class:`KeyRing` and refreshed every
``HRT_AUTH_REFRESH_S`` seconds, so a key created or revoked by ``hrt keys`` (or by another server)
takes effect within that time in every running server, at once in the one that did it. While the
record store's circuit is open (PostgreSQL known down, :mod:`hrt.stores.circuit`), a key is checked
against the keys read last, for at most ``HRT_AUTH_OUTAGE_GRACE_S`` after that read: so ``/readyz``
and ``/metrics`` answer during an outage, and a key revoked elsewhere just before it is refused at
the latest that long after its revocation (no key can be revoked while the outage lasts: revoking
writes to the record store). A key not among them, or after the grace, gets 503, never 401.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import logging
import math
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal, Protocol

from hrt.errors import Forbidden, InvalidInput, RateLimited, StoreDown, Unauthenticated

log = logging.getLogger(__name__)

Scope = Literal["retrieve", "ingest", "admin", "ops", "export", "read"]
SCOPES: tuple[Scope, ...] = ("retrieve", "ingest", "admin", "ops", "export", "read")
TOKEN_PREFIX = "hrt_"
_TOKEN = re.compile(r"hrt_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}")
# the hash of keys stored before SHA-256 (salt non-empty): verified once, then re-stored
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
# failed scrypt verifications remembered, so a client retrying one wrong token costs no more scrypt
FAILED_MEMORY = 4096
# bounds of a key's definition, whoever makes it: beyond them a value breaks dates or arithmetic
MAX_KEY_LIFETIME_S = 10 * 365 * 86400  # ten years
MIN_RATE_LIMIT, MAX_RATE_LIMIT = 0.01, 1_000_000.0  # requests per second (0: none)
MAX_KEY_CONCURRENCY = 100_000
# a key made by a key made by ... : deeper than this is refused at use
MAX_LINEAGE = 32
KeyStatus = Literal["active", "expired", "revoked"]
# the tenant of keys for every user (and of HRT_AUTH=off): one tenant, whatever key
ALL_USERS_TENANT = "*"


def hash_token(token: str) -> bytes:
    """What the record store keeps of a token: its SHA-256."""
    return hashlib.sha256(token.encode()).digest()


def legacy_hash(token: str, salt: bytes) -> bytes:
    """The scrypt hash older versions stored (with a per-key salt)."""
    return hashlib.scrypt(token.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=64 * 2**20, dklen=32)


def token_key_id(token: str) -> str | None:
    """The key id inside a well-formed token, else None."""
    m = _TOKEN.fullmatch(token)
    return m.group(1) if m else None


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One API key as the record store holds it (times are epoch seconds)."""

    key_id: str
    name: str
    scopes: tuple[Scope, ...]
    users: tuple[str, ...] | None  # None: every user
    secret_hash: bytes  # SHA-256 of the token; scrypt when ``salt`` is not empty (older versions)
    salt: bytes
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    last_used_at: float | None = None
    rate_limit: float | None = None  # requests per second; None: the server's default; 0: none
    max_concurrency: int | None = None  # requests in flight; None: the server's default; 0: none
    parent: str | None = None  # the key id of the admin key that made it over HTTP; None: the operator

    def columns(self) -> tuple[object, ...]:
        """The record as a store's row, in field order (scopes and users as lists)."""
        return (
            self.key_id,
            self.name,
            list(self.scopes),
            list(self.users) if self.users is not None else None,
            *(getattr(self, f) for f in _ROW_TAIL),
        )

    def status(self, now: float) -> KeyStatus:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"

    def describe(self, now: float, status: KeyStatus | None = None) -> dict[str, object]:
        """What ``hrt keys list`` shows: everything but the hash and its salt. ``status``: the key's
        as its lineage decides it (:func:`lineage_status`), when known."""
        return {
            "name": self.name,
            "key_id": self.key_id,
            "status": status or self.status(now),
            "scopes": list(self.scopes),
            "users": list(self.users) if self.users is not None else "*",
            "created_at": _iso(self.created_at),
            "expires_at": _iso(self.expires_at),
            "revoked_at": _iso(self.revoked_at),
            "last_used_at": _iso(self.last_used_at),
            "rate_limit": self.rate_limit,
            "max_concurrency": self.max_concurrency,
            "parent": self.parent,
            "hash": "scrypt" if self.salt else "sha256",
        }


def lineage_status(key: KeyRecord, by_id: Mapping[str, KeyRecord], now: float) -> KeyStatus:
    """A key's status with those of the keys above it: revoked or expired when one of them is (a
    parent that is gone, or a lineage deeper than ``MAX_LINEAGE``, counts as revoked)."""
    current: KeyRecord | None = key
    for _ in range(MAX_LINEAGE):
        if current is None:
            return "revoked"
        status = current.status(now)
        if status != "active" or current.parent is None:
            return status
        current = by_id.get(current.parent)
    return "revoked"


_ROW_TAIL = (
    "secret_hash",
    "salt",
    "created_at",
    "expires_at",
    "revoked_at",
    "last_used_at",
    "rate_limit",
    "max_concurrency",
    "parent",
)


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):  # a row from before the bounds: listed, not a crash
        return "9999-12-31T23:59:59Z"


class KeyStore(Protocol):
    """Where keys live: the record store (a table in the embedded SQLite file, or PostgreSQL's
    ``hrt_api_keys``). Keys belong to the deployment, not to a user."""

    async def create_key(self, key: KeyRecord) -> None:
        """Store a new key; :class:`hrt.errors.Conflict` when an unrevoked key of the same parent
        has its name."""
        ...

    async def keys(self) -> list[KeyRecord]:
        """Every key, revoked and expired ones included, by creation time then name."""
        ...

    async def revoke_key(self, key_id: str, at: float) -> KeyRecord | None:
        """Revoke that key unless it is revoked already; None when there is no such live key."""
        ...

    async def rehash_key(self, key_id: str, old_hash: bytes, new_hash: bytes) -> None:
        """Store ``new_hash`` (a SHA-256) with an empty salt for a key still stored with ``old_hash``."""
        ...

    async def touch_keys(self, used: Mapping[str, float]) -> None:
        """Record the last use of keys (key id -> epoch seconds); never moves a time back."""
        ...


def validate_new_key(
    name: str, scopes: Sequence[str], users: Sequence[str] | None, expires_at: float | None, now: float
) -> tuple[tuple[Scope, ...], tuple[str, ...] | None]:
    """Check a key's definition; returns its scopes and users in canonical order."""
    from hrt.records import valid_id

    if not KEY_NAME.fullmatch(name):
        raise InvalidInput("not a key name: 1-64 of letters, digits, _ . : @ -", field="name")
    if not scopes:
        raise InvalidInput(f"give at least one scope of {', '.join(SCOPES)}", field="scope")
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise InvalidInput(f"an unknown scope; one of {', '.join(SCOPES)}", field="scope")
    if users is not None:
        if not users:
            raise InvalidInput("give the users the key acts for, or all users", field="user")
        bad = [u for u in users if not valid_id(u)]
        if bad:
            raise InvalidInput(f"user {users.index(bad[0]) + 1} is not a valid user id", field="user")
    check_limits(expires_at, None, None, now)
    ordered = tuple(s for s in SCOPES if s in set(scopes))
    return ordered, tuple(sorted(set(users))) if users is not None else None


def check_limits(expires_at: float | None, rate_limit: float | None, max_concurrency: int | None, now: float) -> None:
    """The bounds every key's expiry and limits stay within, whoever makes the key."""
    if expires_at is not None:
        if not math.isfinite(expires_at) or expires_at <= now:
            raise InvalidInput("the expiry is in the past", field="expires")
        if expires_at - now > MAX_KEY_LIFETIME_S:
            raise InvalidInput("a key expires at most ten years from now", field="expires")
    if rate_limit is not None and not (
        rate_limit == 0 or (math.isfinite(rate_limit) and MIN_RATE_LIMIT <= rate_limit <= MAX_RATE_LIMIT)
    ):
        raise InvalidInput(
            f"the rate limit is 0 (none) or {MIN_RATE_LIMIT:g} to {MAX_RATE_LIMIT:g} requests per second",
            field="rate_limit",
        )
    if max_concurrency is not None and not 0 <= max_concurrency <= MAX_KEY_CONCURRENCY:
        raise InvalidInput(f"the concurrency limit is 0 (none) to {MAX_KEY_CONCURRENCY}", field="max_concurrency")


def new_key(
    name: str,
    scopes: Sequence[str],
    users: Sequence[str] | None,
    *,
    expires_at: float | None = None,
    rate_limit: float | None = None,
    max_concurrency: int | None = None,
    parent: str | None = None,
    now: float | None = None,
) -> tuple[str, KeyRecord]:
    """A fresh token and the record to store for it (the token itself is never stored)."""
    now = time.time() if now is None else now
    ordered, users_t = validate_new_key(name, scopes, users, expires_at, now)
    check_limits(expires_at, rate_limit, max_concurrency, now)
    key_id = secrets.token_hex(6)
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    token = f"{TOKEN_PREFIX}{key_id}_{secret}"
    record = KeyRecord(
        key_id=key_id,
        name=name,
        scopes=ordered,
        users=users_t,
        secret_hash=hash_token(token),
        salt=b"",
        created_at=now,
        expires_at=expires_at,
        rate_limit=rate_limit,
        max_concurrency=max_concurrency,
        parent=parent,
    )
    return token, record


def within_parent(
    parent: Principal,
    expires_at: float | None,
    rate_limit: float | None,
    max_concurrency: int | None,
    defaults: tuple[float, int],
) -> tuple[float | None, float | None, int | None]:
    """A key made by ``parent`` never expires after it nor is less limited than it (``defaults``:
    the server's rate and concurrency for keys without their own): the expiry and limits to store,
    the parent's where the request gives none, or :class:`Forbidden` naming the field."""
    if parent.expires_at is not None:
        if expires_at is None:
            expires_at = parent.expires_at
        elif expires_at > parent.expires_at:
            raise Forbidden(
                f"a key cannot outlive the key that makes it (expires {_iso(parent.expires_at)})",
                reason="limits",
                field="expires",
            )
    rate = _no_looser(rate_limit, parent.rate_limit, defaults[0], "rate_limit")
    conc = _no_looser(max_concurrency, parent.max_concurrency, defaults[1], "max_concurrency")
    return expires_at, rate, None if conc is None else int(conc)


def _no_looser(child: float | None, parent: float | None, default: float, field: str) -> float | None:
    bound = default if parent is None else parent
    if bound == 0:  # the parent has no limit: nor need the child
        return child
    if child is None:
        return parent  # None: the server's default, as the parent's
    if child == 0 or child > bound:
        raise Forbidden(
            f"{field} must be within the key that makes it ({bound:g}; 0 would mean none)", reason="limits", field=field
        )
    return child


def live_keys_named(keys: Iterable[KeyRecord], ref: str) -> list[KeyRecord]:
    """The unrevoked keys whose name (or key id) is ``ref``."""
    return [k for k in keys if k.revoked_at is None and ref in (k.name, k.key_id)]


_DURATION = re.compile(r"([1-9][0-9]{0,5})([mhdw])")
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_expiry(text: str, now: float) -> float:
    """``30d``, ``12h``, ``90m``, ``2w`` from now, or an ISO date or date-time (naive means UTC)."""
    m = _DURATION.fullmatch(text.strip())
    if m:
        return now + int(m.group(1)) * _UNITS[m.group(2)]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise InvalidInput("neither a duration (30d, 12h, 90m, 2w) nor an ISO date", field="expires") from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        return when.timestamp()
    except (OverflowError, ValueError) as exc:
        raise InvalidInput("out of range", field="expires") from exc


def is_loopback(host: str) -> bool:
    """True for a host that only this machine can reach (HRT_AUTH=off is allowed only there)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def auth_off_refused(host: str) -> str:
    return (
        f"HRT_AUTH=off serves every user's data to anyone who can connect; it is allowed only on a loopback "
        f"address, not {host!r}. Create a key instead (`hrt keys create`)."
    )


# ------------------------------------------------------------------------------------------
# who is calling
# ------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------
# per-key limits (per process)
# ------------------------------------------------------------------------------------------


@dataclass
class _Bucket:
    tokens: float
    updated: float
    in_flight: int = 0


class KeyLimiter:
    """A token bucket (``rate`` requests per second, bursts up to two seconds' worth) and a cap on
    requests in flight, per key and per process: N replicas allow N times the rate."""

    def __init__(self, rate: float, max_concurrency: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.max_concurrency = max_concurrency
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def _limits(self, p: Principal) -> tuple[float, int]:
        rate = self.rate if p.rate_limit is None else p.rate_limit
        conc = self.max_concurrency if p.max_concurrency is None else p.max_concurrency
        if rate != 0:  # a row stored before the bounds (5e-324, inf) is held to them here
            rate = min(max(rate, MIN_RATE_LIMIT), MAX_RATE_LIMIT) if math.isfinite(rate) else MAX_RATE_LIMIT
        return rate, conc

    def acquire(self, p: Principal) -> None:
        """Take one request's place, or raise :class:`RateLimited` (with a Retry-After)."""
        rate, conc = self._limits(p)
        now = self.clock()
        burst = max(1.0, 2.0 * rate)
        b = self._buckets.get(p.key_id)
        if b is None:
            b = self._buckets[p.key_id] = _Bucket(tokens=burst, updated=now)
        if conc > 0 and b.in_flight >= conc:
            raise RateLimited(
                f"this API key has {b.in_flight} requests in flight, its limit", retry_after_s=1, reason="concurrency"
            )
        if rate > 0:
            b.tokens = min(burst, b.tokens + (now - b.updated) * rate)
            b.updated = now
            if b.tokens < 1.0:
                wait = math.ceil((1.0 - b.tokens) / rate)
                raise RateLimited(
                    f"this API key is over its {rate:g} requests per second", retry_after_s=wait, reason="rate"
                )
            b.tokens -= 1.0
        b.in_flight += 1

    def release(self, p: Principal) -> None:
        b = self._buckets.get(p.key_id)
        if b is not None and b.in_flight > 0:
            b.in_flight -= 1
