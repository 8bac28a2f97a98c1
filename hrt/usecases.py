"""The use cases of HRT's doors: the HTTP routes (:mod:`hrt.api.routes`), the MCP tools
(:mod:`hrt.mcp_server`) and the CLI (:mod:`hrt.cli`) each call these to read and write a user's
memory.

Each use case does, once and in this order: the audit record filled in as far as it is known
(``written``: the users, the records, later what was written; the door writes it as its
``hrt.audit`` line whatever the outcome), the ids checked (:func:`hrt.records.check_id`), the
caller's users checked before anything is written (:meth:`hrt.auth.Principal.require_users`), one
write slot of the caller's tenant taken (:meth:`hrt.service.HRTService.ingest_slot`), and the work.

``caller`` None is the operator (the CLI): every user, the operator's share of the slots, and
nothing recorded as the writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from hrt.auth import Principal
from hrt.browse import EntityView, read_entity, written_by
from hrt.contract import RetrieveRequest
from hrt.errors import InvalidInput
from hrt.extraction.messages import ConversationRequest, ConversationResult
from hrt.extraction.wire import parse_conversation_body
from hrt.ingest import Record, parse_ingest_body
from hrt.records import Kind, check_id
from hrt.service import HRTService
from hrt.stores.base import WriteResult

if TYPE_CHECKING:
    from hrt.merge import MergeResult
    from hrt.pipeline import Retrieval

Written = MutableMapping[str, Any]
"""What a write's audit line says: users, records, upserted, deleted (:func:`hrt.front.audit_line`)."""

KINDS = [k.value for k in Kind]


def _tenant(caller: Principal | None) -> str | None:
    return caller.tenant if caller is not None else None


def _writer(caller: Principal | None) -> str | None:
    return written_by(caller) if caller is not None else None


def require_users(caller: Principal | None, users: Sequence[str]) -> None:
    """The caller acts for every one of ``users`` (403 otherwise); the operator for all."""
    if caller is not None:
        caller.require_users(users)


def for_user(caller: Principal | None, user_id: str) -> str:
    """``user_id`` checked (422) and the caller acting for it (403): what every use case of one
    user's records asks first."""
    check_id(user_id, "user_id")
    require_users(caller, [user_id])
    return user_id


def entity_kind(value: Any) -> Kind:
    """An entity's kind: memory_unit, concept or artifact (422 otherwise)."""
    if value not in KINDS:
        raise InvalidInput(f"kind must be {', '.join(KINDS[:-1])} or {KINDS[-1]}", field="kind")
    return Kind(value)


# --------------------------------------------------------------------------------------------
# Reads
# --------------------------------------------------------------------------------------------


async def retrieve(svc: HRTService, caller: Principal | None, request: RetrieveRequest) -> Retrieval:
    """A retrieval for the request's user: the response and the seconds each stage took."""
    require_users(caller, [request.user_id])
    return await svc.tool.run(request)


async def counts(svc: HRTService, caller: Principal | None, user_id: str) -> dict[str, int]:
    """The user's records, counted per kind."""
    for_user(caller, user_id)
    return dict(await svc.records.counts(user_id))


async def entity(
    svc: HRTService, caller: Principal | None, user_id: str, kind: Kind, entity_id: str, relation_limit: int
) -> EntityView:
    """One entity as ingested, with at most ``relation_limit`` of its relations (:mod:`hrt.browse`)."""
    for_user(caller, user_id)
    return await read_entity(svc.records, user_id, kind, entity_id, relation_limit)


# --------------------------------------------------------------------------------------------
# Writes
# --------------------------------------------------------------------------------------------


def _admit_records(caller: Principal | None, records: Sequence[Record], written: Written) -> None:
    users = sorted({r.user_id for r in records})
    written.update(users=users, records=len(records))
    require_users(caller, users)  # before anything is written


async def ingest_body(
    svc: HRTService, caller: Principal | None, raw: bytes, content_type: str, limit: int, written: Written
) -> WriteResult:
    """``POST /v1/ingest``'s body (JSON or JSON Lines, at most ``limit`` records), decoded and
    validated in a worker thread while holding the write slot (its seconds of CPU bounded as a
    write's), then written."""
    seen: set[str] = set()  # the records' users, named by the audit line of a refusal too
    with svc.ingest_slot(_tenant(caller)):
        try:
            records = await asyncio.to_thread(parse_ingest_body, raw, content_type, limit, seen)
        finally:
            written.update(users=sorted(seen))
        del raw
        _admit_records(caller, records, written)
        result = await svc.write_records(records, written_by=_writer(caller))
    written.update(upserted=result.upserted, deleted=result.deleted)
    return result


async def ingest_records(
    svc: HRTService,
    caller: Principal | None,
    records: Sequence[Record],
    written: Written,
    progress: Callable[[int], None] | None = None,
) -> WriteResult:
    """Records validated already (the MCP tool ``remember``'s, ``hrt ingest``'s) written in one
    transaction, in a write slot."""
    _admit_records(caller, records, written)
    result = await svc.ingest(records, progress=progress, written_by=_writer(caller), tenant=_tenant(caller))
    written.update(upserted=result.upserted, deleted=result.deleted)
    return result


def parse_conversation(raw: bytes, written: Written) -> ConversationRequest:
    """``POST /v1/conversations``'s body as a request (:func:`parse_conversation_body`); its user
    named in ``written`` also when it is refused. Run in a worker thread."""
    seen: set[str] = set()
    try:
        return parse_conversation_body(raw, seen)
    finally:
        written.update(users=sorted(seen))


async def add_messages(
    svc: HRTService,
    caller: Principal | None,
    request: ConversationRequest,
    written: Written,
    on_slot: Callable[[], None] | None = None,
) -> ConversationResult:
    """Messages of one session in (:meth:`HRTService.add_messages`: the user's lock, then a write
    slot; ``on_slot`` called once it is held)."""
    n = len(request.messages)
    written.update(users=[request.user_id], records=n, messages=n)
    require_users(caller, [request.user_id])  # before anything is written
    result = await svc.add_messages(request, written_by=_writer(caller), tenant=_tenant(caller), on_slot=on_slot)
    written.update(upserted=sum(m.status != "unchanged" for m in result.messages))
    return result


async def delete_entity(
    svc: HRTService, caller: Principal | None, user_id: str, kind: Any, entity_id: str, written: Written
) -> int:
    """Delete one entity and its edges in every store; the number of records deleted."""
    written.update(users=[user_id], records=1)
    for_user(caller, user_id)
    found = entity_kind(kind)
    check_id(entity_id, "entity_id")
    n = await svc.delete_entity(user_id, found, entity_id, tenant=_tenant(caller))
    written.update(deleted=n)
    return n


async def merge_concepts(
    svc: HRTService, caller: Principal | None, user_id: str, target: str, ids: Sequence[str], written: Written
) -> MergeResult:
    """Merge concepts into ``target`` (:meth:`HRTService.merge_concepts`)."""
    written.update(users=[user_id], records=len(ids), target_concept=target)
    for_user(caller, user_id)
    check_id(target, "concept_id")
    result = await svc.merge_concepts(user_id, target, ids, tenant=_tenant(caller))
    written.update(deleted=len(result.merged), upserted=result.relations_moved)
    return result


async def delete_user(svc: HRTService, caller: Principal | None, user_id: str, written: Written) -> int:
    """Delete everything of one user; the number of records deleted."""
    written.update(users=[user_id])
    for_user(caller, user_id)
    n = await svc.delete_user(user_id, tenant=_tenant(caller))
    written.update(deleted=n)
    return n
