"""Merging concepts: several concepts found to name one thing become one (docs/api.md, "Merging
concepts").

``POST /v1/users/{user_id}/concepts/{id}/merge`` with ``{"ids": [...]}``: the merged concepts'
relations, in both directions, move onto the target; their names and aliases become the target's
aliases; the merged concepts are deleted. The change is one write batch, so the embedded store
makes it in one SQLite transaction, and PostgreSQL in one transaction with its outbox rows (Neo4j
and Weaviate follow through the projector, as after any write).

:func:`plan_merge` is pure: the same concepts and relations give the same batch. Where two
relations land on one key (``source, target, type``) the stronger weight wins; on equal weights the
relation already on the target's side stays, then the one whose old (source, target) sorts first.
A relation that would join the target to itself (between two merged concepts, or between a merged
concept and the target) is dropped. Merging again, or naming ids that are gone, changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hrt.contract import MergeRequest, MergeResult
from hrt.errors import InvalidInput, NotFound
from hrt.ingest import Record
from hrt.records import MAX_ALIAS_CHARS, MAX_ALIASES, Concept, Deletion, Kind, Relation, alias_key
from hrt.stores.base import RecordStore

__all__ = ["MergePlan", "MergeRequest", "MergeResult", "merge_records", "plan_merge", "prepare_merge"]


@dataclass(slots=True)
class MergePlan:
    target: Concept | None  # the target with its new aliases; None when they did not change
    relations: list[Relation] = field(default_factory=list)  # upserts onto the target
    deletions: list[Deletion] = field(default_factory=list)
    moved: int = 0
    dropped: int = 0
    aliases: list[str] = field(default_factory=list)


def merged_aliases(target: Concept, merged: Sequence[Concept]) -> list[str]:
    """The target's aliases, then each merged concept's name and aliases (merged concepts by id),
    without repeats (ignoring case and white space) or the target's name. A name longer than an
    alias may be (``MAX_ALIAS_CHARS``) is not taken; more than ``MAX_ALIASES`` is refused."""
    seen = {alias_key(target.name)}
    out: list[str] = []
    for text in [*target.aliases, *(t for c in sorted(merged, key=lambda c: c.id) for t in (c.name, *c.aliases))]:
        text = " ".join(text.split())
        key = alias_key(text)
        if key in seen or not text or len(text) > MAX_ALIAS_CHARS:
            continue
        seen.add(key)
        out.append(text)
    if len(out) > MAX_ALIASES:
        raise InvalidInput(
            f"the merge would give {target.id!r} {len(out)} aliases; a concept has at most {MAX_ALIASES}", field="ids"
        )
    return out


def plan_merge(target: Concept, merged: Sequence[Concept], relations: Sequence[Relation]) -> MergePlan:
    """The writes that merge ``merged`` into ``target``, given every relation touching any of
    them (``RecordStore.relations_of``)."""
    gone = {c.id for c in merged}
    if not gone:
        return MergePlan(target=None, aliases=list(target.aliases))
    aliases = merged_aliases(target, merged)
    new_target = None
    if aliases != list(target.aliases):
        new_target = Concept.model_validate({**target.model_dump(), "aliases": aliases})

    def moved_to(ident: str) -> str:
        return target.id if ident in gone else ident

    # per key after the move: every relation landing there, the strongest first (module docstring)
    landing: dict[tuple[str, str, str], list[tuple[float, int, str, str, Relation]]] = {}
    dropped = 0
    for r in relations:
        source, dest = moved_to(r.source), moved_to(r.target)
        moving = r.source in gone or r.target in gone
        if source == dest:
            dropped += moving
            continue
        landing.setdefault((source, dest, r.type.value), []).append((-r.weight, int(moving), r.source, r.target, r))
    upserts: list[Relation] = []
    moved = 0
    for (source, dest, _), found in sorted(landing.items()):
        found.sort(key=lambda x: x[:4])
        *_, best = found[0]
        moves = sum(x[1] for x in found)
        if best.source == source and best.target == dest:  # the target's own relation stays as it is
            dropped += moves
            continue
        upserts.append(best.model_copy(update={"source": source, "target": dest}))
        moved += 1
        dropped += moves - 1
    deletions = [Deletion(op="delete", kind="concept", user_id=target.user_id, id=i) for i in sorted(gone)]
    return MergePlan(new_target, upserts, deletions, moved, dropped, aliases)


async def prepare_merge(
    records: RecordStore, user_id: str, target_id: str, ids: Sequence[str]
) -> tuple[MergePlan, MergeResult]:
    """Read what a merge changes (two reads, one per kind of record) and plan it. The target must
    be a concept of the user (else NotFound, as for an absent one); ids that are not are
    ``absent``."""
    if target_id in ids:
        raise InvalidInput(f"{target_id!r} is the target; a concept is not merged into itself", field="ids")
    found = await records.get_many(user_id, Kind.CONCEPT, [target_id, *ids])
    target = found.get(target_id)
    if not isinstance(target, Concept):
        raise NotFound(f"no concept {target_id!r} of user {user_id!r}", field="id")
    merged = [c for i in ids if isinstance(c := found.get(i), Concept)]
    relations = await records.relations_of(user_id, [target_id, *(c.id for c in merged)]) if merged else []
    plan = plan_merge(target, merged, relations)
    result = MergeResult(
        user_id=user_id,
        target=target_id,
        merged=sorted(c.id for c in merged),
        absent=sorted(set(ids) - {c.id for c in merged}),
        relations_moved=plan.moved,
        relations_dropped=plan.dropped,
        aliases=plan.aliases,
    )
    return plan, result


def merge_records(plan: MergePlan) -> list[Record]:
    """The plan as the records of one write batch: the target, the relations, the deletions."""
    out: list[Record] = [plan.target] if plan.target is not None else []
    return [*out, *plan.relations, *plan.deletions]
