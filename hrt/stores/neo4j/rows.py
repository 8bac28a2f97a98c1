"""HRT's graph records as the rows the Cypher of :mod:`hrt.stores.neo4j.queries` writes and reads
back: nodes, edges, and the expansion's result as candidates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hrt.records import KIND_OF, EdgeType, Kind
from hrt.stores.base import GraphCandidate, GraphEdge, GraphNode
from hrt.stores.graph_walk import candidates
from hrt.stores.neo4j.queries import _float_or_none

KIND_LABELS: dict[Kind, str] = {
    Kind.MEMORY_UNIT: "MemoryUnit",
    Kind.CONCEPT: "Concept",
    Kind.ARTIFACT: "DerivedArtifact",
}
_EDGE_OF: dict[str, EdgeType] = {e.value: e for e in EdgeType}


def _candidates(best: dict[str, Any], rows: Mapping[str, Sequence[Any]]) -> list[GraphCandidate]:
    """The walk's result as candidates, from the rows of the nodes reached (_node_rows's columns, which
    the procedure returns too): both expansion paths end here."""
    return candidates(
        best,
        lambda ident: _node(rows[ident]),
        lambda ident: ident,
        lambda ident: tuple(rows[ident][10]),
        lambda ident: rows[ident][11],
    )


def _node(row: Sequence[Any]) -> GraphNode:
    """A node row (_node_fields; the procedure's and _node_rows's rows start with the same columns)."""
    ident, kind, label, ts, salience, category, tags, agent, valid_from, valid_to = row[:10]
    return GraphNode(
        id=ident,
        kind=KIND_OF.get(kind) or Kind(kind),
        label=label,
        ts=ts,
        salience=salience,
        category=category,
        tags=tuple(tags or ()),
        source_agent_id=agent,
        valid_from=valid_from,
        valid_to=valid_to,
    )


def _node_row(node: GraphNode) -> dict[str, Any]:
    kind = Kind(node.kind)
    return {
        "id": node.id,
        "kind": kind.value,
        "node_label": KIND_LABELS[kind],
        "label": node.label,
        # Browser captions nodes by name or title: concepts have a name, the others a title.
        "name": node.label if kind is Kind.CONCEPT else None,
        "title": None if kind is Kind.CONCEPT else node.label,
        "ts": float(node.ts) if node.ts is not None else None,
        "salience": float(node.salience),
        "category": node.category,
        "tags": sorted(node.tags),
        "source_agent_id": node.source_agent_id,
        # null (absent) is open; an older HRT's nodes get valid_from = ts from graph_schema/005
        "valid_from": _float_or_none(node.valid_from),
        "valid_to": _float_or_none(node.valid_to),
    }


def _edge_row(edge: GraphEdge) -> dict[str, Any]:
    return {
        "source": edge.source,
        "target": edge.target,
        "type": EdgeType(edge.type).value,
        "weight": float(edge.weight),
        "relation_type": edge.relation_type,
        "valid_from": _float_or_none(edge.valid_from),
        "valid_to": _float_or_none(edge.valid_to),
    }
