"""The FastAPI application: the routers of :mod:`hrt.api.routes`, ``/mcp``, and the middleware in
front of them.

Every route but ``GET /healthz`` needs an API key (``hrt/auth.py``): :class:`hrt.api.guard.Guard`
authenticates it and checks the scope the route declares (:mod:`hrt.api.access`) before the
request reaches the route; each route then checks that the key may act for the users it names,
before it reads or writes anything.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from hrt import __version__
from hrt.api.access import route_rules
from hrt.api.bodies import BodyLimit
from hrt.api.errors import install_error_handlers
from hrt.api.guard import ASGIApp, Guard, Receive, Scope, Send, StatusNote
from hrt.api.openapi import openapi_document
from hrt.api.routes import ROUTERS
from hrt.api.state import AUTH_OFF_WARNING, ServerState
from hrt.api.ui import ui_files, ui_paths, ui_routes
from hrt.auth import KeyRing, Principal, auth_off_refused, is_loopback
from hrt.config import Settings
from hrt.errors import HRTError, StoreUnavailable
from hrt.front import count_refusal as refused
from hrt.service import HRTService
from hrt.tracing import Tracing, tracing_from

log = logging.getLogger(__name__)

__all__ = ["AUTH_OFF_WARNING", "NO_KEY_MESSAGE", "create_app"]

NO_KEY_MESSAGE = (
    "no API key is defined, and every route but /healthz needs one: create one with "
    "`hrt keys create --name NAME --scope retrieve --user USER` (against the same store), "
    "or set HRT_AUTH=off to serve without keys on a loopback address"
)


class RequestCounter:
    """Counts every HTTP response by route and status (and by key, for authenticated requests): a
    plain ASGI middleware; an exception that escapes the app counts as 500, the status the server
    then answers with."""

    def __init__(self, app: ASGIApp, count: Callable[[Scope, int], None]) -> None:
        self.app = app
        self.count = count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        noted = StatusNote(send)
        try:
            await self.app(scope, receive, noted)
        finally:
            self.count(scope, noted.status)


async def _open_keyring(state: ServerState) -> KeyRing:
    ring = KeyRing(
        state.service.records,
        refresh_s=state.settings.auth_refresh_s,
        outage_grace_s=state.settings.auth_outage_grace_s,
    )
    try:
        await ring.refresh()
    except StoreUnavailable as exc:  # read on the first request once the store answers
        log.warning("the API keys could not be read at start (%s): requests get 503 until they are", exc)
    else:
        if ring.active_count() == 0:
            raise HRTError(NO_KEY_MESSAGE)
    return ring


def _lifespan(state: ServerState, mcp_endpoint: Any, tracing: Tracing | None) -> Callable[[FastAPI], Any]:
    """Starts the service unless one was given, opens the key ring (HRT_AUTH=on) or refuses to
    serve without keys off loopback, and runs the MCP session manager."""
    settings = state.settings

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = not state.has_service
        if owned:
            state.set_service(await HRTService(settings).start(background_projector=True))
        if tracing is not None and state.service.tool.tracing is None:
            state.service.tool.trace_stores(tracing)
        try:
            if settings.auth == "on":
                state.set_keyring(await _open_keyring(state))
            elif not is_loopback(settings.host):
                raise HRTError(auth_off_refused(settings.host))
            else:
                log.warning("%s", AUTH_OFF_WARNING)
            async with mcp_endpoint.running():  # the MCP session manager's task group (/mcp)
                yield
        finally:
            ring = state.take_keyring()
            if ring is not None:
                try:
                    await ring.flush()
                except Exception as exc:  # last use is bookkeeping; shutting down goes on
                    log.warning("recording the keys' last use at shutdown failed: %s", exc)
            if owned:
                await state.service.close()
            if tracing is not None:
                tracing.shutdown()  # the spans still buffered go to the exporter

    return lifespan


def _counters(state: ServerState) -> tuple[Callable[[Scope, int], None], Callable[[HRTError], None]]:
    """The request metric's and the refusal metric's counting functions."""

    def count_request(scope: Scope, status: int) -> None:
        if not state.has_service:
            return
        metrics = state.service.metrics
        path = getattr(scope.get("route"), "path", "unmatched")
        metrics.requests.labels(route=path, status=str(status)).inc()
        caller = scope.get("state", {}).get("principal")
        if isinstance(caller, Principal):
            metrics.key_requests.labels(key=caller.key_id, status=str(status)).inc()

    def count_refusal(exc: HRTError) -> None:
        refused(exc, lambda: state.service.metrics if state.has_service else None)

    return count_request, count_refusal


def create_app(
    settings: Settings | None = None, service: HRTService | None = None, tracing: Tracing | None = None
) -> FastAPI:
    """The app. ``tracing``: OpenTelemetry's (a test's exporter); None: as the OTEL_* variables say."""
    settings = settings or Settings()
    tracing = tracing or tracing_from(settings.tracing_exporter())
    state = ServerState(settings, service)
    if tracing is not None and service is not None and service.tool.tracing is None:
        service.tool.trace_stores(tracing)
    # MCP over streamable HTTP at /mcp: behind the Guard like every route (any valid key; each tool
    # checks its own scope and users against the key, hrt/mcp_server.py)
    from hrt.mcp_http import MCPEndpoint
    from hrt.mcp_server import build_server, request_principal

    mcp_endpoint = MCPEndpoint(build_server(lambda: state.service, request_principal, places=state.ingest_bodies.place))
    app = FastAPI(
        title="HRT: Hybrid Retrieval Tool",
        version=__version__,
        description=(
            "Deterministic knowledge-graph retrieval returning AugmentedMemoryContext V9.4. Every route but "
            "/healthz needs `Authorization: Bearer <API key>` (`hrt keys create`)."
        ),
        lifespan=_lifespan(state, mcp_endpoint, tracing),
        docs_url=None,  # a browser page cannot send the key; `hrt export-schema` writes the documents
        redoc_url=None,
    )
    app.state.hrt = state
    count_request, count_refusal = _counters(state)
    install_error_handlers(app, count_refusal)
    for router in ROUTERS:
        # the routes themselves, not include_router's wrapper: the Guard and the request metric
        # match the request against each route
        app.router.routes.extend(router.routes)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.router.routes.append(mcp_endpoint.route("/mcp"))
    ui = ui_files()  # the inspector (/ui): static files, no data, no key
    app.router.routes.extend(ui_routes(ui))

    _add_middleware(app, state, ui_paths(ui), count_request, count_refusal, tracing)
    return app


def _add_middleware(
    app: FastAPI,
    state: ServerState,
    ui_open: frozenset[str],
    count_request: Callable[[Scope, int], None],
    count_refusal: Callable[[HRTError], None],
    tracing: Tracing | None,
) -> None:
    """The middleware around the routes, outermost last: the body limits of each route (from its
    declared rules), the Guard (keys, scopes, limits, audit), the request metric and the traces."""
    settings = state.settings
    rules = route_rules(app.router.routes)
    app.add_middleware(
        BodyLimit,
        default_limit=settings.max_body_bytes,
        limits=dict.fromkeys(sorted(rules.bulk_paths), settings.max_ingest_body_bytes),
        timeout_s=settings.body_read_timeout_s,
    )
    app.add_middleware(
        Guard,
        routes=lambda: list(app.router.routes),
        scopes=rules.scopes,
        audited=rules.audited,
        open_paths=rules.open_paths | ui_open,
        keyring=state.keyring if settings.auth == "on" else None,
        limiter=state.limiter,
        body_bytes=state.body_bytes,
        tarpit=state.tarpit,
        on_tenant=state.note_tenant,
        on_refusal=count_refusal,
    )
    app.add_middleware(RequestCounter, count=count_request)
    if tracing is not None:
        from hrt.api.traces import TraceRequests

        app.add_middleware(TraceRequests, tracing=tracing)
