"""The FastAPI application: ``POST /v1/retrieve`` and the write, health and metrics endpoints."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import FastAPI, Request, Response
from pydantic import BaseModel

from hrt import __version__
from hrt.api.errors import install_error_handlers
from hrt.config import Settings
from hrt.contract import AugmentedMemoryContext, RetrieveRequest
from hrt.errors import InvalidInput
from hrt.ingest import parse_record
from hrt.records import Kind, valid_id
from hrt.service import HRTService

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class RequestCounter:
    """Counts every HTTP response by route and status: a plain ASGI middleware (Starlette's
    ``BaseHTTPMiddleware`` cost about half a millisecond a request); an exception that escapes the
    app counts as 500, the status the server then answers with."""

    def __init__(self, app: ASGIApp, count: Callable[[Scope, int], None]) -> None:
        self.app = app
        self.count = count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            self.count(scope, status)


class BodyLimit:
    """Pure ASGI middleware: a body over the limit gets 413 before any parsing, whether or not the
    client sent Content-Length."""

    def __init__(self, app: ASGIApp, default_limit: int, limits: dict[str, int]) -> None:
        self.app = app
        self.default_limit = default_limit
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.get(scope["path"], self.default_limit)
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await _send_413(send, limit)
                return
        seen = 0
        rejected = False

        async def limited() -> Message:
            nonlocal seen, rejected
            if rejected:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # Answer 413 now and tell the app the client went away; what the app sends
                    # afterwards is dropped.
                    rejected = True
                    await _send_413(send, limit)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not rejected:
                await send(message)

        try:
            await self.app(scope, limited, guarded_send)
        except Exception:
            if not rejected:
                raise


async def _send_413(send: Send, limit: int) -> None:
    body = json.dumps(
        {"error": {"code": "payload_too_large", "message": f"the body is over {limit} bytes", "field": "body"}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class IngestBody(BaseModel):
    records: list[dict[str, Any]]


class WriteSummary(BaseModel):
    upserted: int
    deleted: int


EntityKindPath = Literal["memory_unit", "concept", "artifact"]


def create_app(settings: Settings | None = None, service: HRTService | None = None) -> FastAPI:
    settings = settings or Settings()
    state: dict[str, HRTService] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = service is None
        if owned:
            state["svc"] = await HRTService(settings).start(background_projector=True)
        try:
            yield
        finally:
            if owned:
                await state["svc"].close()

    app = FastAPI(
        title="HRT: Hybrid Retrieval Tool",
        version=__version__,
        description="Deterministic knowledge-graph retrieval returning AugmentedMemoryContext V9.4.",
        lifespan=lifespan,
    )
    if service is not None:
        state["svc"] = service
    install_error_handlers(app)

    def svc() -> HRTService:
        return state["svc"]

    def count_request(scope: Scope, status: int) -> None:
        if "svc" in state:
            path = getattr(scope.get("route"), "path", "unmatched")
            svc().metrics.requests.labels(route=path, status=str(status)).inc()

    app.add_middleware(RequestCounter, count=count_request)

    @app.post(
        "/v1/retrieve",
        response_class=Response,
        responses={200: {"model": AugmentedMemoryContext, "description": "AugmentedMemoryContext V9.4"}},
        summary="Ground key phrases, expand, score and return the AugmentedMemoryContext V9.4",
    )
    async def retrieve(request: RetrieveRequest) -> Response:
        result, timings = await svc().retrieve_timed(request)
        server_timing = ", ".join(f"{stage};dur={sec * 1000:.2f}" for stage, sec in timings.items())
        return Response(
            content=result.canonical_json().encode(),
            media_type="application/json",
            headers={"Server-Timing": server_timing},
        )

    @app.post("/v1/ingest", response_model=WriteSummary, summary="Upsert or delete records (one transaction)")
    async def ingest(request: Request) -> WriteSummary:
        raw = await request.body()
        ctype = request.headers.get("content-type", "").split(";")[0].strip()
        objects: list[Any]
        if ctype in ("application/x-ndjson", "application/jsonl"):
            objects = []
            for n, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), start=1):
                if line.strip():
                    try:
                        objects.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise InvalidInput(f"line {n}: not valid JSON ({exc.msg})", field=f"line {n}") from exc
            where = [f"line {i + 1}" for i in range(len(objects))]
        else:
            try:
                body = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise InvalidInput(f"the body is not valid JSON ({exc.msg})", field="body") from exc
            if not isinstance(body, dict) or not isinstance(body.get("records"), list):
                raise InvalidInput('the body must be {"records": [...]}', field="records")
            objects = body["records"]
            where = [f"records[{i}]" for i in range(len(objects))]
        records = []
        for obj, w in zip(objects, where, strict=True):
            try:
                records.append(parse_record(obj, w))
            except InvalidInput as exc:
                raise InvalidInput(exc.message, field=f"{w}.{exc.field}") from exc
        result = await svc().ingest(records)
        return WriteSummary(upserted=result.upserted, deleted=result.deleted)

    @app.delete("/v1/users/{user_id}/entities/{kind}/{entity_id}", response_model=WriteSummary)
    async def delete_entity(user_id: str, kind: EntityKindPath, entity_id: str) -> WriteSummary:
        _check_id(user_id, "user_id")
        n = await svc().delete_entity(user_id, Kind(kind), entity_id)
        return WriteSummary(upserted=0, deleted=n)

    @app.delete("/v1/users/{user_id}", response_model=WriteSummary, summary="Delete everything of one user")
    async def delete_user(user_id: str) -> WriteSummary:
        _check_id(user_id, "user_id")
        n = await svc().delete_user(user_id)
        return WriteSummary(upserted=0, deleted=n)

    @app.get("/v1/users/{user_id}/stats")
    async def user_stats(user_id: str) -> dict[str, int]:
        _check_id(user_id, "user_id")
        return await svc().records.counts(user_id)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> Response:
        service = svc()
        checks: dict[str, str] = {}
        for name, probe in (
            ("records", lambda: service.records.user_exists("readyz-probe")),
            ("graph", getattr(service.graph, "ping", None)),
            ("vectors", getattr(service.vectors, "ping", None)),
        ):
            if probe is None:
                checks[name] = "ok"
                continue
            try:
                await probe()
                checks[name] = "ok"
            except Exception as exc:  # readiness reports, it never raises
                log.warning("readiness check of %s failed: %s", name, exc)
                checks[name] = "unavailable"
        ok = all(v == "ok" for v in checks.values())
        warming = service.preload_state == "loading"
        body = {
            "status": "unavailable" if not ok else "warming" if warming else "ready",
            "stores": checks,
            "caches": service.preload_state,
            "embedder": service.embedder.name,
            "deployment": service.deployment,
            # Neo4j: "procedure" (hrt.expand) or "cypher"; the embedded graph walks in process
            "graph_expansion": getattr(service.graph, "expansion_path", "in_process"),
        }
        code = 200 if ok and not warming else 503
        return Response(json.dumps(body), status_code=code, media_type="application/json")

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(svc().metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.add_middleware(
        BodyLimit,
        default_limit=settings.max_body_bytes,
        limits={"/v1/ingest": settings.max_ingest_body_bytes},
    )
    return app


def _check_id(value: str, field: str) -> None:
    if not valid_id(value):
        raise InvalidInput(f"{value!r} is not a valid {field}", field=field)
