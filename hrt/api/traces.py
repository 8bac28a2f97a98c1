"""The span of each HTTP request (OpenTelemetry, :mod:`hrt.tracing`): a plain ASGI middleware,
outermost, in the app only when tracing is on.

Its name is the method and the route's template (``POST /v1/retrieve``,
``GET /v1/users/{user_id}/entities``), never the path itself, which names users and entities;
its parent is the caller's ``traceparent`` when it sent one. The retrieval's spans (stages, store
calls) are its children.
"""

from __future__ import annotations

from hrt.api.guard import ASGIApp, Receive, Scope, Send, StatusNote
from hrt.tracing import Tracing


class TraceRequests:
    def __init__(self, app: ASGIApp, tracing: Tracing) -> None:
        self.app = app
        self.tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = str(scope["method"])
        noted = StatusNote(send)
        with self.tracing.request_span(scope.get("headers", []), method) as span:
            try:
                await self.app(scope, receive, noted)
            finally:
                status = noted.status
                route = getattr(scope.get("route"), "path", None)
                if route is not None:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    from opentelemetry.trace import Status, StatusCode

                    span.set_status(Status(StatusCode.ERROR))
