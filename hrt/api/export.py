"""``GET /v1/users/{user_id}/export``'s response: the NDJSON of :mod:`hrt.export`, streamed.

Everything that can be refused is decided before the first byte: the key's users (403, as every
route), an unknown user (404), a full server (429, :class:`hrt.export.ExportSlots`) and a store
that does not answer (503, the snapshot is opened first). What fails after the first line cuts
the connection without the chunked body's end, so a client never takes a partial export for a
whole one; the audit line says how many lines went out and whether the last did.

A client that stops reading is cut the same way once a chunk has waited ``HRT_EXPORT_IDLE_S`` to be
taken (the server's send blocks while the connection's buffers are full): its export slot and its
read snapshot (which would hold back SQLite's WAL checkpoint) go with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from hrt.export import ExportSlots, check_exportable, export_lines
from hrt.stores.base import RecordStore

log = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"


class ExportIdle(Exception):
    """The client took no chunk for ``HRT_EXPORT_IDLE_S``: the stream is cut."""


async def _released_at_end(
    lines: AsyncGenerator[bytes, None], held: contextlib.AsyncExitStack
) -> AsyncGenerator[bytes, None]:
    """``lines``, then ``held`` released before the body's end is sent: a client that starts its
    next export on reading the last byte finds the slot free."""
    async for piece in lines:
        yield piece
    await held.aclose()


class ExportResponse(StreamingResponse):
    """Streams the export, then releases what it held (its snapshot, its export slot): before
    the body's end when the export is whole, else once the client went away before the end or
    stopped reading for ``idle_s``."""

    def __init__(
        self, lines: AsyncGenerator[bytes, None], held: contextlib.AsyncExitStack, filename: str, idle_s: float
    ) -> None:
        super().__init__(
            _released_at_end(lines, held),
            media_type=NDJSON,
            headers={"content-disposition": f'attachment; filename="{filename}"', "cache-control": "no-store"},
        )
        self._lines = lines
        self._held = held
        self._idle_s = idle_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        idle_s = self._idle_s

        async def bounded(message: Message) -> None:
            try:
                async with asyncio.timeout(idle_s):
                    await send(message)
            except TimeoutError:
                raise ExportIdle(f"the client took nothing for {idle_s:g} s (HRT_EXPORT_IDLE_S)") from None

        try:
            await super().__call__(scope, receive, bounded)
        except ExportIdle as exc:
            # the connection is closed without the body's end (the server sees an app that
            # returned mid-body): the client cannot take what it got for a whole export
            log.warning("export stream cut: %s", exc)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
            await self._lines.aclose()
            await self._held.aclose()


async def export_response(
    records: RecordStore, user_id: str, slots: ExportSlots, audit: dict[str, Any], tenant: str, idle_s: float
) -> ExportResponse:
    """The response for a user the caller may export (checked by the route), in an export slot of
    ``tenant``'s share."""
    await check_exportable(records, user_id)
    held = contextlib.AsyncExitStack()
    try:
        held.enter_context(slots.slot(tenant))
        reader = await held.enter_async_context(records.export_reader(user_id))
    except BaseException:
        await held.aclose()
        raise
    return ExportResponse(export_lines(reader, audit), held, f"hrt-export-{user_id}.ndjson", idle_s)
