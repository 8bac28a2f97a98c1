"""API keys as stored and as made: the token and its hash, the key record and the status of its
line of makers, the bounds of a key's definition and the checks a new key passes (its maker's own
bounds included), expiry durations, and where authentication may be off (loopback alone)."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import math
import re
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, Protocol

from hrt.errors import Forbidden, InvalidInput

if TYPE_CHECKING:
    from hrt.auth.ring import Principal

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
