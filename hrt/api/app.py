"""The FastAPI application: ``POST /v1/retrieve`` and the write, key, health and metrics endpoints.

Every route but ``GET /healthz`` needs an API key (``hrt/auth.py``): :class:`hrt.api.guard.Guard`
authenticates it and checks the route's scope before the request reaches a route; each route then
checks that the key may act for the users it names, before it reads or writes anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.openapi.utils import get_openapi
from pydantic import Field

from hrt import __version__
from hrt.api.bodies import BodyLimit, IngestBodies
from hrt.api.errors import ERROR_RESPONSES, install_error_handlers, refusal_reason
from hrt.api.export import export_response
from hrt.api.guard import ASGIApp, Guard, Message, Receive, Scope, Send
from hrt.auth import (
    SCOPES,
    UNAUTHENTICATED_DEV,
    KeyLimiter,
    KeyRecord,
    KeyRing,
    Principal,
    auth_off_refused,
    is_loopback,
    lineage_status,
    live_keys_named,
    new_key,
    parse_expiry,
    within_parent,
)
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
    read_entity,
    written_by,
)
from hrt.config import Settings
from hrt.contract import (
    AugmentedMemoryContext,
    Health,
    KeyInfo,
    KeyRequest,
    MergeRequest,
    MergeResult,
    NewKey,
    Readiness,
    RetrieveRequest,
    UserStats,
    WriteSummary,
)
from hrt.errors import Conflict, Forbidden, HRTError, InvalidInput, NotFound, StoreUnavailable
from hrt.export import ExportSlots
from hrt.extraction.messages import ConversationRequest, ConversationResult
from hrt.extraction.wire import parse_conversation_body
from hrt.ingest import ingest_body_schema, parse_ingest_body
from hrt.metrics import without_other_keys
from hrt.records import Kind, valid_id
from hrt.service import HRTService

log = logging.getLogger(__name__)


# (method, route) -> the scope it needs; a route not listed needs a valid key of any scope
ROUTE_SCOPES: dict[tuple[str, str], str] = {
    ("POST", "/v1/retrieve"): "retrieve",
    ("GET", "/v1/users/{user_id}/stats"): "retrieve",
    ("GET", "/v1/users/{user_id}/entities/{kind}/{entity_id}"): "retrieve",
    ("GET", "/v1/users/{user_id}/entities"): "retrieve",
    ("POST", "/v1/ingest"): "ingest",
    ("POST", "/v1/conversations"): "ingest",
    ("DELETE", "/v1/users/{user_id}/entities/{kind}/{entity_id}"): "ingest",
    ("POST", "/v1/users/{user_id}/concepts/{concept_id}/merge"): "ingest",
    ("DELETE", "/v1/users/{user_id}"): "admin",
    ("GET", "/readyz"): "ops",
    ("GET", "/metrics"): "ops",
    ("GET", "/v1/keys"): "admin",
    ("POST", "/v1/keys"): "admin",
    ("DELETE", "/v1/keys/{name}"): "admin",
}
# every outcome of these is one line of the audit log (hrt.audit)
AUDITED = frozenset(
    {
        ("POST", "/v1/ingest"),
        ("POST", "/v1/conversations"),
        ("DELETE", "/v1/users/{user_id}/entities/{kind}/{entity_id}"),
        ("POST", "/v1/users/{user_id}/concepts/{concept_id}/merge"),
        ("DELETE", "/v1/users/{user_id}"),
        ("POST", "/v1/keys"),
        ("DELETE", "/v1/keys/{name}"),
    }
)


# export (hrt/export.py, hrt/api/export.py): a user's records, streamed; audited like a write
EXPORT_ROUTE = ("GET", "/v1/users/{user_id}/export")
ROUTE_SCOPES[EXPORT_ROUTE] = "export"
AUDITED = AUDITED | {EXPORT_ROUTE}


class RequestCounter:
    """Counts every HTTP response by route and status (and by key, for authenticated requests): a
    plain ASGI middleware (Starlette's ``BaseHTTPMiddleware`` cost about half a millisecond a
    request); an exception that escapes the app counts as 500, the status the server then answers
    with."""

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


EntityKindPath = Literal["memory_unit", "concept", "artifact"]
UserIdPath = Annotated[str, Field(max_length=128)]

AUTH_OFF_WARNING = "HRT_AUTH=off: every route answers without an API key (development on loopback only)"


def principal(request: Request) -> Principal:
    """The key the guard authenticated for this request."""
    found = request.state.principal
    assert isinstance(found, Principal)
    return found


Caller = Annotated[Principal, Depends(principal)]


def create_app(settings: Settings | None = None, service: HRTService | None = None) -> FastAPI:
    settings = settings or Settings()
    state: dict[str, Any] = {}
    limiter = KeyLimiter(settings.key_rate_limit, settings.key_max_concurrency)
    ingest_bodies = IngestBodies(settings.max_ingest_bodies, settings.ingest_retry_after_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = service is None
        if owned:
            state["svc"] = await HRTService(settings).start(background_projector=True)
        try:
            if settings.auth == "on":
                ring = KeyRing(svc().records, refresh_s=settings.auth_refresh_s)
                try:
                    await ring.refresh()
                except StoreUnavailable as exc:  # read on the first request once the store answers
                    log.warning("the API keys could not be read at start (%s): requests get 503 until they are", exc)
                else:
                    if ring.active_count() == 0:
                        raise HRTError(NO_KEY_MESSAGE)
                state["keyring"] = ring
            elif not is_loopback(settings.host):
                raise HRTError(auth_off_refused(settings.host))
            else:
                log.warning("%s", AUTH_OFF_WARNING)
            async with mcp_endpoint.running():  # the MCP session manager's task group (/mcp)
                yield
        finally:
            ring = state.pop("keyring", None)
            if ring is not None:
                try:
                    await ring.flush()
                except Exception as exc:  # last use is bookkeeping; shutting down goes on
                    log.warning("recording the keys' last use at shutdown failed: %s", exc)
            if owned:
                await state["svc"].close()

    app = FastAPI(
        title="HRT: Hybrid Retrieval Tool",
        version=__version__,
        description=(
            "Deterministic knowledge-graph retrieval returning AugmentedMemoryContext V9.4. Every route but "
            "/healthz needs `Authorization: Bearer <API key>` (`hrt keys create`)."
        ),
        lifespan=lifespan,
        docs_url=None,  # a browser page cannot send the key; `hrt export-schema` writes the documents
        redoc_url=None,
    )
    if service is not None:
        state["svc"] = service
    # MCP over streamable HTTP at /mcp: behind the Guard like every route (any valid key; each tool
    # checks its own scope and users against the key, hrt/mcp_server.py, which imports hrt.api)
    from hrt.mcp_server import MCPEndpoint, build_server, request_principal

    mcp_endpoint = MCPEndpoint(build_server(lambda: svc(), request_principal))

    def svc() -> HRTService:
        result = state["svc"]
        assert isinstance(result, HRTService)
        return result

    def keyring() -> KeyRing:
        # made at start by the lifespan (which checks that a key exists); an app driven without
        # its lifespan (an in-process test client) makes it on first use
        ring = state.get("keyring")
        if ring is None:
            ring = state["keyring"] = KeyRing(svc().records, refresh_s=settings.auth_refresh_s)
        assert isinstance(ring, KeyRing)
        return ring

    def count_request(scope: Scope, status: int) -> None:
        if "svc" not in state:
            return
        metrics = svc().metrics
        path = getattr(scope.get("route"), "path", "unmatched")
        metrics.requests.labels(route=path, status=str(status)).inc()
        caller = scope.get("state", {}).get("principal")
        if isinstance(caller, Principal):
            metrics.key_requests.labels(key=caller.key_id, status=str(status)).inc()

    def count_refusal(exc: HRTError) -> None:
        reason = refusal_reason(exc)
        if reason is not None and "svc" in state:
            svc().metrics.auth_refusals.labels(reason=reason).inc()

    install_error_handlers(app, count_refusal)

    @app.post(
        "/v1/retrieve",
        response_class=Response,
        responses={
            200: {
                "description": "AugmentedMemoryContext V9.4 (canonical JSON)",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AugmentedMemoryContext"}}},
            },
            **ERROR_RESPONSES,
        },
        summary="Ground key phrases, expand, score and return the AugmentedMemoryContext V9.4 (scope: retrieve)",
    )
    async def retrieve(request: RetrieveRequest, caller: Caller) -> Response:
        caller.require_users([request.user_id])
        result, timings = await svc().retrieve_timed(request)
        server_timing = ", ".join(f"{stage};dur={sec * 1000:.2f}" for stage, sec in timings.items())
        return Response(
            content=result.canonical_json().encode(),
            media_type="application/json",
            headers={"Server-Timing": server_timing},
        )

    @app.post(
        "/v1/ingest",
        response_model=WriteSummary,
        responses=ERROR_RESPONSES,
        summary="Upsert or delete records in one transaction (scope: ingest)",
    )
    async def ingest(request: Request, caller: Caller) -> WriteSummary:
        audit = request.state.audit = {"users": [], "records": 0}
        # the body first, bounded in size and time (BodyLimit) and in bodies at once per key
        # (IngestBodies): a slow client never holds a write slot, which the write then takes at
        # once or answers 429. Decoding and validating thousands of records takes seconds, in a
        # worker thread.
        with ingest_bodies.place(caller.key_id):
            raw = await request.body()
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        with svc().ingest_slot():
            records = await asyncio.to_thread(parse_ingest_body, raw, ctype, settings.max_ingest_records)
            del raw
            users = sorted({r.user_id for r in records})
            audit.update(users=users, records=len(records))
            caller.require_users(users)  # before anything is written
            result = await svc().ingest(records, written_by=written_by(caller))
        audit.update(upserted=result.upserted, deleted=result.deleted)
        return WriteSummary(upserted=result.upserted, deleted=result.deleted)

    @app.post(
        "/v1/conversations",
        response_model=ConversationResult,
        responses=ERROR_RESPONSES,
        summary="Messages of one session of one user in, as memory units linked to what they mention, "
        "in one transaction (scope: ingest)",
    )
    async def conversations(request: Request, caller: Caller) -> ConversationResult:
        audit = request.state.audit = {"users": [], "records": 0, "messages": 0}
        # as an ingest: the body bounded (BodyLimit, HRT_MAX_INGEST_BODY_BYTES) and received in an
        # ingest body place, validated and written in a write slot, the user checked before writing
        with ingest_bodies.place(caller.key_id):
            raw = await request.body()
        with svc().ingest_slot():
            body = await asyncio.to_thread(parse_conversation_body, raw)
            del raw
            audit.update(users=[body.user_id], records=len(body.messages), messages=len(body.messages))
            caller.require_users([body.user_id])  # before anything is written
            result = await svc().add_messages(body, written_by=written_by(caller))
        audit.update(upserted=sum(m.status != "unchanged" for m in result.messages))
        return result

    @app.delete(
        "/v1/users/{user_id}/entities/{kind}/{entity_id}",
        response_model=WriteSummary,
        responses=ERROR_RESPONSES,
        summary="Delete one entity and its edges in every store (scope: ingest)",
    )
    async def delete_entity(
        request: Request, user_id: UserIdPath, kind: EntityKindPath, entity_id: UserIdPath, caller: Caller
    ) -> WriteSummary:
        request.state.audit = {"users": [user_id], "records": 1}
        _check_id(user_id, "user_id")
        caller.require_users([user_id])
        _check_id(entity_id, "entity_id")
        n = await svc().delete_entity(user_id, Kind(kind), entity_id)
        request.state.audit.update(deleted=n)
        return WriteSummary(upserted=0, deleted=n)

    @app.post(
        "/v1/users/{user_id}/concepts/{concept_id}/merge",
        response_model=MergeResult,
        responses=ERROR_RESPONSES,
        summary="Merge concepts into one: their relations, names and aliases move onto it, they are deleted, "
        "in every store (scope: ingest)",
    )
    async def merge_concepts(
        request: Request, user_id: UserIdPath, concept_id: UserIdPath, body: MergeRequest, caller: Caller
    ) -> MergeResult:
        request.state.audit = {"users": [user_id], "records": len(body.ids), "target_concept": concept_id}
        _check_id(user_id, "user_id")
        caller.require_users([user_id])
        _check_id(concept_id, "concept_id")
        result = await svc().merge_concepts(user_id, concept_id, body.ids)
        request.state.audit.update(deleted=len(result.merged), upserted=result.relations_moved)
        return result

    @app.delete(
        "/v1/users/{user_id}",
        response_model=WriteSummary,
        responses=ERROR_RESPONSES,
        summary="Delete everything of one user (scope: admin)",
    )
    async def delete_user(request: Request, user_id: UserIdPath, caller: Caller) -> WriteSummary:
        request.state.audit = {"users": [user_id], "records": 0}
        _check_id(user_id, "user_id")
        caller.require_users([user_id])
        n = await svc().delete_user(user_id)
        request.state.audit.update(deleted=n)
        return WriteSummary(upserted=0, deleted=n)

    @app.get(
        "/v1/users/{user_id}/stats",
        response_model=UserStats,
        responses=ERROR_RESPONSES,
        summary="Counts of one user's records (scope: retrieve)",
    )
    async def user_stats(user_id: UserIdPath, caller: Caller) -> UserStats:
        _check_id(user_id, "user_id")
        caller.require_users([user_id])
        return UserStats(**await svc().records.counts(user_id))

    # --- reading and browsing entities (#33; hrt/browse.py) ------------------------------------

    @app.get(
        "/v1/users/{user_id}/entities/{kind}/{entity_id}",
        response_model=EntityView,
        responses=ERROR_RESPONSES,
        summary="One entity as ingested, with its relations, validity, supersession and writer (scope: retrieve)",
    )
    async def get_entity(
        user_id: UserIdPath,
        kind: EntityKindPath,
        entity_id: UserIdPath,
        caller: Caller,
        relation_limit: Annotated[int, Query(ge=1, le=MAX_RELATION_LIMIT)] = DEFAULT_RELATION_LIMIT,
    ) -> EntityView:
        _check_id(user_id, "user_id")
        caller.require_users([user_id])
        return await read_entity(svc().records, user_id, Kind(kind), entity_id, relation_limit)

    @app.get(
        "/v1/users/{user_id}/entities",
        response_model=EntityPage,
        responses=ERROR_RESPONSES,
        summary="A page of one user's entities in id order, filtered, with the next page's cursor (scope: retrieve)",
    )
    async def list_entities(
        user_id: UserIdPath,
        caller: Caller,
        kind: EntityKindPath | None = None,
        tags: Annotated[list[str] | None, Query(max_length=MAX_FILTER_VALUES)] = None,
        agent: Annotated[list[str] | None, Query(max_length=MAX_FILTER_VALUES)] = None,
        created_after: Annotated[str | None, Query(max_length=64)] = None,
        created_before: Annotated[str | None, Query(max_length=64)] = None,
        valid_at: Annotated[str | None, Query(max_length=64)] = None,
        prefix: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
        include_invalidated: bool = False,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
        cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
    ) -> EntityPage:
        _check_id(user_id, "user_id")
        caller.require_users([user_id])
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
        )
        return await browse_entities(svc().records, user_id, request, svc().clock())

    export_slots = ExportSlots()

    @app.get(
        "/v1/users/{user_id}/export",
        response_class=Response,
        responses={
            200: {
                "description": "the user's records, one JSON object per line in the ingest format, streamed",
                "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
            },
            **ERROR_RESPONSES,
        },
        summary="One user's records as NDJSON in the ingest format, streamed (scope: export)",
    )
    async def export_user(request: Request, user_id: UserIdPath, caller: Caller) -> Response:
        audit = request.state.audit = {"users": [user_id], "records": 0}
        _check_id(user_id, "user_id")
        caller.require_users([user_id])
        return await export_response(svc().records, user_id, export_slots, audit)

    def manageable(caller: Principal, users: tuple[str, ...] | None) -> bool:
        """An admin key manages the keys whose users are all its own (every key, for all users)."""
        return caller.users is None or (users is not None and set(users) <= caller.users)

    @app.get(
        "/v1/keys",
        response_model=list[KeyInfo],
        responses=ERROR_RESPONSES,
        summary="The API keys this admin key manages, never a secret (scope: admin)",
    )
    async def list_keys(caller: Caller) -> list[KeyInfo]:
        now = time.time()
        keys = await svc().records.keys()
        by_id = {k.key_id: k for k in keys}
        return [KeyInfo(**k.describe(now, lineage_status(k, by_id, now))) for k in keys if manageable(caller, k.users)]

    @app.post(
        "/v1/keys",
        response_model=NewKey,
        status_code=201,
        responses=ERROR_RESPONSES,
        summary="Create an API key within this admin key's scopes and users; its secret is shown once (scope: admin)",
    )
    async def create_key(request: Request, body: KeyRequest, caller: Caller) -> NewKey:
        now = time.time()
        request.state.audit = {"users": body.users or ["*"], "records": 1}
        if not set(body.scopes) <= caller.scopes:
            raise Forbidden("a key cannot grant a scope it lacks", reason="scope", field="scopes")
        if body.users is None:
            if caller.users is not None:
                raise Forbidden("a key for some users cannot create one for every user", reason="user", field="users")
        else:
            caller.require_users(body.users)
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
        await svc().records.create_key(record)
        keyring().forget(record.key_id)  # read again at the next request
        request.state.audit.update(upserted=1, target_key=record.key_id)
        log.info("key %s (%r) created over HTTP by key %s", record.key_id, record.name, caller.key_id)
        return answer

    @app.delete(
        "/v1/keys/{name}",
        response_model=KeyInfo,
        responses=ERROR_RESPONSES,
        summary="Revoke the live key of this name (or key id), at once in this server (scope: admin)",
    )
    async def revoke_key(request: Request, name: Annotated[str, Field(max_length=64)], caller: Caller) -> KeyInfo:
        now = time.time()
        request.state.audit = {"users": [], "records": 1}
        target = revocable(caller, [k for k in live_keys_named(await svc().records.keys(), name)], name)
        done = await svc().records.revoke_key(target.key_id, now)
        if done is None:
            raise NotFound(f"no live key named {name!r} that this key manages", field="name")
        keyring().forget(done.key_id)
        request.state.audit.update(users=list(done.users or ["*"]), deleted=1, target_key=done.key_id)
        log.info("key %s (%r) revoked over HTTP by key %s", done.key_id, done.name, caller.key_id)
        return KeyInfo(**done.describe(now))

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

    @app.get("/healthz", response_model=Health, summary="Liveness (no key needed)")
    async def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Readiness,
        responses={
            **ERROR_RESPONSES,
            503: {"model": Readiness, "description": "a store is unavailable or caches are warming"},
        },
        summary="Readiness of every store and cache (scope: ops)",
    )
    async def readyz() -> Response:
        service = svc()
        checks: dict[str, Literal["ok", "unavailable"]] = {}
        for name, probe in (
            ("records", service.records.ping),
            ("graph", service.graph.ping),
            ("vectors", service.vectors.ping),
        ):
            try:
                await probe()
                checks[name] = "ok"
            except Exception as exc:  # readiness reports, it never raises
                log.warning("readiness check of %s failed: %s", name, exc)
                checks[name] = "unavailable"
        ok = all(v == "ok" for v in checks.values())
        warming = service.preload_state == "loading"
        warnings = [AUTH_OFF_WARNING] if settings.auth == "off" else []
        if service.projector is not None and checks["records"] == "ok":
            try:  # dead outbox events, a projection far behind: ready, but say so
                warnings += await service.projector.warnings()
            except Exception as exc:  # readiness reports, it never raises
                log.warning("readiness check of the outbox failed: %s", exc)
        body = Readiness(
            status="unavailable" if not ok else "warming" if warming else "ready",
            stores=checks,
            caches=service.preload_state,
            embedder=service.embedder.name,
            reranker=service.tool.reranker.name,
            deployment=service.deployment,
            # Neo4j: "procedure" (hrt.expand) or "cypher"; the embedded graph walks in process
            graph_expansion=service.graph.expansion_path,
            auth=settings.auth,
            warnings=warnings,
        )
        code = 200 if ok and not warming else 503
        return Response(body.model_dump_json(), status_code=code, media_type="application/json")

    @app.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text"},
            **ERROR_RESPONSES,
        },
        summary="Prometheus metrics (scope: ops)",
    )
    async def metrics(caller: Caller) -> Response:
        text = svc().metrics.render()
        if caller.users is not None:  # a key for some users sees its own series only, no other key's
            text = without_other_keys(text, caller.key_id)
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
                "type": "http",
                "scheme": "bearer",
                "description": f"an HRT API key (hrt_<id>_<secret>); scopes: {', '.join(SCOPES)}",
            }
            components = schema["components"].setdefault("schemas", {})
            components["AugmentedMemoryContext"] = _response_schema(schema)
            body, defs = ingest_body_schema(ref_template="#/components/schemas/{model}")
            for name, definition in defs.items():
                components.setdefault(name, definition)
            schema["paths"]["/v1/ingest"]["post"]["requestBody"] = {
                "required": True,
                "content": {
                    "application/json": {"schema": body},
                    "application/x-ndjson": {"schema": {"type": "string", "description": "one JSON record per line"}},
                },
            }
            # its Message is not the retrieve request's (hrt.contract.Message): prefixed apart
            prefixed = "#/components/schemas/Conversation{model}"
            conversation = ConversationRequest.model_json_schema(ref_template=prefixed)
            for name, definition in conversation.pop("$defs", {}).items():
                components[f"Conversation{name}"] = definition
            components["ConversationRequest"] = conversation
            schema["paths"]["/v1/conversations"]["post"]["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ConversationRequest"}}},
            }
            schema["security"] = [{"bearer": []}]
            schema["paths"]["/healthz"]["get"]["security"] = []
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.router.routes.append(mcp_endpoint.route("/mcp"))

    app.add_middleware(
        BodyLimit,
        default_limit=settings.max_body_bytes,
        limits={"/v1/ingest": settings.max_ingest_body_bytes, "/v1/conversations": settings.max_ingest_body_bytes},
        timeout_s=settings.body_read_timeout_s,
    )
    app.add_middleware(
        Guard,
        routes=lambda: list(app.router.routes),
        scopes=ROUTE_SCOPES,
        audited=AUDITED,
        keyring=keyring if settings.auth == "on" else None,
        limiter=limiter,
        on_refusal=count_refusal,
    )
    app.add_middleware(RequestCounter, count=count_request)
    return app


NO_KEY_MESSAGE = (
    "no API key is defined, and every route but /healthz needs one: create one with "
    "`hrt keys create --name NAME --scope retrieve --user USER` (against the same store), "
    "or set HRT_AUTH=off to serve without keys on a loopback address"
)


def _response_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The AugmentedMemoryContext's JSON Schema with its definitions moved into the document's
    components (the route answers raw canonical JSON, so FastAPI does not generate it)."""
    full = AugmentedMemoryContext.model_json_schema(ref_template="#/components/schemas/{model}")
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name, definition in full.pop("$defs", {}).items():
        components.setdefault(name, definition)
    return full


def _check_id(value: str, field: str) -> None:
    if not valid_id(value):
        raise InvalidInput(f"{value!r} is not a valid {field}", field=field)
