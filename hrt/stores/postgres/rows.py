"""Row helpers shared by the PostgreSQL record store and its outbox lease: entity and relation
rows read by id, and the parallel column arrays an ``unnest`` reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import psycopg

from hrt.records import ENTITY_MODELS, Kind, Relation
from hrt.stores.base import EntityRow
from hrt.stores.projection import RELATION_COLUMNS, passage_rows, relation_from_row

T = TypeVar("T")


def _last_per_key(items: Sequence[T], key: Callable[[T], tuple[str, ...]]) -> list[T]:
    """The last of ``items`` for each key, in key order (the order rows are locked in)."""
    last = {key(item): item for item in items}
    return [last[k] for k in sorted(last)]


def _columns(items: Sequence[T], row: Callable[[T], Sequence[Any]], width: int) -> list[list[Any]]:
    """``items`` as ``width`` parallel lists, one per column: the arrays an ``unnest`` reads."""
    columns: list[list[Any]] = [[] for _ in range(width)]
    for item in items:
        for column, value in zip(columns, row(item), strict=True):
            column.append(value)
    return columns


async def _entity_rows(conn: psycopg.AsyncConnection[Any], user_id: str, ids: Sequence[str]) -> dict[str, EntityRow]:
    cur = await conn.execute(
        "SELECT id, kind, data, vector, version, passages FROM hrt_entities WHERE user_id = %s AND id = ANY(%s)",
        (user_id, list(ids)),
    )
    rows = await cur.fetchall()
    out: dict[str, EntityRow] = {}
    for ident, kind, data, vec, version, passages in rows:
        own = np.frombuffer(vec, dtype=np.float32)
        out[ident] = (ENTITY_MODELS[Kind(kind)].model_validate(data), own, version, passage_rows(passages, len(own)))
    return out


async def _relation_rows(
    conn: psycopg.AsyncConnection[Any], user_id: str, keys: Sequence[tuple[str, str, str]]
) -> dict[tuple[str, str, str], Relation]:
    if not keys:
        return {}
    columns = ", ".join(f"r.{c}" for c in RELATION_COLUMNS.split(", "))
    cur = await conn.execute(
        f"SELECT {columns} FROM hrt_relations r "
        "JOIN unnest(%s::text[], %s::text[], %s::text[]) AS k(source, target, type) "
        "ON r.source = k.source AND r.target = k.target AND r.type = k.type WHERE r.user_id = %s",
        ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys], user_id),
    )
    rows = await cur.fetchall()
    return {(row[0], row[1], row[2]): relation_from_row(user_id, row) for row in rows}
