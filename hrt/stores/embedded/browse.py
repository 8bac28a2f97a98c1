"""Reading and browsing entities in the embedded SQLite file (``RecordStore.entity_detail`` and
``RecordStore.browse`` of :class:`hrt.stores.embedded.records.EmbeddedRecordStore`).

Records live in ``entities``; what the filters read (tags, agent, creation time, validity) in the
``nodes`` rows written in the same transaction; relations in ``edges``. Every statement filters on
``user_id``. Pages come in id order from the primary key (user_id, id), or from ``entities_kind``
(user_id, kind), whose rows are in id order within a kind (a WITHOUT ROWID table's index carries
the primary key); a prefix has ``entities_title`` (schema step 8).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from hrt.metadata_filter import sqlite_where
from hrt.records import ENTITY_MODELS, KIND_OF, Kind
from hrt.stores.base import BrowseFilter, EntityDetail, StoredEntity
from hrt.stores.projection import link

_EDGE_COLUMNS = "source, target, type, weight, relation_type, valid_from, valid_to"
# an entity's relations, both directions, ordered and cut to the limit on the edges alone, then
# joined to the other end's node (a hub's thousands of relations are not joined to be dropped).
# INDEXED BY: SQLite otherwise walks the user's whole primary key for a union's side it sorts.
_LINKS = (
    "SELECT l.*, n.kind, n.label, coalesce(n.valid_from, n.ts) FROM ("
    f"SELECT {_EDGE_COLUMNS}, 1 AS outgoing, target AS other FROM edges WHERE user_id = ? AND source = ? {{only}} "
    f"UNION ALL SELECT {_EDGE_COLUMNS}, 0, source FROM edges INDEXED BY edges_target "
    "WHERE user_id = ? AND target = ? {only} ORDER BY {order} LIMIT ?) l "
    "CROSS JOIN nodes n ON n.user_id = ? AND n.id = l.other ORDER BY {order}"
)
_BY_TYPE = "type, outgoing DESC, weight DESC, other"
_BY_OTHER = "other, outgoing DESC"
_SUPERSEDES = "AND type = 'SUPERSEDES'"

# the interval has not ended at the parameter: its own end, else no successor started by then
# (docs/api.md, "Facts that change"; hrt.pipeline.validity.interval_of)
NOT_ENDED = (
    "(CASE WHEN n.valid_to IS NOT NULL THEN ? < n.valid_to ELSE NOT EXISTS (SELECT 1 FROM edges s "
    "JOIN nodes o ON o.user_id = s.user_id AND o.id = s.source WHERE s.user_id = e.user_id AND s.target = e.id "
    "AND s.type = 'SUPERSEDES' AND coalesce(o.valid_from, o.ts) <= ?) END)"
)


def entity_detail(db: sqlite3.Connection, user_id: str, kind: Kind, ident: str, limit: int) -> EntityDetail | None:
    """In one read transaction (``db`` is a snapshot): the record, its links, their count."""
    row = db.execute(
        "SELECT data, version, written_at, written_by FROM entities WHERE user_id = ? AND id = ? AND kind = ?",
        (user_id, ident, kind.value),
    ).fetchone()
    if row is None:
        return None
    stored = StoredEntity(ENTITY_MODELS[kind].model_validate_json(row[0]), int(row[1]), row[2], row[3])
    both = (user_id, ident, user_id, ident)
    rows = db.execute(_LINKS.format(only="", order=_BY_TYPE), (*both, limit, user_id)).fetchall()
    supersession = []
    if kind is not Kind.CONCEPT:  # SUPERSEDES joins memory units and artifacts
        supersession = db.execute(_LINKS.format(only=_SUPERSEDES, order=_BY_OTHER), (*both, 2**31, user_id)).fetchall()
    (count,) = db.execute(
        "SELECT (SELECT count(*) FROM edges WHERE user_id = ? AND source = ?) + "
        "(SELECT count(*) FROM edges WHERE user_id = ? AND target = ?)",
        both,
    ).fetchone()
    mentioned = 0
    if kind is Kind.CONCEPT:
        (mentioned,) = db.execute(
            "SELECT count(*) FROM edges WHERE user_id = ? AND target = ? AND type = 'MENTIONS'", (user_id, ident)
        ).fetchone()
    return EntityDetail(
        stored=stored,
        relations=[link(user_id, r) for r in rows],
        relation_count=int(count),
        supersession=[link(user_id, r) for r in supersession],
        mentioned_by=int(mentioned),
    )


# a prefix matching fewer entities than this is read from entities_title and sorted by id; one
# matching more is found soon enough walking the ids (one entity in 50 or more matches)
PREFIX_RANGE_ROWS = 2000


def browse(db: sqlite3.Connection, user_id: str, where: BrowseFilter) -> list[StoredEntity]:
    clauses = ["e.user_id = ?"]
    params: list[Any] = [user_id]
    kind = where.kind
    units_only = bool(where.tags or where.agents or where.metadata is not None)
    if units_only and kind in (None, Kind.MEMORY_UNIT):
        kind = Kind.MEMORY_UNIT  # only memory units carry tags, an agent and metadata: walk their ids alone
    elif units_only and kind is not None:
        return []
    # SQLite has no statistics to choose an index by: it is told (both are usable by construction)
    index = "INDEXED BY entities_kind" if kind is not None else ""
    if where.prefix and _few_with_prefix(db, user_id, kind, where.prefix):
        index = "INDEXED BY entities_title"
    if kind is not None:
        clauses.append("e.kind = ?")
        params.append(kind.value)
    if where.after is not None:
        clauses.append("e.id > ?")
        params.append(where.after)
    if where.prefix:
        # byte order (BINARY): the prefix's keys are one range of entities_title
        clauses.append("e.title_key >= ? AND e.title_key < ?")
        params += [where.prefix, where.prefix + "\U0010ffff"]
    if where.agents:
        clauses.append(f"n.source_agent_id IN ({','.join('?' * len(where.agents))})")
        params += list(where.agents)
    if where.tags:
        clauses.append(
            f"EXISTS (SELECT 1 FROM json_each(n.tags) t WHERE t.value IN ({','.join('?' * len(where.tags))}))"
        )
        params += list(where.tags)
    if where.created_after is not None:
        clauses.append("n.ts >= ?")
        params.append(where.created_after)
    if where.created_before is not None:
        clauses.append("n.ts < ?")
        params.append(where.created_before)
    if where.valid_at is not None:
        clauses.append(f"(n.valid_from IS NULL OR n.valid_from <= ?) AND {NOT_ENDED}")
        params += [where.valid_at] * 3
    elif where.ended_by is not None:
        clauses.append(NOT_ENDED)
        params += [where.ended_by] * 2
    if where.metadata is not None:
        cond, args = sqlite_where(where.metadata, "e.data")
        clauses.append(cond)
        params += args
    rows = db.execute(
        f"SELECT e.kind, e.data, e.version, e.written_at, e.written_by FROM entities e {index} "
        "JOIN nodes n ON n.user_id = e.user_id AND n.id = e.id "
        f"WHERE {' AND '.join(clauses)} ORDER BY e.id LIMIT ?",
        (*params, where.limit),
    ).fetchall()
    return [
        StoredEntity(ENTITY_MODELS[KIND_OF[kind]].model_validate_json(data), int(version), at, by, len(data))
        for kind, data, version, at, by in rows
    ]


def _few_with_prefix(db: sqlite3.Connection, user_id: str, kind: Kind | None, prefix: str) -> bool:
    """Whether fewer than :data:`PREFIX_RANGE_ROWS` of the user's entities (of ``kind``) have a
    title starting with ``prefix``: counted in the index, up to that many."""
    extra, params = ("AND kind = ?", [kind.value]) if kind is not None else ("", [])
    (n,) = db.execute(
        "SELECT count(*) FROM (SELECT 1 FROM entities INDEXED BY entities_title WHERE user_id = ? "
        f"AND title_key >= ? AND title_key < ? {extra} LIMIT ?)",
        (user_id, prefix, prefix + "\U0010ffff", *params, PREFIX_RANGE_ROWS),
    ).fetchone()
    return int(n) < PREFIX_RANGE_ROWS
