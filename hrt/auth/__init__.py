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

from hrt.auth.keys import _TOKEN as _TOKEN
from hrt.auth.keys import (
    ALL_USERS_TENANT,
    FAILED_MEMORY,
    KEY_NAME,
    MAX_KEY_CONCURRENCY,
    MAX_KEY_LIFETIME_S,
    MAX_LINEAGE,
    MAX_RATE_LIMIT,
    MIN_RATE_LIMIT,
    SCOPES,
    SCRYPT_N,
    SCRYPT_P,
    SCRYPT_R,
    TOKEN_PREFIX,
    KeyRecord,
    KeyStatus,
    KeyStore,
    Scope,
    auth_off_refused,
    check_limits,
    hash_token,
    is_loopback,
    legacy_hash,
    lineage_status,
    live_keys_named,
    new_key,
    parse_expiry,
    token_key_id,
    validate_new_key,
    within_parent,
)
from hrt.auth.keys import _iso as _iso
from hrt.auth.limits import KeyLimiter
from hrt.auth.ring import UNAUTHENTICATED_DEV, KeyRing, Principal, principal_of, tenant_of, users_tenant

__all__ = [
    "ALL_USERS_TENANT",
    "FAILED_MEMORY",
    "KEY_NAME",
    "MAX_KEY_CONCURRENCY",
    "MAX_KEY_LIFETIME_S",
    "MAX_LINEAGE",
    "MAX_RATE_LIMIT",
    "MIN_RATE_LIMIT",
    "SCOPES",
    "SCRYPT_N",
    "SCRYPT_P",
    "SCRYPT_R",
    "TOKEN_PREFIX",
    "UNAUTHENTICATED_DEV",
    "KeyLimiter",
    "KeyRecord",
    "KeyRing",
    "KeyStatus",
    "KeyStore",
    "Principal",
    "Scope",
    "auth_off_refused",
    "check_limits",
    "hash_token",
    "is_loopback",
    "legacy_hash",
    "lineage_status",
    "live_keys_named",
    "new_key",
    "parse_expiry",
    "principal_of",
    "tenant_of",
    "token_key_id",
    "users_tenant",
    "validate_new_key",
    "within_parent",
]
