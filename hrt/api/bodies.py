"""Request bodies, bounded in size and in time before anything shared is held for them.

:class:`BodyLimit` answers 413 for a body over its route's limit and 408 for one that has not
arrived in full within ``HRT_BODY_READ_TIMEOUT_S``, whether or not the client sent
Content-Length. :class:`IngestBodies` bounds the ingest bodies being received at once, one tenant
holding at most half of them: a slow or stalled client holds a place for at most the read timeout,
and never a write slot (an ingest takes its slot once its body is in).
"""

from __future__ import annotations

import asyncio
import contextlib

from hrt.api.guard import CLOSE, ASGIApp, Message, Receive, Scope, Send, send_error
from hrt.errors import HRTError, PayloadTooLarge, RateLimited, RequestTimeout
from hrt.shares import Place, Shares


class BodyLimit:
    """Pure ASGI middleware: 413 over the size limit, 408 past the read deadline; either is
    answered at once, the app is told the client went away, and what it sends afterwards is dropped."""

    def __init__(self, app: ASGIApp, default_limit: int, limits: dict[str, int], timeout_s: float) -> None:
        self.app = app
        self.default_limit = default_limit
        self.limits = limits
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.get(scope["path"], self.default_limit)
        too_large = PayloadTooLarge(f"the body is over {limit} bytes", field="body")
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await send_error(send, 413, too_large, CLOSE)
                return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        seen = 0
        complete = False
        rejected = False

        async def refuse(status: int, exc: HRTError) -> Message:
            nonlocal rejected
            rejected = True
            await send_error(send, status, exc, CLOSE)
            return {"type": "http.disconnect"}

        async def limited() -> Message:
            nonlocal seen, complete
            if rejected:
                return {"type": "http.disconnect"}
            if complete:  # the body is in: what follows is the wait for a disconnect, unbounded
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                return await refuse(
                    408,
                    RequestTimeout(
                        f"the body did not arrive within {self.timeout_s:g} s (HRT_BODY_READ_TIMEOUT_S)", field="body"
                    ),
                )
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    return await refuse(413, too_large)
                complete = not message.get("more_body", False)
            return message

        async def guarded_send(message: Message) -> None:
            if not rejected:
                await send(message)

        try:
            await self.app(scope, limited, guarded_send)
        except Exception:
            if not rejected:
                raise


class IngestBodies:
    """Ingest bodies being received at once in this process: at most ``limit``, at most half of
    them (at least one) for one tenant (:mod:`hrt.shares`: every key of the users it acts for,
    child keys included), so no tenant can take every place however many keys it makes. Memory
    held by bodies is then at most (``limit`` + the write slots) x the ingest body limit."""

    def __init__(self, limit: int, retry_after_s: int) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.shares = Shares(limit)

    def _refusal(self, held: int, mine: bool) -> RateLimited:
        return RateLimited(
            f"{held} ingest bodies are being received "
            f"{'for this tenant, its share' if mine else 'at once, as many as this server takes'} "
            "(HRT_MAX_INGEST_BODIES); retry later",
            retry_after_s=self.retry_after_s,
            reason="ingest_bodies",
        )

    def place(self, tenant: str) -> contextlib.AbstractContextManager[Place]:
        """A place for a body of ``tenant``; :meth:`Place.release` gives it back before the block
        ends (once the write holds a slot, which bounds the body's memory from then on)."""
        return self.shares.place(tenant, self._refusal)
