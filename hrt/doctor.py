"""Drift check and repair between the record store and its projections (``hrt doctor``).

The check compares, per user and kind, the entity ids the record store holds with those the graph
store and the vector index hold: ids missing from a projection, and orphans a projection holds
that the record store does not. Repair rebuilds the projections of the affected users from the
record store (PostgreSQL is the source of truth): every entity and relation is re-projected
(idempotent upserts) and orphans are deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hrt.projection import graph_edge, graph_node, vector_doc

BATCH = 500


@dataclass
class UserDrift:
    user_id: str
    missing_in_graph: dict[str, list[str]] = field(default_factory=dict)  # kind -> ids
    missing_in_vectors: dict[str, list[str]] = field(default_factory=dict)
    orphans_in_graph: dict[str, list[str]] = field(default_factory=dict)
    orphans_in_vectors: dict[str, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not (
            self.missing_in_graph or self.missing_in_vectors or self.orphans_in_graph or self.orphans_in_vectors
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "missing_in_graph": self.missing_in_graph,
            "missing_in_vectors": self.missing_in_vectors,
            "orphans_in_graph": self.orphans_in_graph,
            "orphans_in_vectors": self.orphans_in_vectors,
        }


def _by_kind(ids: dict[str, str], only: set[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ident in sorted(only):
        out.setdefault(ids[ident], []).append(ident)
    return out


async def check_user(records: Any, graph: Any, vectors: Any, user_id: str) -> UserDrift:
    truth = await records.ids(user_id)
    in_graph = await graph.ids(user_id)
    in_vectors = await vectors.ids(user_id)
    return UserDrift(
        user_id=user_id,
        missing_in_graph=_by_kind(truth, set(truth) - set(in_graph)),
        missing_in_vectors=_by_kind(truth, set(truth) - set(in_vectors)),
        orphans_in_graph=_by_kind(in_graph, set(in_graph) - set(truth)),
        orphans_in_vectors=_by_kind(in_vectors, set(in_vectors) - set(truth)),
    )


async def check(records: Any, graph: Any, vectors: Any, users: Sequence[str] | None = None) -> list[UserDrift]:
    users = list(users) if users else await records.users()
    return [await check_user(records, graph, vectors, u) for u in users]


async def repair_user(records: Any, graph: Any, vectors: Any, drift: UserDrift) -> None:
    """Rebuild one user's projections from the record store."""
    user_id = drift.user_id
    orphans_g = [i for ids in drift.orphans_in_graph.values() for i in ids]
    orphans_v = [i for ids in drift.orphans_in_vectors.values() for i in ids]
    if orphans_g:
        await graph.delete_nodes(user_id, orphans_g)
    if orphans_v:
        await vectors.delete(user_id, orphans_v)
    ids = sorted(await records.ids(user_id))
    for i in range(0, len(ids), BATCH):
        rows = await records.entity_rows(user_id, ids[i : i + BATCH])
        await graph.upsert_nodes(user_id, [graph_node(e) for e, _, _ in rows.values()])
        await vectors.upsert(user_id, [vector_doc(e, v) for e, v, _ in rows.values()])
    relations = await records.all_relations(user_id)
    for i in range(0, len(relations), BATCH):
        await graph.upsert_edges(user_id, [graph_edge(r) for r in relations[i : i + BATCH]])
