"""Stage 5, hydration (after scoring's shortlist, before rerank): one batched read per kind from
the record store, the kinds' reads concurrent.

An id that the graph or the vector index returned but the record store lacks is reported in
``retrieval_metadata.missing_records``, never silently dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from hrt.pipeline.scoring import Scored
from hrt.records import Entity, Kind
from hrt.stores.base import RecordStore


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
