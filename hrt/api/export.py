"""``GET /v1/users/{user_id}/export``'s response: the NDJSON of :mod:`hrt.export`, streamed.

Everything that can be refused is decided before the first byte: the key's users (403, as every
route), an unknown user (404), a full server (429, :class:`hrt.export.ExportSlots`) and a store
that does not answer (503, the snapshot is opened first). What fails after the first line cuts
the connection without the chunked body's end, so a client never takes a partial export for a
whole one; the audit line says how many lines went out and whether the last did.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from hrt.export import ExportSlots, check_exportable, export_lines
from hrt.stores.base import RecordStore

NDJSON = "application/x-ndjson"


class ExportResponse(StreamingResponse):
    """Streams the export, then releases what it held (its snapshot, its export slot), also when
    the client went away before the end."""

    def __init__(self, lines: AsyncGenerator[bytes, None], held: contextlib.AsyncExitStack, filename: str) -> None:
        super().__init__(
            lines,
            media_type=NDJSON,
            headers={"content-disposition": f'attachment; filename="{filename}"', "cache-control": "no-store"},
        )
        self._lines = lines
        self._held = held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._lines.aclose()
            await self._held.aclose()


async def export_response(
    records: RecordStore, user_id: str, slots: ExportSlots, audit: dict[str, Any]
) -> ExportResponse:
    """The response for a user the caller may export (checked by the route)."""
    await check_exportable(records, user_id)
    held = contextlib.AsyncExitStack()
    try:
        held.enter_context(slots.slot())
        reader = await held.enter_async_context(records.export_reader(user_id))
    except BaseException:
        await held.aclose()
        raise
    return ExportResponse(export_lines(reader, audit), held, f"hrt-export-{user_id}.ndjson")
