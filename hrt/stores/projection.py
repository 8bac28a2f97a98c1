"""How records become projections: graph nodes and edges, and vector-index documents.

Shared by the embedded store (which writes its projections in the same SQLite transaction) and the
outbox projector (which delivers them to Neo4j and Weaviate), so both deployments project alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from hrt.records import (
    KIND_OF,
    Concept,
    Entity,
    Kind,
    MemoryUnit,
    Relation,
    entity_label,
    entity_text,
    entity_ts,
    valid_from,
)
from hrt.stores.base import EntityLink, GraphEdge, GraphNode, Vector, VectorDoc

# a relation as the stores keep it beside its edge (the interval in epoch seconds), both the
# embedded ``edges`` table and PostgreSQL's ``hrt_relations``
RELATION_COLUMNS = "source, target, type, weight, relation_type, valid_from, valid_to"


def seconds(ts: datetime | None) -> float | None:
    """A time as the ports carry it: epoch seconds (UTC); None stays None."""
    return ts.timestamp() if ts is not None else None


def instant(epoch: float | None) -> datetime | None:
    """Epoch seconds back to a UTC datetime; None stays None."""
    return datetime.fromtimestamp(epoch, UTC) if epoch is not None else None


def relation_from_row(user_id: str, row: Sequence[Any]) -> Relation:
    """A row of :data:`RELATION_COLUMNS` as a Relation (its interval as UTC datetimes)."""
    source, target, type_, weight, relation_type, start, end = row
    return Relation(
        user_id=user_id,
        type=type_,
        source=source,
        target=target,
        weight=weight,
        relation_type=relation_type,
        valid_from=instant(start),
        valid_to=instant(end),
    )


def entity_salience(entity: Entity) -> float:
    if isinstance(entity, MemoryUnit):
        return entity.importance_score / 10.0
    if isinstance(entity, Concept):
        return entity.salience
    return entity.confidence


def entity_category(entity: Entity) -> str:
    if isinstance(entity, MemoryUnit):
        return entity.source_type
    if isinstance(entity, Concept):
        return entity.type
    return entity.artifact_type


def epoch(entity: Entity) -> float | None:
    ts = entity_ts(entity)
    return ts.timestamp() if ts is not None else None


def interval(entity: Entity) -> tuple[float | None, float | None]:
    """An entity's own validity in epoch seconds (GraphNode.valid_from / valid_to)."""
    return seconds(valid_from(entity)), seconds(entity.valid_to)


def graph_node(entity: Entity) -> GraphNode:
    is_mu = isinstance(entity, MemoryUnit)
    start, end = interval(entity)
    return GraphNode(
        id=entity.id,
        kind=Kind(entity.kind),
        label=entity_label(entity),
        ts=epoch(entity),
        salience=entity_salience(entity),
        category=entity_category(entity),
        tags=tuple(sorted(entity.tags)) if isinstance(entity, MemoryUnit) else (),
        source_agent_id=entity.source_agent_id if is_mu and isinstance(entity, MemoryUnit) else None,
        valid_from=start,
        valid_to=end,
    )


def graph_edge(relation: Relation) -> GraphEdge:
    return GraphEdge(
        source=relation.source,
        target=relation.target,
        type=relation.type,
        weight=relation.weight,
        relation_type=relation.relation_type,
        valid_from=seconds(relation.valid_from),
        valid_to=seconds(relation.valid_to),
    )


def vector_bytes(vector: Vector) -> bytes:
    """A vector as the record stores and the embedded index keep it: float32 bytes, native order."""
    return np.ascontiguousarray(vector, dtype=np.float32).tobytes()


def passage_bytes(passages: Vector | None) -> bytes | None:
    """Passage vectors as the record stores keep them: the (k, dim) float32 rows' bytes (native
    order, as vectors), None for none."""
    if passages is None or not len(passages):
        return None
    return vector_bytes(passages)


def passage_rows(blob: bytes | None, dim: int) -> Vector | None:
    """:func:`passage_bytes` read back as (k, ``dim``) rows; None for none."""
    if not blob or dim <= 0:
        return None
    return np.frombuffer(blob, dtype=np.float32).reshape(-1, dim)


def vector_doc(entity: Entity, vector: Vector, passages: Vector | None = None) -> VectorDoc:
    mu = entity if isinstance(entity, MemoryUnit) else None
    start, end = interval(entity)
    return VectorDoc(
        id=entity.id,
        kind=Kind(entity.kind),
        text=entity_text(entity),
        vector=vector,
        ts=epoch(entity),
        tags=tuple(sorted(set(mu.tags))) if mu is not None else (),
        source_agent_id=mu.source_agent_id if mu is not None else None,
        valid_from=start,
        valid_to=end,
        passages=passages if passages is not None and len(passages) else None,
    )


def link(user_id: str, row: Any) -> EntityLink:
    """A relation row of a record store (its seven columns, then outgoing, the other end's id, kind,
    label and start) as an EntityLink."""
    return EntityLink(
        relation=relation_from_row(user_id, row[:7]),
        outgoing=bool(row[7]),
        other_id=row[8],
        other_kind=KIND_OF[row[9]],
        other_label=row[10] or "",
        other_start=row[11],
    )
