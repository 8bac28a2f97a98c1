"""Export: one user's memory as NDJSON in the ingest format (``GET /v1/users/{user_id}/export``,
``hrt export``), streamed a chunk at a time. docs/api.md, "Export and import".

The lines are ordered so that ingesting them in order into an empty store, all at once or cut into
consecutive batches of any size, rebuilds the same user:

1. the entities whose ``supersedes`` names nothing: memory units, concepts, artifacts, each by id;
2. the entities that supersede others, after what they supersede (by the length of their chain of
   supersessions, then kind, then id): an entity's ``supersedes`` writes its ``SUPERSEDES``
   relations at ingest, which need both ends stored;
3. the relations, by (source, target, type), but for the ``SUPERSEDES`` relations that an exported
   ``supersedes`` already writes as stored (weight 1, no type, no interval): written once, never
   twice. One that was rewritten since (an interval, a weight) is a line of its own, which wins
   over the implied one (hrt.ingest.build_batch);
4. the preferences, by (target_kind, target).

An id of ``supersedes`` whose relation is no longer stored (its target was deleted, or the relation
was) is left out of the line: ingest would refuse a supersession of an absent entity, and retrieval
reads the relations, not the field. Ids compare byte-wise in both deployments; a line is canonical
JSON (``kind`` first, then the fields by name, fields at their default left out), so two exports of
the same data are byte-identical, from either deployment.

Memory: a chunk of records, plus the ids of the entities that supersede others and their
``SUPERSEDES`` relations (a small part of a user). The conversation statistics (``POST
/v1/conversations``) are not exported: an imported user's start empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from hrt.errors import NotFound, RateLimited
from hrt.records import Artifact, Concept, EdgeType, Entity, Kind, MemoryUnit, Preference, Relation
from hrt.shares import Place, Shares
from hrt.stores.base import ExportReader, RecordStore

if TYPE_CHECKING:
    pass

# entities per read from the record store (and relations per read)
EXPORT_CHUNK = 500
KIND_ORDER: tuple[Kind, ...] = (Kind.MEMORY_UNIT, Kind.CONCEPT, Kind.ARTIFACT)
_RANK = {k: i for i, k in enumerate(KIND_ORDER)}
# exports one server streams at once (each holds a store connection and a read snapshot)
MAX_CONCURRENT_EXPORTS = 2
# what one send of an export carries at most (at least one line): the unit of the idle cut
EXPORT_PIECE_BYTES = 1_048_576
EXPORT_RETRY_AFTER_S = 5

ExportRecord = MemoryUnit | Concept | Artifact | Relation | Preference


def record_line(record: ExportRecord) -> str:
    """One record as the export writes it: canonical JSON, ``kind`` first, then the fields by
    name (nested objects too), fields at their default left out (ingest gives them back)."""
    data = record.model_dump(mode="json", exclude_defaults=True)
    data.pop("kind", None)
    body = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return '{"kind":' + json.dumps(record.kind) + ("," + body[1:] if len(body) > 2 else "}")


def _implied(relation: Relation) -> bool:
    """A SUPERSEDES relation as an entity's ``supersedes`` writes it (hrt.records.supersession_relations)."""
    return (
        relation.weight == 1.0
        and relation.relation_type is None
        and relation.valid_from is None
        and relation.valid_to is None
    )


def _chain_order(deferred: dict[str, tuple[Kind, list[str]]]) -> list[str]:
    """The superseding entities, each after those it supersedes: by the length of its chain of
    supersessions among them, then kind, then id. Those in a cycle (A supersedes B supersedes A,
    which one batch can write) and those above one come last, by kind then id."""
    depth: dict[str, int] = {}
    cyclic: set[str] = set()
    state: dict[str, int] = {}  # 1: on the walk's path, 2: done
    for start in sorted(deferred):
        if start in state:
            continue
        state[start] = 1
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(deferred[start][1]))]
        while stack:  # iterative depth-first walk: a chain may be long
            node, below = stack[-1]
            child = next(below, None)
            if child is None:
                stack.pop()
                state[node] = 2
                kids = [t for t in deferred[node][1] if t in deferred]
                if node in cyclic or any(t in cyclic for t in kids):
                    cyclic.add(node)
                else:
                    depth[node] = 1 + max((depth[t] for t in kids), default=0)
            elif child in deferred and state.get(child) == 1:
                at = next(i for i, (n, _) in enumerate(stack) if n == child)
                cyclic.update(n for n, _ in stack[at:])
            elif child in deferred and child not in state:
                state[child] = 1
                stack.append((child, iter(deferred[child][1])))
    ordered = sorted(depth, key=lambda i: (depth[i], _RANK[deferred[i][0]], i))
    return ordered + sorted(cyclic, key=lambda i: (_RANK[deferred[i][0]], i))


def _kept_supersedes(entity: Entity, stored: dict[str, dict[str, Relation]]) -> list[str]:
    if isinstance(entity, Concept) or not entity.supersedes:
        return []
    edges = stored.get(entity.id, {})
    return [t for t in entity.supersedes if t in edges]


def _with_supersedes(entity: Entity, kept: list[str]) -> Entity:
    if isinstance(entity, Concept) or entity.supersedes == kept:
        return entity
    return entity.model_copy(update={"supersedes": kept})


async def export_records(reader: ExportReader, chunk: int = EXPORT_CHUNK) -> AsyncIterator[list[ExportRecord]]:
    """The user's records in export order (the module's docstring), a chunk at a time."""
    # the stored SUPERSEDES relations, by source: what decides each ``supersedes`` kept
    stored: dict[str, dict[str, Relation]] = {}
    async for rels in reader.relations(chunk, EdgeType.SUPERSEDES):
        for r in rels:
            stored.setdefault(r.source, {})[r.target] = r
    deferred: dict[str, tuple[Kind, list[str]]] = {}
    for kind in KIND_ORDER:
        async for entities in reader.entities(kind, chunk):
            out: list[ExportRecord] = []
            for e in entities:
                kept = _kept_supersedes(e, stored)
                if kept:
                    deferred[e.id] = (kind, kept)
                else:
                    out.append(_with_supersedes(e, kept))
            if out:
                yield out
    written: dict[str, set[str]] = {}  # source -> targets its supersedes writes at ingest
    order = _chain_order(deferred)
    for i in range(0, len(order), chunk):
        ids = order[i : i + chunk]
        found: dict[str, Entity] = {}
        for kind in KIND_ORDER:
            wanted = [x for x in ids if deferred[x][0] is kind]
            if wanted:
                found.update(await reader.get_many(kind, wanted))
        out = []
        for ident in ids:
            entity = found.get(ident)
            if entity is None:  # cannot happen in one snapshot; never a line naming nothing
                continue
            kept = deferred[ident][1]
            written[ident] = {t for t in kept if _implied(stored[ident][t])}
            out.append(_with_supersedes(entity, kept))
        if out:
            yield out
    del stored, deferred
    async for rels in reader.relations(chunk):
        lines: list[ExportRecord] = [
            r for r in rels if not (r.type is EdgeType.SUPERSEDES and r.target in written.get(r.source, ()))
        ]
        if lines:
            yield lines
    prefs: list[ExportRecord] = list(await reader.preferences())
    if prefs:
        yield prefs


class ExportSlots:
    """At most ``limit`` exports streaming at once in this process, at most half of them (at least
    one) for one tenant (:mod:`hrt.shares`: a key's users, child keys included); beyond,
    :class:`RateLimited` (429 with Retry-After): each holds a store connection and a read snapshot
    while it streams, so one tenant's exports never take every slot."""

    def __init__(self, limit: int = MAX_CONCURRENT_EXPORTS) -> None:
        self.limit = limit
        self.shares = Shares(limit)

    @property
    def running(self) -> int:
        return self.shares.total

    def _refusal(self, held: int, mine: bool) -> RateLimited:
        where = "for this tenant, its share" if mine else "as many as this server runs at once"
        return RateLimited(
            f"{held} exports are streaming, {where}; retry later",
            retry_after_s=EXPORT_RETRY_AFTER_S,
            reason="export_concurrency",
        )

    def slot(self, tenant: str | None = None) -> contextlib.AbstractContextManager[Place]:
        return self.shares.place(tenant, self._refusal)


async def check_exportable(records: RecordStore, user_id: str) -> None:
    """:class:`NotFound` unless the user holds an entity or a preference."""
    if not await records.user_exists(user_id) and not await records.preferences(user_id):
        raise NotFound(f"no user {user_id!r}", field="user_id")


def _pieces(part: list[ExportRecord], max_bytes: int) -> list[tuple[bytes, int]]:
    """A chunk's lines as pieces of at most ``max_bytes`` (at least one line each), with the
    number of lines in each: what one send of the stream carries."""
    out: list[tuple[bytes, int]] = []
    lines: list[bytes] = []
    size = 0
    for record in part:
        line = (record_line(record) + "\n").encode("utf-8")
        if lines and size + len(line) > max_bytes:
            out.append((b"".join(lines), len(lines)))
            lines, size = [], 0
        lines.append(line)
        size += len(line)
    if lines:
        out.append((b"".join(lines), len(lines)))
    return out


async def export_lines(
    reader: ExportReader,
    counted: dict[str, Any] | None = None,
    chunk: int = EXPORT_CHUNK,
    max_bytes: int = EXPORT_PIECE_BYTES,
) -> AsyncGenerator[bytes, None]:
    """The export as NDJSON, in pieces of at most ``max_bytes`` (at least one line), each chunk's
    lines written in a worker thread; ``counted["records"]`` follows the lines written, and
    ``counted["complete"]`` says whether the last was."""
    counted = counted if counted is not None else {}
    counted.update(records=0, complete=False)
    async for part in export_records(reader, chunk):
        for piece, n in await asyncio.to_thread(_pieces, part, max_bytes):
            counted["records"] += n
            yield piece
    counted["complete"] = True
