"""The writes of one user's records: ingest, conversations, deleting an entity, merging concepts
and deleting everything of a user. Each is audited; each is a door to its use case
(:mod:`hrt.usecases`), which checks the ids and the key's users before it writes and fills in the
audit line."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request

from hrt import usecases
from hrt.api.access import Caller, needs
from hrt.api.errors import ERROR_RESPONSES
from hrt.api.openapi import CONVERSATION_BODY, ingest_request_body
from hrt.api.routes.common import EntityKindPath, UserIdPath
from hrt.api.state import Server, Service
from hrt.api.strict import known_query
from hrt.contract import MergeRequest, MergeResult, WriteSummary
from hrt.extraction.messages import ConversationResult

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
    # worker thread, in the write slot (usecases.ingest_body).
    with server.ingest_bodies.place(caller.tenant):
        raw = await request.body()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    limit = server.settings.max_ingest_records
    result = await usecases.ingest_body(server.service, caller, raw, ctype, limit, audit)
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
    with server.ingest_bodies.place(caller.tenant) as place:
        raw = await request.body()
        body = await asyncio.to_thread(usecases.parse_conversation, raw, audit)
        del raw
        return await usecases.add_messages(server.service, caller, body, audit, on_slot=place.release)


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
    audit: dict[str, Any] = {}
    request.state.audit = audit
    n = await usecases.delete_entity(svc, caller, user_id, kind, entity_id, audit)
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
    audit: dict[str, Any] = {}
    request.state.audit = audit
    return await usecases.merge_concepts(svc, caller, user_id, concept_id, body.ids, audit)


@router.delete(
    "/v1/users/{user_id}",
    dependencies=[needs("admin", audited=True)],
    response_model=WriteSummary,
    responses=ERROR_RESPONSES,
    summary="Delete everything of one user",
)
async def delete_user(request: Request, user_id: UserIdPath, caller: Caller, svc: Service) -> WriteSummary:
    audit: dict[str, Any] = {}
    request.state.audit = audit
    n = await usecases.delete_user(svc, caller, user_id, audit)
    return WriteSummary(upserted=0, deleted=n)
