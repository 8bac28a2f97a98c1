"""The values that cross the store ports (:mod:`hrt.stores.base`): graph nodes and edges, walk
candidates, vector documents and hits, filters, write batches and results, and the browse pages'
entities.

Timestamps are epoch seconds (float, UTC) so adapters need no datetime handling.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from hrt.metadata_filter import Tree as MetadataTree
from hrt.records import Deletion, EdgeType, Entity, Kind, Preference, Relation

Vector = npt.NDArray[np.float32]
# The phrases' vectors, or their computation still under way: a vector index may start what needs
# no vector (the lexical leg) before it awaits them.
PhraseVectors = Vector | Awaitable[Vector]


async def resolve_vectors(vectors: PhraseVectors) -> Vector:
    if inspect.isawaitable(vectors):
        return await vectors
    return vectors


# An entity as its record store keeps it: the record, its vector, its version, and its passages'
# vectors ((k, dim) rows, None for none: hrt.records.passage_texts)
EntityRow = tuple[Entity, Vector, int, Vector | None]

# A user id no record can carry (ids start with a letter or digit): adapters read for it to warm
# their query plans at start, and find nothing.
WARM_UP_USER = "_hrt_warm_up"


@dataclass(frozen=True, slots=True)
class GraphNode:
    """A node of the graph projection, carrying what scoring and filtering need during traversal."""

    id: str
    kind: Kind
    label: str  # concept name, or title
    ts: float | None  # memory unit creation_ts / artifact created_at; None for concepts
    salience: float  # in [0, 1]: importance_score/10, concept salience, artifact confidence
    category: str  # source_type / concept type / artifact_type
    tags: tuple[str, ...] = ()
    source_agent_id: str | None = None
    # its own validity (event time, epoch seconds; see :func:`valid_at`): ``valid_from`` is the
    # record's, else a memory unit's or artifact's ts (hrt.records.valid_from); None is open. Supersession is not in it:
    # retrieval reads SUPERSEDES edges as of the request (hrt/pipeline/validity.py)
    valid_from: float | None = None
    valid_to: float | None = None


def valid_at(valid_from: float | None, valid_to: float | None, at: float | None) -> bool:
    """Whether an interval holds at ``at`` (``valid_from`` included, ``valid_to`` excluded, None
    open); every interval holds when ``at`` is None (a request with ``include_invalidated``)."""
    return at is None or ((valid_from is None or valid_from <= at) and (valid_to is None or at < valid_to))


@dataclass(frozen=True, slots=True)
class GraphEdge:
    source: str
    target: str
    type: EdgeType
    weight: float = 1.0
    relation_type: str | None = None
    valid_from: float | None = None  # when the relation was true (epoch seconds); None is open
    valid_to: float | None = None


@dataclass(frozen=True, slots=True)
class PathStep:
    edge: EdgeType
    node_id: str
    forward: bool  # True when the edge points from the previous node to node_id


@dataclass(frozen=True, slots=True)
class GraphCandidate:
    """One node reached by expansion (seeds included at hop 0), with its best path."""

    node: GraphNode
    hops: int  # edges on the best path
    seed_id: str
    path: tuple[PathStep, ...]
    path_score: float  # seed score x product over edges of (hop_decay x edge weight)
    mentions: tuple[str, ...] = ()  # memory units: ids of concepts they mention
    last_mention_ts: float | None = None  # concepts: newest memory unit mentioning them
    # the hop at which the walk first reached the node: its distance from the nearest seed (a
    # better path found deeper may have more edges, ``hops``); None means ``hops``
    reached_at: int | None = None

    @property
    def distance(self) -> int:
        return self.hops if self.reached_at is None else self.reached_at


_Frozen = TypeVar("_Frozen")


def positional_maker(cls: type[_Frozen]) -> Callable[..., _Frozen]:
    """A constructor of the frozen slots dataclass ``cls`` taking every field positionally, in
    field order, and setting the slots directly: the frozen ``__init__`` goes through
    ``object.__setattr__`` per field, about twice the cost, and expansion and scoring make one
    object per candidate (~1,000 a request at 100k entities). No defaults, no ``__post_init__``."""
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    namespace.update({f"set_{name}": getattr(cls, name).__set__ for name in names})
    body = "".join(f"    set_{name}(obj, {name})\n" for name in names)
    exec(f"def make({', '.join(names)}):\n    obj = new(cls)\n{body}    return obj\n", namespace)
    maker: Callable[..., _Frozen] = namespace["make"]
    return maker


make_candidate = positional_maker(GraphCandidate)


@dataclass(frozen=True, slots=True)
class ExpansionCaps:
    depth: int
    fanout_per_node: int
    max_per_kind: int
    hop_decay: float


@dataclass(frozen=True, slots=True)
class VectorDoc:
    id: str
    kind: Kind
    text: str
    vector: Vector
    ts: float | None
    # memory units: what a request's tag and agent filters are checked against in search
    tags: tuple[str, ...] = ()
    source_agent_id: str | None = None
    valid_from: float | None = None  # as on GraphNode
    valid_to: float | None = None
    # memory units of two or more sentences: one vector per passage (hrt.records.passage_texts),
    # rows of a (k, dim) array; None when it has none
    passages: Vector | None = None


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """A request's filters pushed down into search, so the top ``k`` of each leg holds what the
    request can return, not what it will filter out: memory units carrying any of ``tags`` and
    written by any of ``source_agent_ids`` (each when given), memory units and artifacts
    timestamped within ``[ts_from, ts_to]``; concepts always pass (they carry neither). With
    ``valid_at``, every kind: documents whose own interval (``VectorDoc.valid_from``/``valid_to``)
    holds at it (:func:`valid_at`); a document indexed without an interval passes."""

    tags: tuple[str, ...] = ()
    source_agent_ids: tuple[str, ...] = ()
    ts_from: float | None = None
    ts_to: float | None = None
    valid_at: float | None = None

    def __bool__(self) -> bool:
        return bool(
            self.tags
            or self.source_agent_ids
            or self.ts_from is not None
            or self.ts_to is not None
            or self.valid_at is not None
        )


@dataclass(frozen=True, slots=True)
class VectorHit:
    """One entity found for one phrase. ``similarity`` is the cosine similarity for every hit,
    including those found only by the lexical leg; ranks are 1-based, None when absent."""

    id: str
    kind: Kind
    similarity: float
    vector_rank: int | None
    lexical_rank: int | None


@dataclass(slots=True)
class WriteBatch:
    """One transaction's worth of writes for any number of users."""

    entities: list[Entity] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    preferences: list[Preference] = field(default_factory=list)
    deletions: list[Deletion] = field(default_factory=list)
    vectors: dict[tuple[str, str], Vector] = field(default_factory=dict)  # (user_id, id) -> vector
    # (user_id, id) -> its passages' vectors, (k, dim), for the entities that have passages
    passages: dict[tuple[str, str], Vector] = field(default_factory=dict)
    # per-user extraction statistics (hrt.extraction.conversation), written in the same transaction:
    # (user_id, namespace, key) -> JSON text, None to delete the row
    state: dict[tuple[str, str, str], str | None] = field(default_factory=dict)
    # rows that must still hold these values (None: be absent) when the batch commits, else the
    # write fails with StateChanged and nothing is written (another writer got there first)
    state_expect: dict[tuple[str, str, str], str | None] = field(default_factory=dict)
    # who wrote the batch's entities and when (RecordStore.entity_detail shows them): the API key's
    # id (None: the operator, the CLI) and the service clock's epoch seconds (None: not recorded)
    written_by: str | None = None
    written_at: float | None = None

    def __len__(self) -> int:
        return len(self.entities) + len(self.relations) + len(self.preferences) + len(self.deletions)


@dataclass(frozen=True, slots=True)
class WriteResult:
    upserted: int
    deleted: int
    versions: dict[tuple[str, str], int] = field(default_factory=dict)  # (user_id, id) -> entity version


@dataclass(frozen=True, slots=True)
class StoredEntity:
    """An entity as its record store keeps it, with when and by which API key it was last written
    (None for either: written before HRT recorded it, or, for the key, by the operator)."""

    entity: Entity
    version: int
    written_at: float | None = None
    written_by: str | None = None
    # the record's bytes as the store read them (what a bulk read is charged; 0: not counted)
    size: int = 0


@dataclass(frozen=True, slots=True)
class EntityLink:
    """One relation seen from one of its ends: which way it points (``outgoing``: from this
    entity) and the other end's id, kind, label (:func:`hrt.records.entity_label`) and start (its
    valid_from, else its creation time: when a successor ends what it supersedes)."""

    relation: Relation
    outgoing: bool
    other_id: str
    other_kind: Kind
    other_label: str
    other_start: float | None = None


@dataclass(frozen=True, slots=True)
class EntityDetail:
    """One entity and what HRT knows of it (``RecordStore.entity_detail``)."""

    stored: StoredEntity
    # its relations, both directions, in (type, outgoing first, weight descending, other id) order,
    # at most the limit asked; ``relation_count`` counts them all
    relations: list[EntityLink]
    relation_count: int
    # every SUPERSEDES link, both directions (what it replaces, what replaces it), by other id
    supersession: list[EntityLink]
    # memory units mentioning it (MENTIONS in): a concept's; 0 for the other kinds
    mentioned_by: int


@dataclass(frozen=True, slots=True)
class BrowseFilter:
    """A page of one user's entities in id order (byte order: ids are ASCII), those with an id
    after ``after``, at most ``limit``. Each filter given narrows: ``kind``; ``tags`` (memory units
    carrying any of them) and ``agents`` (memory units whose source_agent_id is one of them);
    creation time (memory units' creation_ts, artifacts' created_at: concepts have none) in
    ``[created_after, created_before)``; ``prefix`` (already lower-cased) of the title or a
    concept's name, lower-cased (:func:`hrt.records.title_key`). Validity, as retrieval reads it
    (an entity's own interval, its end else its earliest successor's start): with ``valid_at``
    the entities whose interval holds then; with ``ended_by`` those whose interval has not ended by
    then (begun or not); neither: every entity."""

    kind: Kind | None = None
    tags: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    created_after: float | None = None
    created_before: float | None = None
    prefix: str | None = None
    valid_at: float | None = None
    ended_by: float | None = None
    after: str | None = None
    limit: int = 50
    metadata: MetadataTree | None = None  # memory units whose metadata matches (hrt.metadata_filter)
