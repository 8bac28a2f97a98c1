"""Retrieval's reads from the record store while a projection is down (services deployment).

PostgreSQL holds every record, its vector and its relations: what the vector index and the graph
project from it. When one of them is down (:mod:`hrt.stores.circuit`), the reads retrieval needs
are answered from PostgreSQL instead (:mod:`hrt.stores.guarded` decides when), and the response
says so (``retrieval_metadata.degraded_reasons``, the stage marked ``degraded``):

- **Vector index down** (:class:`RecordVectors`). Search: per phrase, PostgreSQL's full-text search
  over the user's records (:mod:`hrt.stores.postgres.fallback`, the ``limit`` best by rank, then
  id) is the lexical leg; the cosines of those hits to the phrase, from the stored vectors, give
  each hit its similarity and rank the vector leg among the same hits. A record that shares no
  word with any phrase is not found (no nearest-neighbour search without the index). The cosine
  reads of scoring (``similarities``, ``passage_similarities``) are exact: the same vectors.
- **Graph down** (:class:`RecordGraph`). No walk: expansion returns the seeds alone, with the
  attributes scoring needs (projected from their records as the graph projects them) and the
  concepts a memory unit mentions. ``neighbors`` (supersession, assembly's connected concepts and
  related memory units) reads the relations from PostgreSQL, ordered as the graph orders them.

Both are deterministic (every order has an id tie-break), so the same outage over the same data
gives the same answer, byte for byte. :func:`collecting` and :func:`note` carry what was degraded
from the store wrappers to the pipeline without a parameter through every stage.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hrt.records import EdgeType, Kind, Relation
from hrt.stores.base import (
    EntityRow,
    ExpansionCaps,
    GraphCandidate,
    GraphNode,
    PhraseVectors,
    SearchFilter,
    Vector,
    VectorDoc,
    VectorHit,
    make_candidate,
    resolve_vectors,
    valid_at,
)
from hrt.stores.graph_walk import visible
from hrt.stores.projection import graph_node, seconds, vector_doc
from hrt.text import content_words


@dataclass(frozen=True, slots=True)
class Degradation:
    """One read answered by a fallback: the stage it served, the store that was down, and the
    reason the response gives (fixed text: never an address or a driver's message)."""

    stage: str
    store: str
    reason: str


_NOTES: ContextVar[list[Degradation] | None] = ContextVar("hrt_degradations", default=None)
# the pipeline stage running (set by the pipeline), for reads more than one stage makes
STAGE: ContextVar[str] = ContextVar("hrt_stage", default="")


@contextlib.contextmanager
def collecting() -> Iterator[list[Degradation]]:
    """Collect the degradations of the reads made inside the block (one request)."""
    notes: list[Degradation] = []
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)


def note(stage: str, store: str, reason: str) -> None:
    notes = _NOTES.get()
    if notes is not None:
        notes.append(Degradation(stage or "expansion", store, reason))


class FallbackReads(Protocol):
    """What the fallbacks read from the record store."""

    async def text_candidates(
        self, user_id: str, queries: Sequence[Sequence[str]], limit: int
    ) -> list[list[EntityRow]]: ...

    async def entity_rows(self, user_id: str, ids: Sequence[str]) -> dict[str, EntityRow]: ...

    async def relations_of(self, user_id: str, ids: Sequence[str]) -> list[Relation]: ...


def admitted(doc: VectorDoc, kinds: Sequence[Kind], not_after: float | None, where: SearchFilter | None) -> bool:
    """Does a document pass a search's kinds, ``not_after`` and filters (``SearchFilter``)."""
    if doc.kind not in kinds or (not_after is not None and doc.ts is not None and doc.ts > not_after):
        return False
    if where is None:
        return True
    if where.valid_at is not None and not valid_at(doc.valid_from, doc.valid_to, where.valid_at):
        return False
    if doc.kind is Kind.MEMORY_UNIT:
        if where.tags and not set(where.tags) & set(doc.tags):
            return False
        if where.source_agent_ids and doc.source_agent_id not in where.source_agent_ids:
            return False
    if doc.kind is Kind.CONCEPT or doc.ts is None:
        return True
    early = where.ts_from is not None and doc.ts < where.ts_from
    return not (early or (where.ts_to is not None and doc.ts > where.ts_to))


def phrase_hits(
    lexical: Sequence[str], pool: Mapping[str, VectorDoc], similarity: Mapping[str, float], k: int
) -> list[VectorHit]:
    """One phrase's hits: the first ``k`` of its lexical leg and the ``k`` best cosines of the
    pool, each with both ranks (by id)."""
    by_vector = sorted(pool, key=lambda i: (-similarity[i], i))[:k]
    lexical_rank = {ident: r for r, ident in enumerate(lexical[:k], start=1)}
    vector_rank = {ident: r for r, ident in enumerate(by_vector, start=1)}
    return [
        VectorHit(ident, pool[ident].kind, similarity[ident], vector_rank.get(ident), lexical_rank.get(ident))
        for ident in sorted(set(lexical_rank) | set(vector_rank))
    ]


class RecordVectors:
    """The vector index's reads, answered from the record store (module docstring)."""

    def __init__(self, records: FallbackReads) -> None:
        self.records = records

    async def search(
        self,
        user_id: str,
        phrases: Sequence[str],
        vectors: PhraseVectors,
        kinds: Sequence[Kind],
        k: int,
        not_after: float | None = None,
        where: SearchFilter | None = None,
    ) -> list[list[VectorHit]]:
        queries = [list(dict.fromkeys(content_words(p))) for p in phrases]
        found = await self.records.text_candidates(user_id, queries, k)
        matrix = await resolve_vectors(vectors)
        lexical: list[list[str]] = []
        pool: dict[str, VectorDoc] = {}
        for rows in found:
            docs = [vector_doc(entity, vec, passages) for entity, vec, _, passages in rows]
            kept = [d for d in docs if admitted(d, kinds, not_after, where)]
            lexical.append([d.id for d in kept])
            pool.update((d.id, d) for d in kept)
        ids = sorted(pool)
        stacked = np.stack([np.asarray(pool[i].vector, dtype=np.float32) for i in ids]) if ids else None
        out = []
        for j, leg in enumerate(lexical):
            cosines = (stacked @ np.asarray(matrix[j], dtype=np.float32)).tolist() if stacked is not None else []
            out.append(phrase_hits(leg, pool, dict(zip(ids, (float(c) for c in cosines), strict=True)), k))
        return out

    async def similarities(self, user_id: str, ids: Sequence[str], vectors: Vector) -> dict[str, float]:
        return {i: own for i, (own, _) in (await self.passage_similarities(user_id, ids, vectors)).items()}

    async def passage_similarities(
        self, user_id: str, ids: Sequence[str], vectors: Vector
    ) -> dict[str, tuple[float, float]]:
        if not len(ids):
            return {}
        rows = await self.records.entity_rows(user_id, sorted(set(ids)))
        phrases = np.asarray(vectors, dtype=np.float32)
        out: dict[str, tuple[float, float]] = {}
        for ident, (_, vec, _, passages) in rows.items():
            own = float(np.max(phrases @ np.asarray(vec, dtype=np.float32)))
            best = own if passages is None else float(np.max(phrases @ np.asarray(passages, dtype=np.float32).T))
            out[ident] = (own, best)
        return out


class RecordGraph:
    """The graph's reads, answered from the record store (module docstring)."""

    def __init__(self, records: FallbackReads) -> None:
        self.records = records

    async def expand(
        self,
        user_id: str,
        seeds: Mapping[str, float],
        caps: ExpansionCaps,
        not_after: float | None = None,
        valid_at: float | None = None,
    ) -> list[GraphCandidate]:
        """The seeds alone (hop 0), as the walk returns them at depth 0, with the concepts each
        memory unit seed mentions."""
        if not seeds:
            return []
        rows = await self.records.entity_rows(user_id, sorted(seeds))
        nodes = {i: graph_node(entity) for i, (entity, *_) in rows.items()}
        per_kind: dict[Kind, int] = {}
        kept: list[str] = []
        for ident in sorted(nodes, key=lambda i: (-seeds[i], i)):
            node = nodes[ident]
            if not visible(node, not_after) or per_kind.get(node.kind, 0) >= caps.max_per_kind:
                continue
            per_kind[node.kind] = per_kind.get(node.kind, 0) + 1
            kept.append(ident)
        units = [i for i in kept if nodes[i].kind is Kind.MEMORY_UNIT]
        mentions: dict[str, list[str]] = {i: [] for i in units}
        for r in await self.records.relations_of(user_id, units) if units else []:
            if r.type is EdgeType.MENTIONS and r.source in mentions and _holds(r, valid_at):
                mentions[r.source].append(r.target)
        return [
            make_candidate(nodes[i], 0, i, (), seeds[i], tuple(sorted(mentions.get(i, ()))), None, 0)
            for i in sorted(kept)
        ]

    async def neighbors(
        self,
        user_id: str,
        ids: Sequence[str],
        edge: EdgeType,
        outgoing: bool,
        limit: int,
        not_after: float | None = None,
        valid_at: float | None = None,
    ) -> dict[str, list[GraphNode]]:
        """As :meth:`GraphStore.neighbors`: newest first, then most salient, then id."""
        out: dict[str, list[GraphNode]] = {ident: [] for ident in ids}
        if not out:
            return out
        links: dict[str, list[tuple[str, Relation]]] = {}
        for r in await self.records.relations_of(user_id, sorted(out)):
            me, other = (r.source, r.target) if outgoing else (r.target, r.source)
            if r.type is EdgeType(edge) and me in out and _holds(r, valid_at):
                links.setdefault(me, []).append((other, r))
        others = sorted({other for pairs in links.values() for other, _ in pairs})
        rows = await self.records.entity_rows(user_id, others) if others else {}
        nodes = {i: graph_node(entity) for i, (entity, *_) in rows.items()}
        for me, pairs in links.items():
            found = [
                nodes[o]
                for o, _ in pairs
                if o in nodes and visible(nodes[o], not_after) and (valid_at is None or _current(nodes[o], valid_at))
            ]
            found.sort(key=lambda n: (-(n.ts or 0.0), -n.salience, n.id))
            out[me] = found[:limit]
        return out


def _holds(relation: Relation, at: float | None) -> bool:
    return at is None or valid_at(seconds(relation.valid_from), seconds(relation.valid_to), at)


def _current(node: GraphNode, at: float) -> bool:
    return valid_at(node.valid_from, node.valid_to, at)
