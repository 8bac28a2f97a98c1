"""Reading one entity and browsing a user's entities: what ``GET
/v1/users/{user_id}/entities/{kind}/{id}``, ``GET /v1/users/{user_id}/entities``, the client's
``get_entity`` / ``list_entities`` and the MCP tool ``recall_entity`` answer.

Both are reads of the record store (:meth:`hrt.stores.base.RecordStore.entity_detail` and
:meth:`~hrt.stores.base.RecordStore.browse`), the same in every deployment, and their answers are
functions of the stored data and the request (``now`` aside: by default browsing leaves out what
has ended by the service clock's now, as retrieval does as of now).

A page's cursor is opaque to callers: the last id given and a fingerprint of the filters it was
made for, base64url JSON. Pages follow one another in id order (byte order), so concatenated they
hold every entity that existed throughout, each once, in order, whatever was written between two
pages (what was written meanwhile appears when its id comes after the cursor).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, TypeAdapter, ValidationError

from hrt.auth import Principal
from hrt.errors import InvalidInput, NotFound
from hrt.jsonbounds import DECODER
from hrt.metadata_filter import MAX_CHARS as MAX_FILTER_CHARS
from hrt.metadata_filter import FilterError, parse_filter
from hrt.metadata_filter import Tree as MetadataTree
from hrt.records import Concept, IsoDateTime, Kind, check_id, entity_label, iso, utc, valid_id
from hrt.stores.base import BrowseFilter, EntityDetail, EntityLink, RecordStore, StoredEntity
from hrt.stores.projection import instant, interval

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# a page holds at most this much JSON (at least one entity), however many entities were asked for
MAX_PAGE_BYTES = 4 * 1_048_576
# entities read from the store at a time while a page is made
READ_CHUNK = 50
DEFAULT_RELATION_LIMIT = 100
MAX_RELATION_LIMIT = 1000
MAX_FILTER_VALUES = 64
MAX_CURSOR_CHARS = 1000


def written_by(caller: Principal) -> str | None:
    """The API key id a write is recorded under: None for the operator (``hrt mcp`` over stdio)
    and for a server without keys (``HRT_AUTH=off``), whose principals carry the key id ``-``."""
    return None if caller.key_id == "-" else caller.key_id


# --------------------------------------------------------------------------------------------
# Answers
# --------------------------------------------------------------------------------------------


class EntityRef(BaseModel):
    """Another entity, named: its kind, id and title (a concept's name)."""

    kind: Kind
    id: str
    title: str


class RelationView(BaseModel):
    """One relation seen from the entity read: ``out`` when it points from it. ``kind``, ``id``
    and ``title`` are the other end's; the interval is the relation's own (null: open)."""

    type: str
    direction: Literal["out", "in"]
    kind: Kind
    id: str
    title: str
    weight: float
    relation_type: str | None
    valid_from: str | None
    valid_to: str | None


class ValidityView(BaseModel):
    """The entity's interval as retrieval reads it: ``valid_from`` its own, else its creation;
    ``valid_to`` its own, else the start of its earliest successor (null: open)."""

    valid_from: str | None
    valid_to: str | None


class EntityView(BaseModel):
    """One entity and what HRT knows of it."""

    user_id: str
    kind: Kind
    id: str
    title: str
    record: dict[str, Any] = Field(description="the record as ingested (as stored: timestamps canonical UTC)")
    version: int = Field(description="1 when first written, one more for each write since")
    written_at: str | None = Field(description="when it was last written (null: before HRT recorded it)")
    written_by: str | None = Field(description="the id of the API key that last wrote it (null: the operator)")
    validity: ValidityView
    supersedes: list[EntityRef] = Field(description="what it replaces (SUPERSEDES from it), by id")
    superseded_by: list[EntityRef] = Field(description="what replaces it (SUPERSEDES to it), by id")
    mentioned_by: int | None = Field(description="a concept's: how many memory units mention it; null otherwise")
    relation_count: int = Field(description="its relations in both directions, all of them")
    relations: list[RelationView] = Field(
        description="its relations, by type, out before in, weight descending, then id; at most relation_limit"
    )


class EntitySummary(BaseModel):
    """One entity of a page: its record as stored, and when and by which key it was last written."""

    kind: Kind
    id: str
    title: str
    written_at: str | None
    written_by: str | None
    record: dict[str, Any] | None = Field(
        description="the record as stored; null unless the key has the read or export scope (ids and titles only)"
    )


class EntityPage(BaseModel):
    """A page of a user's entities in id order; ``next_cursor`` fetches the next one (null: the last)."""

    user_id: str
    entities: list[EntitySummary]
    next_cursor: str | None
    records_omitted: bool = Field(
        False,
        description="true when the key lacks the read (or export) scope: each entity's record is null, "
        "ids and titles only (whole records in bulk need one of those scopes)",
    )
    # the bytes of the records read to make the page (with or without them in it): what the page
    # is charged against its tenant's browse bytes a second, beside its own size
    _read_bytes: int = PrivateAttr(0)

    @property
    def read_bytes(self) -> int:
        return self._read_bytes


def _when(epoch: float | None) -> str | None:
    moment = instant(epoch)
    return iso(moment) if moment is not None else None


def _ref(link: EntityLink) -> EntityRef:
    return EntityRef(kind=link.other_kind, id=link.other_id, title=link.other_label)


def entity_view(user_id: str, detail: EntityDetail) -> EntityView:
    stored = detail.stored
    entity = stored.entity
    start, end = interval(entity)
    successors = [link for link in detail.supersession if not link.outgoing]
    if end is None:  # as hrt.pipeline.validity.interval_of: the earliest known successor's start
        starts = [link.other_start for link in successors if link.other_start is not None]
        end = min(starts) if starts else None
    return EntityView(
        user_id=user_id,
        kind=Kind(entity.kind),
        id=entity.id,
        title=entity_label(entity),
        record=entity.model_dump(mode="json"),
        version=stored.version,
        written_at=_when(stored.written_at),
        written_by=stored.written_by,
        validity=ValidityView(valid_from=_when(start), valid_to=_when(end)),
        supersedes=[_ref(link) for link in detail.supersession if link.outgoing],
        superseded_by=[_ref(link) for link in successors],
        mentioned_by=detail.mentioned_by if isinstance(entity, Concept) else None,
        relation_count=detail.relation_count,
        relations=[
            RelationView(
                type=link.relation.type.value,
                direction="out" if link.outgoing else "in",
                kind=link.other_kind,
                id=link.other_id,
                title=link.other_label,
                weight=link.relation.weight,
                relation_type=link.relation.relation_type,
                valid_from=iso(link.relation.valid_from) if link.relation.valid_from is not None else None,
                valid_to=iso(link.relation.valid_to) if link.relation.valid_to is not None else None,
            )
            for link in detail.relations
        ],
    )


def summary(stored: StoredEntity, full: bool = True) -> EntitySummary:
    entity = stored.entity
    return EntitySummary(
        kind=Kind(entity.kind),
        id=entity.id,
        title=entity_label(entity),
        written_at=_when(stored.written_at),
        written_by=stored.written_by,
        record=entity.model_dump(mode="json") if full else None,
    )


# --------------------------------------------------------------------------------------------
# Reads
# --------------------------------------------------------------------------------------------


async def read_entity(
    records: RecordStore, user_id: str, kind: Kind, ident: str, relation_limit: int = DEFAULT_RELATION_LIMIT
) -> EntityView:
    """One entity of the user with what HRT knows of it, or :class:`NotFound`, whose answer is the
    same whether nothing has the id or another user's entity does (the caller checked the user)."""
    check_id(ident, "entity_id")
    if not 1 <= relation_limit <= MAX_RELATION_LIMIT:
        raise InvalidInput(f"relation_limit must be 1 to {MAX_RELATION_LIMIT}", field="relation_limit")
    detail = await records.entity_detail(user_id, Kind(kind), ident, relation_limit)
    if detail is None:
        raise NotFound(f"user {user_id!r} has no {Kind(kind).value} {ident!r}", field="entity_id")
    return entity_view(user_id, detail)


def metadata_tree(text: str | None) -> MetadataTree | None:
    """The ``metadata`` query parameter (a filter as JSON) as a tree, or InvalidInput naming the
    position in it (never its values)."""
    if text is None:
        return None
    if len(text) > MAX_FILTER_CHARS:
        raise InvalidInput(f"metadata: longer than {MAX_FILTER_CHARS} characters", field="metadata")
    try:
        value = DECODER.decode(text)
    except (json.JSONDecodeError, ValueError, RecursionError):
        raise InvalidInput(
            "metadata: not a JSON object (a filter: docs/api.md, 'Metadata filters')", field="metadata"
        ) from None
    try:
        return parse_filter(value)
    except FilterError as exc:
        raise InvalidInput(f"metadata: {exc}", field="metadata") from None


@dataclass(frozen=True, slots=True)
class BrowseRequest:
    """A browse as asked (query parameters; times as ISO 8601 text), validated by :meth:`filter`."""

    kind: Kind | None = None
    tags: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    created_after: str | None = None
    created_before: str | None = None
    valid_at: str | None = None
    prefix: str | None = None
    include_invalidated: bool = False
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None
    metadata: str | None = None  # a metadata filter as JSON text (hrt.metadata_filter)

    def fingerprint(self) -> str:
        """What a cursor is bound to: every filter (not the limit, which may change page to page)."""
        filters = [
            self.kind.value if self.kind is not None else None,
            sorted(set(self.tags)),
            sorted(set(self.agents)),
            self.created_after,
            self.created_before,
            self.valid_at,
            self.prefix,
            self.include_invalidated,
        ]
        if self.metadata is not None:  # without one, the cursors of before metadata filters
            filters.append(self.metadata)
        return hashlib.sha256(json.dumps(filters).encode()).hexdigest()[:16]

    def filter(self, now: datetime) -> BrowseFilter:
        """The store's filter (one row more than the page: is there a next one?), or InvalidInput
        naming the parameter."""
        if not 1 <= self.limit <= MAX_LIMIT:
            raise InvalidInput(f"limit must be 1 to {MAX_LIMIT}", field="limit")
        for name, values in (("tags", self.tags), ("agent", self.agents)):
            if len(values) > MAX_FILTER_VALUES:
                raise InvalidInput(f"at most {MAX_FILTER_VALUES} values of {name}", field=name)
            if any(not 1 <= len(v) <= 128 for v in values):
                raise InvalidInput(f"each {name} must be 1 to 128 characters", field=name)
        if self.prefix is not None and not 1 <= len(self.prefix) <= 500:
            raise InvalidInput("prefix must be 1 to 500 characters", field="prefix")
        after_ts = _time(self.created_after, "created_after")
        before_ts = _time(self.created_before, "created_before")
        if after_ts is not None and before_ts is not None and before_ts <= after_ts:
            raise InvalidInput("created_before must be after created_after", field="created_before")
        at = _time(self.valid_at, "valid_at")
        if at is not None and self.include_invalidated:
            raise InvalidInput(
                "include_invalidated lists every entity, whatever its validity: give it or valid_at, not both",
                field="include_invalidated",
            )
        return BrowseFilter(
            metadata=metadata_tree(self.metadata),
            kind=self.kind,
            tags=tuple(sorted(set(self.tags))),
            agents=tuple(sorted(set(self.agents))),
            created_after=after_ts,
            created_before=before_ts,
            prefix=self.prefix.lower() if self.prefix else None,
            valid_at=at,
            ended_by=None if at is not None or self.include_invalidated else utc(now).timestamp(),
            after=self.after(),
            limit=self.limit + 1,
        )

    def after(self) -> str | None:
        """The id the cursor says the page starts after, or InvalidInput (field ``cursor``)."""
        if self.cursor is None:
            return None
        bad = InvalidInput("cursor is not one this server gave (pass next_cursor as it came)", field="cursor")
        if len(self.cursor) > MAX_CURSOR_CHARS:
            raise bad
        try:
            raw = base64.urlsafe_b64decode(self.cursor + "=" * (-len(self.cursor) % 4))
            data = json.loads(raw)
        except (binascii.Error, ValueError):
            raise bad from None
        if not isinstance(data, dict) or not isinstance(data.get("after"), str) or not valid_id(data["after"]):
            raise bad
        if data.get("filters") != self.fingerprint():
            raise InvalidInput(
                "cursor was given for other filters: pass the same filters with each page's next_cursor",
                field="cursor",
            )
        return str(data["after"])

    def cursor_after(self, ident: str) -> str:
        text = json.dumps({"after": ident, "filters": self.fingerprint()}, separators=(",", ":"), sort_keys=True)
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


_TIME: TypeAdapter[datetime] = TypeAdapter(IsoDateTime)


def _time(value: str | None, field: str) -> float | None:
    if value is None:
        return None
    try:
        return utc(_TIME.validate_python(value)).timestamp()
    except (ValidationError, ValueError):
        raise InvalidInput(f"{field} must be an ISO 8601 date-time, e.g. 2025-06-01T00:00:00Z", field=field) from None


def _summaries(found: list[StoredEntity], full: bool) -> list[tuple[EntitySummary, int]]:
    """Each entity's summary and its size as JSON (what it adds to the page), in a worker thread."""
    out = []
    for stored in found:
        item = summary(stored, full)
        out.append((item, len(item.model_dump_json())))
    return out


async def browse_entities(
    records: RecordStore,
    user_id: str,
    request: BrowseRequest,
    now: datetime,
    *,
    full: bool = True,
    max_bytes: int = MAX_PAGE_BYTES,
) -> EntityPage:
    """One page of the user's entities, and the cursor of the next (None after the last). A page
    ends at ``request.limit`` entities or once it holds ``max_bytes`` of JSON (at least one
    entity), whichever comes first; the store is read ``READ_CHUNK`` entities at a time and the
    summaries are built in worker threads, so neither a page nor its making holds much memory or
    the event loop. ``full`` False: ids and titles, no records (a key without the read scope)."""
    where = request.filter(now)
    entities: list[EntitySummary] = []
    size, read, more, after = 0, 0, False, where.after
    while len(entities) < request.limit:
        want = min(READ_CHUNK, request.limit - len(entities))
        found = await records.browse(user_id, replace(where, after=after, limit=want + 1))
        read += sum(stored.size for stored in found)
        batch = found[:want]
        for item, n in await asyncio.to_thread(_summaries, batch, full):
            if entities and size + n > max_bytes:  # the page is full: the next one starts here
                return _page(user_id, request, entities, more=True, full=full, read=read)
            entities.append(item)
            size += n
        more = len(found) > want
        if not more or not batch:
            break
        after = batch[-1].entity.id
    return _page(user_id, request, entities, more=more, full=full, read=read)


def _page(
    user_id: str, request: BrowseRequest, entities: list[EntitySummary], *, more: bool, full: bool, read: int
) -> EntityPage:
    page = EntityPage(
        user_id=user_id,
        entities=entities,
        next_cursor=request.cursor_after(entities[-1].id) if more and entities else None,
        records_omitted=not full,
    )
    page._read_bytes = read
    return page
