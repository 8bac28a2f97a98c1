"""Reading one user's records: counts, one entity with its relations, a page of entities
(:mod:`hrt.browse`)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from hrt import usecases
from hrt.api.access import Caller, needs
from hrt.api.errors import ERROR_RESPONSES
from hrt.api.routes.common import EntityKindPath, UserIdPath
from hrt.api.state import Server, Service
from hrt.api.strict import known_query
from hrt.browse import (
    DEFAULT_LIMIT,
    DEFAULT_RELATION_LIMIT,
    MAX_CURSOR_CHARS,
    MAX_FILTER_VALUES,
    MAX_LIMIT,
    MAX_RELATION_LIMIT,
    BrowseRequest,
    EntityPage,
    EntityView,
    browse_entities,
)
from hrt.contract import UserStats
from hrt.metadata_filter import MAX_CHARS as MAX_FILTER_CHARS
from hrt.records import Kind

router = APIRouter(dependencies=[Depends(known_query)])


@router.get(
    "/v1/users/{user_id}/stats",
    dependencies=[needs("retrieve")],
    response_model=UserStats,
    responses=ERROR_RESPONSES,
    summary="Counts of one user's records",
)
async def user_stats(user_id: UserIdPath, caller: Caller, svc: Service) -> UserStats:
    return UserStats(**await usecases.counts(svc, caller, user_id))


@router.get(
    "/v1/users/{user_id}/entities/{kind}/{entity_id}",
    dependencies=[needs("retrieve")],
    response_model=EntityView,
    responses=ERROR_RESPONSES,
    summary="One entity as ingested, with its relations, validity, supersession and writer",
)
async def get_entity(
    user_id: UserIdPath,
    kind: EntityKindPath,
    entity_id: UserIdPath,
    caller: Caller,
    svc: Service,
    relation_limit: Annotated[int, Query(ge=1, le=MAX_RELATION_LIMIT)] = DEFAULT_RELATION_LIMIT,
) -> EntityView:
    return await usecases.entity(svc, caller, user_id, Kind(kind), entity_id, relation_limit)


# what a page says when its records are left out (a key without the read or export scope)
RECORDS_OMITTED = (
    '299 hrt "records are left out: reading them in bulk needs the read or export scope; ids and titles only"'
)


@router.get(
    "/v1/users/{user_id}/entities",
    dependencies=[needs("retrieve")],
    response_model=EntityPage,
    responses=ERROR_RESPONSES,
    summary="A page of one user's entities in id order, filtered, with the next page's cursor; whole records "
    "with the read or export scope, else ids and titles",
)
async def list_entities(
    user_id: UserIdPath,
    caller: Caller,
    server: Server,
    kind: EntityKindPath | None = None,
    tags: Annotated[list[str] | None, Query(max_length=MAX_FILTER_VALUES)] = None,
    agent: Annotated[list[str] | None, Query(max_length=MAX_FILTER_VALUES)] = None,
    created_after: Annotated[str | None, Query(max_length=64)] = None,
    created_before: Annotated[str | None, Query(max_length=64)] = None,
    valid_at: Annotated[str | None, Query(max_length=64)] = None,
    prefix: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
    include_invalidated: bool = False,
    metadata: Annotated[
        str | None,
        Query(
            max_length=MAX_FILTER_CHARS,
            description="memory units whose metadata matches this filter, as JSON (docs/api.md, 'Metadata filters')",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
) -> Response:
    usecases.for_user(caller, user_id)
    request = BrowseRequest(
        kind=Kind(kind) if kind is not None else None,
        tags=tuple(tags or ()),
        agents=tuple(agent or ()),
        created_after=created_after,
        created_before=created_before,
        valid_at=valid_at,
        prefix=prefix,
        include_invalidated=include_invalidated,
        limit=limit,
        cursor=cursor,
        metadata=metadata,
    )
    # whole records in bulk are a copy of the user: the read (or export) scope, not retrieve's
    full = caller.can("read") or caller.can("export")
    svc, now, max_bytes = server.service, server.service.clock(), server.settings.browse_max_page_bytes

    async def page() -> tuple[bytes, int]:  # read, built and serialised off the event loop (embedded: in a thread)
        found = await browse_entities(svc.records, user_id, request, now, full=full, max_bytes=max_bytes)
        return (await asyncio.to_thread(found.model_dump_json)).encode(), found.read_bytes

    with server.browse_page(caller.tenant):
        body, read = await svc.off_loop(page)
    # charged what it cost: the records read (a page of ids and titles reads them whole) or the
    # page built, whichever is more
    server.browse_bytes.charge(caller.tenant, max(len(body), read))
    headers = {} if full else {"warning": RECORDS_OMITTED}
    return Response(body, media_type="application/json", headers=headers)
