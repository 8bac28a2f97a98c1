"""The hydration stage: the shortlist (per kind the best ``limit x shortlist_factor``, at least
``limit x reranker_oversample`` when reranking: what rerank and selection choose from, since both
need the entities' text), then one batched read per kind from the record store, the kinds' reads
concurrent.

An id that the graph or the vector index returned but the record store lacks is reported in
``retrieval_metadata.missing_records``, never silently dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hrt.pipeline.scoring import Scored
from hrt.pipeline.selection import phrase_best, shortlist
from hrt.records import Entity, Kind
from hrt.stores.base import RecordStore

if TYPE_CHECKING:
    from hrt.pipeline.context import RequestContext, Services


async def run_hydration(
    user_id: str, shortlisted: Mapping[Kind, Sequence[Scored]], records: RecordStore
) -> tuple[dict[str, Entity], dict[str, list[str]]]:
    wanted = {kind: ids for kind in Kind if (ids := [s.id for s in shortlisted.get(kind, ())])}
    # the per-kind reads at once (each its own pooled connection in the services deployment)
    found_per_kind = await asyncio.gather(*(records.get_many(user_id, kind, ids) for kind, ids in wanted.items()))
    entities: dict[str, Entity] = {}
    missing: dict[str, list[str]] = {}
    for (kind, ids), found in zip(wanted.items(), found_per_kind, strict=True):
        entities.update(found)
        lacking = sorted(set(ids) - set(found))
        if lacking:
            missing[kind.value] = lacking
    return entities, missing


@dataclass(frozen=True, slots=True)
class Hydrated:
    """What the hydration stage provides: the shortlist per kind, its entities read from the
    record store by id, and the ids no record was found for, by kind."""

    shortlist: dict[Kind, list[Scored]]
    entities: dict[str, Entity]
    missing: dict[str, list[str]]


async def hydration_stage(ctx: RequestContext, services: Services) -> str:
    """The hydration stage: the shortlist read from the record store; records missing make the
    response degraded."""
    intake, cfg, scored = ctx.intake, ctx.cfg, ctx.scores.scored
    factor = cfg.assembly.shortlist_factor
    if intake.rerank:
        factor = max(factor, cfg.rerank.reranker_oversample)
    held = phrase_best(scored, ctx.grounded.grounding.hit_phrases).values() if cfg.assembly.phrase_best else ()
    short = shortlist(scored, intake.limits, factor, held)
    entities, missing = await run_hydration(intake.user_id, short, services.records)
    ctx.hydrated = Hydrated(short, entities, missing)
    if missing:
        ctx.degraded.append("records missing for " + ", ".join(f"{len(v)} {k}" for k, v in sorted(missing.items())))
    return "ok"
