"""Liveness (no key), readiness and the Prometheus metrics (scope ops)."""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

from fastapi import APIRouter, Depends, Response

from hrt.api.access import Caller, needs, no_key
from hrt.api.errors import ERROR_RESPONSES
from hrt.api.state import AUTH_OFF_WARNING, Server, Service
from hrt.api.strict import known_query
from hrt.contract import Health, Readiness
from hrt.metrics import own_series
from hrt.service import HRTService

log = logging.getLogger(__name__)

router = APIRouter(dependencies=[Depends(known_query)])


@router.get("/healthz", dependencies=[no_key()], response_model=Health, summary="Liveness")
async def healthz() -> Health:
    return Health(status="ok")


async def _store_checks(service: HRTService) -> dict[str, Literal["ok", "unavailable"]]:
    """Every store asked at once, each within HRT_STORE_PROBE_TIMEOUT_S (HRTService.store_checks)."""
    answers = await service.store_checks()
    return {name: "ok" if up else "unavailable" for name, up in answers.items()}


async def _outbox_warnings(service: HRTService) -> list[str]:
    if service.projector is None:
        return []
    try:  # dead outbox events, a projection far behind: ready, but say so
        async with asyncio.timeout(service.settings.store_probe_timeout_s):
            return await service.projector.warnings()
    except Exception as exc:  # readiness reports, it never raises
        log.warning("readiness check of the outbox failed: %s", exc)
        return []


@router.get(
    "/readyz",
    dependencies=[needs("ops")],
    response_model=Readiness,
    responses={
        **ERROR_RESPONSES,
        503: {"model": Readiness, "description": "a store is unavailable or caches are warming"},
    },
    summary="Readiness of every store and cache",
)
async def readyz(server: Server) -> Response:
    service = server.service
    checks = await _store_checks(service)
    ok = all(v == "ok" for v in checks.values())
    warming = service.preload_state == "loading"
    warnings = [AUTH_OFF_WARNING] if server.settings.auth == "off" else []
    if checks["records"] == "ok":
        warnings += await _outbox_warnings(service)
    body = Readiness(
        status="unavailable" if not ok else "warming" if warming else "ready",
        stores=checks,
        caches=service.preload_state,
        embedder=service.embedder.name,
        reranker=service.tool.reranker.name,
        deployment=service.stores.deployment,
        # Neo4j: "procedure" (hrt.expand) or "cypher"; the embedded graph walks in process
        graph_expansion=service.graph.expansion_path,
        auth=server.settings.auth,
        warnings=warnings,
    )
    code = 200 if ok and not warming else 503
    return Response(body.model_dump_json(), status_code=code, media_type="application/json")


@router.get(
    "/metrics",
    dependencies=[needs("ops")],
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text"},
        **ERROR_RESPONSES,
    },
    summary="Prometheus metrics",
)
async def metrics(caller: Caller, svc: Service) -> Response:
    text = svc.metrics.render()
    if caller.users is not None:  # a key for some users sees its own traffic only, no server-wide sum
        text = own_series(text, caller.key_id)
    return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")
