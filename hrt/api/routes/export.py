"""``GET /v1/users/{user_id}/export``: one user's records, streamed (:mod:`hrt.api.export`)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response

from hrt import usecases
from hrt.api.access import Caller, needs
from hrt.api.errors import ERROR_RESPONSES
from hrt.api.export import export_response
from hrt.api.routes.common import UserIdPath
from hrt.api.state import Server
from hrt.api.strict import known_query

router = APIRouter(dependencies=[Depends(known_query)])


@router.get(
    "/v1/users/{user_id}/export",
    dependencies=[needs("export", audited=True)],
    response_class=Response,
    responses={
        200: {
            "description": "the user's records, one JSON object per line in the ingest format, streamed",
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        },
        **ERROR_RESPONSES,
    },
    summary="One user's records as NDJSON in the ingest format, streamed",
)
async def export_user(request: Request, user_id: UserIdPath, caller: Caller, server: Server) -> Response:
    audit = request.state.audit = {"users": [user_id], "records": 0}
    usecases.for_user(caller, user_id)
    return await export_response(
        server.service.records, user_id, server.export_slots, audit, caller.tenant, server.settings.export_idle_s
    )
