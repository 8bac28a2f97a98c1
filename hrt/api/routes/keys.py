"""The API key routes: an admin key lists, creates and revokes the keys it manages (``hrt/auth.py``)."""

from __future__ import annotations

import logging
import time
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import Field

from hrt.api.access import Caller, needs
from hrt.api.errors import ERROR_RESPONSES
from hrt.api.state import Server, Service
from hrt.api.strict import known_query
from hrt.auth import (
    UNAUTHENTICATED_DEV,
    KeyRecord,
    Principal,
    lineage_status,
    live_keys_named,
    new_key,
    parse_expiry,
    within_parent,
)
from hrt.contract import KeyInfo, KeyRequest, NewKey
from hrt.errors import Conflict, Forbidden, NotFound

log = logging.getLogger(__name__)

router = APIRouter(dependencies=[Depends(known_query)])


def manageable(caller: Principal, users: tuple[str, ...] | None) -> bool:
    """An admin key manages the keys whose users are all its own (every key, for all users)."""
    return caller.users is None or (users is not None and set(users) <= caller.users)


def revocable(caller: Principal, live: list[KeyRecord], name: str) -> KeyRecord:
    """The one key of ``live`` the caller may revoke: its own child first when names clash."""
    mine = [k for k in live if manageable(caller, k.users)]
    if len(mine) > 1:
        mine = [k for k in mine if k.parent == caller.key_id] or mine
    if not mine:
        # the same answer whether the key exists or belongs to other users
        raise NotFound(f"no live key named {name!r} that this key manages", field="name")
    if len(mine) > 1:
        ids = ", ".join(k.key_id for k in mine)
        raise Conflict(f"{len(mine)} live keys are named {name!r} ({ids}): revoke one by its key id", field="name")
    return mine[0]


@router.get(
    "/v1/keys",
    dependencies=[needs("admin")],
    response_model=list[KeyInfo],
    responses=ERROR_RESPONSES,
    summary="The API keys this admin key manages, never a secret",
)
async def list_keys(caller: Caller, svc: Service) -> list[KeyInfo]:
    now = time.time()
    keys = await svc.records.keys()
    by_id = {k.key_id: k for k in keys}
    return [KeyInfo(**k.describe(now, lineage_status(k, by_id, now))) for k in keys if manageable(caller, k.users)]


@router.post(
    "/v1/keys",
    dependencies=[needs("admin", audited=True)],
    response_model=NewKey,
    status_code=201,
    responses=ERROR_RESPONSES,
    summary="Create an API key within this admin key's scopes and users; its secret is shown once",
)
async def create_key(request: Request, body: KeyRequest, caller: Caller, server: Server) -> NewKey:
    now = time.time()
    request.state.audit = {"users": body.users or ["*"], "records": 1}
    if not set(body.scopes) <= caller.scopes:
        raise Forbidden("a key cannot grant a scope it lacks", reason="scope", field="scopes")
    if body.users is None:
        if caller.users is not None:
            raise Forbidden("a key for some users cannot create one for every user", reason="user", field="users")
    else:
        caller.require_users(body.users)
    settings = server.settings
    expires_at, rate_limit, max_concurrency = within_parent(
        caller,
        parse_expiry(body.expires, now) if body.expires else None,
        body.rate_limit,
        body.max_concurrency,
        (settings.key_rate_limit, settings.key_max_concurrency),
    )
    token, record = new_key(
        body.name,
        body.scopes,
        body.users,
        expires_at=expires_at,
        rate_limit=rate_limit,
        max_concurrency=max_concurrency,
        parent=None if caller is UNAUTHENTICATED_DEV else caller.key_id,
        now=now,
    )
    answer = NewKey(key=token, **record.describe(now))
    await server.service.records.create_key(record)
    server.keyring().forget(record.key_id)  # read again at the next request
    request.state.audit.update(upserted=1, target_key=record.key_id)
    log.info("key %s (%r) created over HTTP by key %s", record.key_id, record.name, caller.key_id)
    return answer


@router.delete(
    "/v1/keys/{name}",
    dependencies=[needs("admin", audited=True)],
    response_model=KeyInfo,
    responses=ERROR_RESPONSES,
    summary="Revoke the live key of this name (or key id), at once in this server",
)
async def revoke_key(
    request: Request, name: Annotated[str, Field(max_length=64)], caller: Caller, server: Server
) -> KeyInfo:
    now = time.time()
    request.state.audit = {"users": [], "records": 1}
    records = server.service.records
    target = revocable(caller, [k for k in live_keys_named(await records.keys(), name)], name)
    done = await records.revoke_key(target.key_id, now)
    if done is None:
        raise NotFound(f"no live key named {name!r} that this key manages", field="name")
    server.keyring().forget(done.key_id)
    request.state.audit.update(users=list(done.users or ["*"]), deleted=1, target_key=done.key_id)
    log.info("key %s (%r) revoked over HTTP by key %s", done.key_id, done.name, caller.key_id)
    return KeyInfo(**done.describe(now))
