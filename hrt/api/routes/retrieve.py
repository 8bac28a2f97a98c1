"""``POST /v1/retrieve``: the AugmentedMemoryContext V9.4 as canonical JSON."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from hrt import usecases
from hrt.api.access import Caller, needs
from hrt.api.errors import ERROR_RESPONSES
from hrt.api.state import Service
from hrt.api.strict import known_query
from hrt.contract import RetrieveRequest

router = APIRouter(dependencies=[Depends(known_query)])


@router.post(
    "/v1/retrieve",
    dependencies=[needs("retrieve")],
    response_class=Response,
    responses={
        200: {
            "description": "AugmentedMemoryContext V9.4 (canonical JSON)",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AugmentedMemoryContext"}}},
        },
        **ERROR_RESPONSES,
    },
    summary="Ground key phrases, expand, score and return the AugmentedMemoryContext V9.4",
)
async def retrieve(request: RetrieveRequest, caller: Caller, svc: Service) -> Response:
    retrieval = await usecases.retrieve(svc, caller, request)
    server_timing = ", ".join(f"{stage};dur={sec * 1000:.2f}" for stage, sec in retrieval.timings.items())
    return Response(
        content=retrieval.response.canonical_json().encode(),
        media_type="application/json",
        headers={"Server-Timing": server_timing},
    )
