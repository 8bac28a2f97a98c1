"""The data model (ARCHITECTURE §2) as validated records: what ingest accepts and stores return.

Every record belongs to exactly one ``user_id``. Entity ids are unique per user across kinds, so a
relation names its endpoints by id alone and the relation type fixes which kinds they must be.
"""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from hrt.errors import InvalidInput

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@\-]{0,127}$"
_ID_RE = re.compile(ID_PATTERN)

EntityId = Annotated[str, Field(pattern=ID_PATTERN, description="1-128 chars: letters, digits, _ . : @ -")]
UserId = Annotated[str, Field(pattern=ID_PATTERN, description="the tenant; 1-128 chars")]
ShortText = Annotated[str, Field(max_length=500)]


class Kind(StrEnum):
    MEMORY_UNIT = "memory_unit"
    CONCEPT = "concept"
    ARTIFACT = "artifact"


# a dict lookup: Kind(value) costs ~4 us a call, which adapters reading many rows feel
KIND_OF: dict[str, Kind] = {k.value: k for k in Kind}


class EdgeType(StrEnum):
    MENTIONS = "MENTIONS"  # memory_unit -> concept
    RELATED_TO = "RELATED_TO"  # concept -> concept
    DERIVED_FROM = "DERIVED_FROM"  # artifact -> memory_unit | concept
    FOLLOWS = "FOLLOWS"  # memory_unit -> memory_unit (later -> earlier)
    # memory_unit | artifact -> memory_unit | artifact (successor -> the fact it replaces). Not
    # walked by expansion: it links two versions of one fact, not related facts (docs/api.md,
    # "Facts that change")
    SUPERSEDES = "SUPERSEDES"


# the edge types expansion walks (every type but SUPERSEDES)
WALKED_EDGES: tuple[EdgeType, ...] = (EdgeType.MENTIONS, EdgeType.RELATED_TO, EdgeType.DERIVED_FROM, EdgeType.FOLLOWS)


EDGE_ENDPOINTS: dict[EdgeType, tuple[frozenset[Kind], frozenset[Kind]]] = {
    EdgeType.MENTIONS: (frozenset({Kind.MEMORY_UNIT}), frozenset({Kind.CONCEPT})),
    EdgeType.RELATED_TO: (frozenset({Kind.CONCEPT}), frozenset({Kind.CONCEPT})),
    EdgeType.DERIVED_FROM: (frozenset({Kind.ARTIFACT}), frozenset({Kind.MEMORY_UNIT, Kind.CONCEPT})),
    EdgeType.FOLLOWS: (frozenset({Kind.MEMORY_UNIT}), frozenset({Kind.MEMORY_UNIT})),
    EdgeType.SUPERSEDES: (frozenset({Kind.MEMORY_UNIT, Kind.ARTIFACT}), frozenset({Kind.MEMORY_UNIT, Kind.ARTIFACT})),
}

MAX_SUPERSEDES = 16


def utc(ts: datetime) -> datetime:
    """Naive timestamps are taken as UTC; aware ones are converted to UTC. A time whose UTC falls
    outside years 1 to 9999 (``0001-01-01T00:00:00+01:00``) is a ValueError, as validation needs."""
    if ts.tzinfo is None:
        return ts.replace(tzinfo=UTC)
    try:
        return ts.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError("the time is out of range once converted to UTC (years 1 to 9999)") from exc


_DATETIME = TypeAdapter(datetime)


def _iso_input(value: Any) -> Any:
    """A date-time on the wire is an ISO 8601 string (a ``datetime`` from Python code): not a
    number, which lax validation would read as Unix seconds."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise ValueError("must be an ISO 8601 date-time string")
    try:
        return _DATETIME.validate_python(value)
    except ValidationError as exc:
        raise ValueError(f"is not an ISO 8601 date-time: {exc.errors()[0]['msg']}") from None


# for models validated strictly: a JSON string parsed as a date-time, nothing else
IsoDateTime = Annotated[datetime, BeforeValidator(_iso_input)]


def iso(ts: datetime) -> str:
    """Canonical timestamp text: UTC, seconds precision unless sub-second data exists, ``Z``
    (four-digit years: strftime writes year 1 as "1" here)."""
    ts = utc(ts)
    text = f"{ts.year:04d}-{ts.month:02d}-{ts.day:02d}T{ts.hour:02d}:{ts.minute:02d}:{ts.second:02d}"
    return f"{text}.{ts.microsecond:06d}Z" if ts.microsecond else f"{text}Z"


def valid_id(value: str) -> bool:
    # fullmatch: re.match with "$" would accept a trailing newline
    return _ID_RE.fullmatch(value) is not None


def check_id(value: Any, field: str) -> str:
    """``value`` when it is a valid id (:data:`ID_PATTERN`), else InvalidInput naming ``field``."""
    if not isinstance(value, str) or not valid_id(value):
        # the value itself is never quoted: it could be anything the caller sent, of any length
        raise InvalidInput(
            f"not a valid {field}: 1-128 of letters, digits, _ . : @ -, the first a letter or digit", field=field
        )
    return value


MAX_METADATA_CHARS = 65_536
MAX_METADATA_DEPTH = 16


def _depth(value: Any, level: int = 0) -> int:
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


def check_metadata(value: dict[str, Any]) -> dict[str, Any]:
    """Free-form metadata must be plain JSON every store keeps as given: finite numbers (SQLite
    would store infinity as null, PostgreSQL refuses it), bounded size and depth."""
    if _depth(value) > MAX_METADATA_DEPTH:
        raise ValueError(f"nested deeper than {MAX_METADATA_DEPTH} levels")
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError("must be JSON with finite numbers") from exc
    if len(text) > MAX_METADATA_CHARS:
        raise ValueError(f"is {len(text)} characters as JSON; at most {MAX_METADATA_CHARS}")
    return value


class _Record(BaseModel):
    # no NaN or infinity in any float field (importance, salience, weights, concept properties)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    user_id: UserId


def _utc_or_none(value: datetime | None) -> datetime | None:
    return utc(value) if value is not None else None


def _after_valid_from(value: datetime | None, info: ValidationInfo) -> datetime | None:
    value = _utc_or_none(value)
    start = info.data.get("valid_from")
    if value is not None and start is not None and value <= start:
        raise ValueError("must be after valid_from")
    return value


def _not_itself(value: list[str], info: ValidationInfo) -> list[str]:
    own = info.data.get("muid", info.data.get("id"))
    if own in value:
        raise ValueError("an entity cannot supersede itself")
    if len(set(value)) != len(value):
        raise ValueError("names an id twice")
    return value


class _Valid(_Record):
    """Event time (when it was true), beside the creation time (when HRT learned it): ``valid_from``
    included, ``valid_to`` excluded, either open when absent. docs/api.md, "Facts that change"."""

    valid_from: IsoDateTime | None = None
    valid_to: IsoDateTime | None = None

    _valid_from = field_validator("valid_from")(_utc_or_none)
    _valid_to = field_validator("valid_to")(_after_valid_from)


class MemoryUnit(_Valid):
    kind: Literal["memory_unit"] = "memory_unit"
    muid: EntityId
    title: str = Field("", max_length=500)
    content: str = Field(..., min_length=1, max_length=100_000)
    creation_ts: IsoDateTime
    source_type: str = Field("unknown", max_length=64)
    importance_score: float = Field(5.0, ge=0.0, le=10.0)
    source_agent_id: str | None = Field(None, max_length=128)
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=64)
    metadata: dict[str, Any] = Field(default_factory=dict)

    # the memory units or artifacts this one replaces (SUPERSEDES edges from it)
    supersedes: list[EntityId] = Field(default_factory=list, max_length=MAX_SUPERSEDES)

    _utc = field_validator("creation_ts")(utc)
    _metadata = field_validator("metadata")(check_metadata)
    _supersedes = field_validator("supersedes")(_not_itself)

    @property
    def id(self) -> str:
        return self.muid


MAX_ALIASES = 32
MAX_ALIAS_CHARS = 200
Alias = Annotated[str, Field(min_length=1, max_length=MAX_ALIAS_CHARS, pattern=r"\S")]


def alias_key(text: str) -> str:
    """What two names must differ in to be two aliases: case and white space do not count."""
    return " ".join(text.split()).casefold()


def _distinct_aliases(value: list[str], info: ValidationInfo) -> list[str]:
    """Aliases are other names of the concept (docs/api.md, "Aliases"): none twice, ignoring case
    and white space, and none its name."""
    name = info.data.get("name")
    seen: set[str] = {alias_key(name)} if isinstance(name, str) else set()
    for i, alias in enumerate(value):
        key = alias_key(alias)
        if key in seen:
            raise ValueError(f"alias {i} repeats the name or an earlier alias")
        seen.add(key)
    return value


class Concept(_Valid):
    kind: Literal["concept"] = "concept"
    id: EntityId
    name: str = Field(..., min_length=1, max_length=500)
    type: str = Field("topic", max_length=64)
    description: str = Field("", max_length=100_000)
    status: str = Field("active", max_length=64)
    salience: float = Field(0.5, ge=0.0, le=1.0)
    properties: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    # other names the concept is found by, as by its name (docs/api.md, "Aliases")
    aliases: list[Alias] = Field(default_factory=list, max_length=MAX_ALIASES)

    _aliases = field_validator("aliases")(_distinct_aliases)


class Artifact(_Valid):
    kind: Literal["artifact"] = "artifact"
    id: EntityId
    artifact_type: str = Field(..., min_length=1, max_length=64)
    title: str = Field("", max_length=500)
    content: str = Field(..., min_length=1, max_length=100_000)
    created_at: IsoDateTime
    confidence: float = Field(0.5, ge=0.0, le=1.0)
    supersedes: list[EntityId] = Field(default_factory=list, max_length=MAX_SUPERSEDES)

    _utc = field_validator("created_at")(utc)
    _supersedes = field_validator("supersedes")(_not_itself)


Entity = MemoryUnit | Concept | Artifact


class Relation(_Valid):
    kind: Literal["relation"] = "relation"
    type: EdgeType
    source: EntityId
    target: EntityId
    weight: float = Field(1.0, ge=0.0, le=1.0)
    relation_type: str | None = Field(None, max_length=64)

    @field_validator("target")
    @classmethod
    def _not_self_superseding(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("type") is EdgeType.SUPERSEDES and info.data.get("source") == value:
            raise ValueError("an entity cannot supersede itself")
        return value


class Preference(_Record):
    kind: Literal["preference"] = "preference"
    target_kind: Literal["concept", "concept_type", "source_type", "artifact_type"]
    target: str = Field(..., min_length=1, max_length=128)
    weight: float = Field(..., ge=0.0, le=1.0)


class Deletion(_Record):
    """``{"op": "delete", "kind": ..., "user_id": ..., ...}``: what to remove, by key."""

    op: Literal["delete"]
    kind: Literal["memory_unit", "concept", "artifact", "relation", "preference"]
    id: EntityId | None = None
    muid: EntityId | None = None
    type: EdgeType | None = None
    source: EntityId | None = None
    target: str | None = Field(None, max_length=128)
    target_kind: Literal["concept", "concept_type", "source_type", "artifact_type"] | None = None

    def entity_id(self) -> str | None:
        return self.muid or self.id


def entity_text(entity: Entity) -> str:
    """The text an entity is embedded and lexically indexed by. A concept's aliases follow its name
    in parentheses, so both search legs find it by any of them; a concept without aliases is
    ``<name>. <type>. <description>`` alone, so stored vectors of such concepts stay valid
    (docs/api.md, "Aliases", has the cosines an alias gains)."""
    if isinstance(entity, Concept):
        name = f"{entity.name} ({', '.join(entity.aliases)})" if entity.aliases else entity.name
        return f"{name}. {entity.type}. {entity.description}".strip()
    return f"{entity.title}. {entity.content}".strip(". ")


# at most this many passages per memory unit; a longer text's sentences are grouped into as many runs
MAX_PASSAGES = 8
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*")


NOTE_ARTIFACT_TYPE = "note"  # a message's note from the rules (hrt/extraction/notes.py)


def note_id(muid: str) -> str:
    """The id of a message's note: ``note:`` and the message's id after its kind."""
    return f"note:{muid.partition(':')[2] or muid}"[:128]


def passage_texts(entity: Entity) -> list[str]:
    """The passages a memory unit is also embedded by, one per sentence of its content (at most
    :data:`MAX_PASSAGES`: a longer text's sentences are grouped into that many consecutive runs),
    each behind its context, ``<title or source_agent_id>: <sentence>``, unless it already starts
    with it. A one-sentence text, a concept and an artifact have none: the entity's own vector is
    their only passage. Sentences end at ``.``, ``!``, ``?`` before white space, and at line
    breaks; pieces of three characters or fewer are dropped. Scoring (``passage_weight``) adds a
    candidate's best passage cosine to its semantic term, so a turn that says several things is
    found by the one that matches (docs/eval-locomo.md)."""
    if not isinstance(entity, MemoryUnit):
        return []
    parts = [p.strip() for p in _SENTENCE_END.split(entity.content) if len(p.strip()) > 3]
    if len(parts) < 2:
        return []
    if len(parts) > MAX_PASSAGES:
        bounds = [round(i * len(parts) / MAX_PASSAGES) for i in range(MAX_PASSAGES + 1)]
        parts = [" ".join(parts[a:b]) for a, b in itertools.pairwise(bounds)]
    context = entity.title or entity.source_agent_id or ""
    return [p if not context or p.startswith(context) else f"{context}: {p}" for p in parts]


def entity_body(entity: Entity) -> str:
    """The text near-duplicate removal compares: the content, or a concept's name and description."""
    if isinstance(entity, Concept):
        return f"{entity.name}. {entity.description}"
    return entity.content


def entity_label(entity: Entity) -> str:
    """What an operator sees on a graph node: a concept's name, otherwise the title."""
    if isinstance(entity, Concept):
        return entity.name
    return entity.title or entity.content[:80]


def supersession_relations(entity: Entity) -> list[Relation]:
    """The ``SUPERSEDES`` relations an entity's ``supersedes`` names, as the batch writes them."""
    if isinstance(entity, Concept):
        return []
    return [
        Relation(user_id=entity.user_id, type=EdgeType.SUPERSEDES, source=entity.id, target=old)
        for old in entity.supersedes
    ]


def valid_from(entity: Entity) -> datetime | None:
    """When an entity became true: its own ``valid_from``, else a memory unit's or artifact's
    creation time (it was true when it was recorded), unless it was recorded at or after its own
    ``valid_to`` (a note that something ended: it was true before, since a time not given); a
    concept without one has no start."""
    if entity.valid_from is not None:
        return entity.valid_from
    ts = entity_ts(entity)
    if ts is not None and entity.valid_to is not None and ts >= entity.valid_to:
        return None
    return ts


def entity_ts(entity: Entity) -> datetime | None:
    if isinstance(entity, MemoryUnit):
        return entity.creation_ts
    if isinstance(entity, Artifact):
        return entity.created_at
    return None


def title_key(entity: Entity) -> str:
    """What browsing matches a ``prefix`` against: a concept's name, otherwise the title, lower-cased
    in Python (both stores keep it so: SQLite's and PostgreSQL's ``lower`` differ beyond ASCII)."""
    return (entity.name if isinstance(entity, Concept) else entity.title).lower()


# the record model of each kind
ENTITY_MODELS: dict[Kind, type[MemoryUnit] | type[Concept] | type[Artifact]] = {
    Kind.MEMORY_UNIT: MemoryUnit,
    Kind.CONCEPT: Concept,
    Kind.ARTIFACT: Artifact,
}
