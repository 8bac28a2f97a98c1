"""How records become projections: graph nodes and edges, and vector-index documents.

Shared by the embedded store (which writes its projections in the same SQLite transaction) and the
outbox projector (which delivers them to Neo4j and Weaviate), so both deployments project alike.
"""

from __future__ import annotations

from hrt.records import Concept, Entity, Kind, MemoryUnit, Relation, entity_label, entity_text, entity_ts, valid_from
from hrt.stores.base import GraphEdge, GraphNode, Vector, VectorDoc


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
    start = valid_from(entity)
    return (
        start.timestamp() if start is not None else None,
        entity.valid_to.timestamp() if entity.valid_to is not None else None,
    )


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
        valid_from=relation.valid_from.timestamp() if relation.valid_from is not None else None,
        valid_to=relation.valid_to.timestamp() if relation.valid_to is not None else None,
    )


def vector_doc(entity: Entity, vector: Vector) -> VectorDoc:
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
    )
