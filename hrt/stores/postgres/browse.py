"""Reading and browsing entities in PostgreSQL (``RecordStore.entity_detail`` and
``RecordStore.browse`` of :class:`hrt.stores.postgres.records.PostgresRecordStore`).

Everything is in the record store: ``hrt_entities`` (the record, its ts and effective validity
columns, ``title_key``, the writer) and ``hrt_relations``. Every statement filters on ``user_id``
and is parameterised. Pages come in byte order of ids (``COLLATE "C"``, the embedded store's
order whatever the database's collation), from the indexes of migration 0008.
"""

from __future__ import annotations

from typing import Any

import psycopg

from hrt.metadata_filter import postgres_where_named
from hrt.records import ENTITY_MODELS, Kind
from hrt.stores.base import BrowseFilter, EntityDetail, StoredEntity
from hrt.stores.projection import link

# what an operator sees of the other end (hrt.records.entity_label)
_LABEL = (
    "CASE WHEN n.kind = 'concept' THEN n.data->>'name' "
    "ELSE coalesce(nullif(n.data->>'title', ''), left(n.data->>'content', 80)) END"
)
_EDGE_COLUMNS = "source, target, type, weight, relation_type, valid_from, valid_to"
# an entity's relations, both directions, ordered and cut to the limit on the relations alone, then
# joined to the other end (as the embedded store's)
_LINKS = (
    f"SELECT l.*, n.kind, {_LABEL}, coalesce(n.valid_from, n.ts) FROM ("
    f'SELECT {_EDGE_COLUMNS}, 1 AS outgoing, target COLLATE "C" AS other FROM hrt_relations '
    "WHERE user_id = %(u)s AND source = %(i)s {only} "
    f"UNION ALL SELECT {_EDGE_COLUMNS}, 0, source FROM hrt_relations WHERE user_id = %(u)s AND target = %(i)s "
    "{only} ORDER BY {order} LIMIT %(n)s) l JOIN hrt_entities n ON n.user_id = %(u)s AND n.id = l.other "
    "ORDER BY {order}"
)
_BY_TYPE = "type, outgoing DESC, weight DESC, other"
_BY_OTHER = "other, outgoing DESC"
_SUPERSEDES = "AND type = 'SUPERSEDES'"

# as the embedded store's NOT_ENDED: its own end, else no successor started by then
_NOT_ENDED = (
    "(CASE WHEN e.valid_to IS NOT NULL THEN %(t)s < e.valid_to ELSE NOT EXISTS (SELECT 1 FROM hrt_relations s "
    "JOIN hrt_entities o ON o.user_id = s.user_id AND o.id = s.source WHERE s.user_id = e.user_id "
    "AND s.target = e.id AND s.type = 'SUPERSEDES' AND coalesce(o.valid_from, o.ts) <= %(t)s) END)"
)


async def entity_detail(
    conn: psycopg.AsyncConnection[Any], user_id: str, kind: Kind, ident: str, limit: int
) -> EntityDetail | None:
    """In one transaction (a REPEATABLE READ snapshot, opened by the caller): the record, its
    links, their count."""
    cur = await conn.execute(
        "SELECT data, version, written_at, written_by FROM hrt_entities WHERE user_id = %s AND id = %s AND kind = %s",
        (user_id, ident, kind.value),
    )
    row = await cur.fetchone()
    if row is None:
        return None
    stored = StoredEntity(ENTITY_MODELS[kind].model_validate(row[0]), int(row[1]), row[2], row[3])
    keys = {"u": user_id, "i": ident, "n": limit}
    cur = await conn.execute(_LINKS.format(only="", order=_BY_TYPE), keys)
    rows = await cur.fetchall()
    supersession: list[Any] = []
    if kind is not Kind.CONCEPT:  # SUPERSEDES joins memory units and artifacts
        cur = await conn.execute(_LINKS.format(only=_SUPERSEDES, order=_BY_OTHER), {**keys, "n": None})
        supersession = await cur.fetchall()
    cur = await conn.execute(
        "SELECT (SELECT count(*) FROM hrt_relations WHERE user_id = %(u)s AND source = %(i)s) + "
        "(SELECT count(*) FROM hrt_relations WHERE user_id = %(u)s AND target = %(i)s), "
        "(SELECT count(*) FROM hrt_relations WHERE user_id = %(u)s AND target = %(i)s AND type = 'MENTIONS')",
        keys,
    )
    counts = await cur.fetchone()
    assert counts is not None
    return EntityDetail(
        stored=stored,
        relations=[link(user_id, r) for r in rows],
        relation_count=int(counts[0]),
        supersession=[link(user_id, r) for r in supersession],
        mentioned_by=int(counts[1]) if kind is Kind.CONCEPT else 0,
    )


async def browse(conn: psycopg.AsyncConnection[Any], user_id: str, where: BrowseFilter) -> list[StoredEntity]:
    clauses = ["e.user_id = %(u)s"]
    params: dict[str, Any] = {"u": user_id, "n": where.limit}
    kind = where.kind
    units_only = bool(where.tags or where.agents or where.metadata is not None)
    if units_only and kind in (None, Kind.MEMORY_UNIT):
        kind = Kind.MEMORY_UNIT  # only memory units carry tags, an agent and metadata: walk their ids alone
    elif units_only and kind is not None:
        return []
    if kind is not None:
        clauses.append("e.kind = %(k)s")
        params["k"] = kind.value
    if where.after is not None:
        clauses.append('e.id COLLATE "C" > %(a)s')
        params["a"] = where.after
    if where.prefix:
        # title_key is COLLATE "C": the prefix's keys are one range of hrt_entities_title
        clauses.append("e.title_key >= %(p)s AND e.title_key < %(q)s")
        params.update(p=where.prefix, q=where.prefix + "\U0010ffff")
    if where.agents:
        clauses.append("e.data->>'source_agent_id' = ANY(%(g)s)")
        params["g"] = list(where.agents)
    if where.tags:
        clauses.append("e.data->'tags' ?| %(tags)s")
        params["tags"] = list(where.tags)
    if where.created_after is not None:
        clauses.append("e.ts >= %(ca)s")
        params["ca"] = where.created_after
    if where.created_before is not None:
        clauses.append("e.ts < %(cb)s")
        params["cb"] = where.created_before
    if where.valid_at is not None:
        clauses.append(f"(e.valid_from IS NULL OR e.valid_from <= %(t)s) AND {_NOT_ENDED}")
        params["t"] = where.valid_at
    elif where.ended_by is not None:
        clauses.append(_NOT_ENDED)
        params["t"] = where.ended_by
    if where.metadata is not None:
        cond, named = postgres_where_named(where.metadata, "e.data")
        clauses.append(cond)
        params.update(named)
    cur = await conn.execute(
        # pg_column_size: the record's bytes as stored (compressed when large), read without
        # turning it into text a second time
        "SELECT e.kind, e.data, e.version, e.written_at, e.written_by, pg_column_size(e.data) FROM hrt_entities e "
        f'WHERE {" AND ".join(clauses)} ORDER BY e.id COLLATE "C" LIMIT %(n)s',
        params,
    )
    rows = await cur.fetchall()
    return [
        StoredEntity(ENTITY_MODELS[Kind(kind)].model_validate(data), int(version), at, by, int(size))
        for kind, data, version, at, by, size in rows
    ]
