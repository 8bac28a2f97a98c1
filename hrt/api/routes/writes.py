"""The writes of one user's records: ingest, conversations, deleting an entity, merging concepts
and deleting everything of a user. Each is audited; each checks the key's users before it writes."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request

from hrt.api.access import Caller, needs
from hrt.api.errors import ERROR_RESPONSES
from hrt.api.openapi import CONVERSATION_BODY, ingest_request_body
from hrt.api.routes.common import EntityKindPath, UserIdPath
from hrt.api.state import Server, Service
from hrt.api.strict import known_query
from hrt.browse import written_by
from hrt.contract import MergeRequest, MergeResult, WriteSummary
from hrt.extraction.messages import ConversationResult
from hrt.extraction.wire import parse_conversation_body
from hrt.ingest import parse_ingest_body
from hrt.records import Kind, check_id

router = APIRouter(dependencies=[Depends(known_query)])


@router.post(
    "/v1/ingest",
    dependencies=[needs("ingest", audited=True, bulk_body=True)],
    response_model=WriteSummary,
    responses=ERROR_RESPONSES,
    summary="Upsert or delete records in one transaction",
    openapi_extra={"requestBody": ingest_request_body()},
)
async def ingest(request: Request, caller: Caller, server: Server) -> WriteSummary:
    audit = request.state.audit = {"users": [], "records": 0}
    # the body first, bounded in size and time (BodyLimit) and in bodies at once per tenant
    # (IngestBodies): a slow client never holds a write slot, which the write then takes at
    # once or answers 429. Decoding and validating thousands of records takes seconds, in a
    # worker thread.
    with server.ingest_bodies.place(caller.tenant):
        raw = await request.body()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    svc = server.service
    seen: set[str] = set()  # the records' users, named by the audit line of a refusal too
    with svc.ingest_slot(caller.tenant):
        try:
            records = await asyncio.to_thread(parse_ingest_body, raw, ctype, server.settings.max_ingest_records, seen)
        finally:
            audit.update(users=sorted(seen))
        del raw
        users = sorted({r.user_id for r in records})
        audit.update(users=users, records=len(records))
        caller.require_users(users)  # before anything is written
        result = await svc.ingest(records, written_by=written_by(caller))
    audit.update(upserted=result.upserted, deleted=result.deleted)
    return WriteSummary(upserted=result.upserted, deleted=result.deleted)


@router.post(
    "/v1/conversations",
    dependencies=[needs("ingest", audited=True, bulk_body=True)],
    response_model=ConversationResult,
    responses=ERROR_RESPONSES,
    summary="Messages of one session of one user in, as memory units linked to what they mention, in one transaction",
    openapi_extra={"requestBody": CONVERSATION_BODY},
)
async def conversations(request: Request, caller: Caller, server: Server) -> ConversationResult:
    audit = request.state.audit = {"users": [], "records": 0, "messages": 0}
    # as an ingest, the body bounded (BodyLimit, HRT_MAX_INGEST_BODY_BYTES) and received in an
    # ingest body place of the tenant's share; but it is validated in that place, which it keeps
    # until a write slot is held: the user is known only then, and its lock comes before a slot,
    # so a call waiting for the same user's previous one holds no slot meanwhile
    svc = server.service
    seen: set[str] = set()  # the message's user, named by the audit line of a refusal too
    with server.ingest_bodies.place(caller.tenant) as place:
        raw = await request.body()
        try:
            body = await asyncio.to_thread(parse_conversation_body, raw, seen)
        finally:
            audit.update(users=sorted(seen))
        del raw
        audit.update(users=[body.user_id], records=len(body.messages), messages=len(body.messages))
        caller.require_users([body.user_id])  # before anything is written
        result = await svc.add_messages(
            body, written_by=written_by(caller), tenant=caller.tenant, on_slot=place.release
        )
    audit.update(upserted=sum(m.status != "unchanged" for m in result.messages))
    return result


@router.delete(
    "/v1/users/{user_id}/entities/{kind}/{entity_id}",
    dependencies=[needs("ingest", audited=True)],
    response_model=WriteSummary,
    responses=ERROR_RESPONSES,
    summary="Delete one entity and its edges in every store",
)
async def delete_entity(
    request: Request, user_id: UserIdPath, kind: EntityKindPath, entity_id: UserIdPath, caller: Caller, svc: Service
) -> WriteSummary:
    request.state.audit = {"users": [user_id], "records": 1}
    check_id(user_id, "user_id")
    caller.require_users([user_id])
    check_id(entity_id, "entity_id")
    n = await svc.delete_entity(user_id, Kind(kind), entity_id, tenant=caller.tenant)
    request.state.audit.update(deleted=n)
    return WriteSummary(upserted=0, deleted=n)


@router.post(
    "/v1/users/{user_id}/concepts/{concept_id}/merge",
    dependencies=[needs("ingest", audited=True)],
    response_model=MergeResult,
    responses=ERROR_RESPONSES,
    summary="Merge concepts into one: their relations, names and aliases move onto it, they are deleted, "
    "in every store",
)
async def merge_concepts(
    request: Request, user_id: UserIdPath, concept_id: UserIdPath, body: MergeRequest, caller: Caller, svc: Service
) -> MergeResult:
    request.state.audit = {"users": [user_id], "records": len(body.ids), "target_concept": concept_id}
    check_id(user_id, "user_id")
    caller.require_users([user_id])
    check_id(concept_id, "concept_id")
    result = await svc.merge_concepts(user_id, concept_id, body.ids, tenant=caller.tenant)
    request.state.audit.update(deleted=len(result.merged), upserted=result.relations_moved)
    return result


@router.delete(
    "/v1/users/{user_id}",
    dependencies=[needs("admin", audited=True)],
    response_model=WriteSummary,
    responses=ERROR_RESPONSES,
    summary="Delete everything of one user",
)
async def delete_user(request: Request, user_id: UserIdPath, caller: Caller, svc: Service) -> WriteSummary:
    request.state.audit = {"users": [user_id], "records": 0}
    check_id(user_id, "user_id")
    caller.require_users([user_id])
    n = await svc.delete_user(user_id, tenant=caller.tenant)
    request.state.audit.update(deleted=n)
    return WriteSummary(upserted=0, deleted=n)
