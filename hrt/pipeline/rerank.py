"""The rerank stage (on request): the shortlisted items go to the Reranker in one call.

Which items: per kind the best ``limit x reranker_oversample`` of the shortlist, at most
``reranker_max_candidates`` in all (taken round-robin over kinds by rank, so no kind is starved).

Blend rule: ``final = (1 - rerank_blend) x scorer_final + rerank_blend x reranker_score``; the
reranker's score is shown in ``score_breakdown.rerank``. Items past M keep their scorer score.
When rerank is not requested the stage is ``skipped``; when the reranker does not score, fails or
runs past ``rerank_budget_s``, the scorer's order stands for every item and the response says
so (``degraded`` or ``timeout``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from hrt.config import RerankConfig
from hrt.contract import Limits
from hrt.pipeline.intake import Intake
from hrt.pipeline.scoring import Scored
from hrt.pipeline.selection import limit_for
from hrt.records import Entity, Kind, entity_text
from hrt.reranker import Reranker

if TYPE_CHECKING:
    from hrt.pipeline.context import RequestContext, Services

log = logging.getLogger(__name__)


RerankStatus = Literal["ok", "skipped", "degraded", "timeout"]


@dataclass(frozen=True, slots=True)
class RerankOutcome:
    items: dict[Kind, list[Scored]]
    status: RerankStatus
    reason: str | None
    applied: bool


def rerank_candidates(
    shortlisted: Mapping[Kind, Sequence[Scored]],
    entities: Mapping[str, Entity],
    limits: Limits,
    oversample: int,
    max_candidates: int,
) -> list[Scored]:
    per_kind = [
        [s for s in shortlisted.get(k, ()) if s.id in entities][: limit_for(limits, k) * oversample] for k in Kind
    ]
    out: list[Scored] = []
    for rank in range(max((len(p) for p in per_kind), default=0)):
        for bucket in per_kind:
            if rank < len(bucket) and len(out) < max_candidates:
                out.append(bucket[rank])
    return out


async def run_rerank(
    intake: Intake,
    shortlisted: Mapping[Kind, Sequence[Scored]],
    entities: Mapping[str, Entity],
    reranker: Reranker,
    cfg: RerankConfig,
    budget_s: float,
) -> RerankOutcome:
    unchanged = {k: list(v) for k, v in shortlisted.items()}
    if not intake.rerank:
        return RerankOutcome(unchanged, "skipped", None, False)
    flat = rerank_candidates(shortlisted, entities, intake.limits, cfg.reranker_oversample, cfg.reranker_max_candidates)
    if not flat:
        return RerankOutcome(unchanged, "skipped", None, False)
    # the caller's own question when it gave one, else what its key phrases say
    query = intake.query or "; ".join(intake.phrases)
    try:
        scores = await asyncio.wait_for(
            reranker.score(query, [entity_text(entities[s.id]) for s in flat]), timeout=budget_s
        )
    except TimeoutError:
        log.warning("rerank ran past its %.1fs budget", budget_s)
        return RerankOutcome(unchanged, "timeout", f"rerank exceeded its {budget_s:g}s budget", False)
    except Exception as exc:  # any failure of an optional stage degrades, never fails, the request
        log.warning("rerank failed (%s): %s", type(exc).__name__, str(exc)[:200])
        return RerankOutcome(unchanged, "degraded", f"rerank failed: {type(exc).__name__}", False)
    if scores is None:
        return RerankOutcome(unchanged, "skipped", f"rerank requested but the reranker is {reranker.name!r}", False)
    if len(scores) != len(flat):
        return RerankOutcome(unchanged, "degraded", "rerank returned a wrong number of scores", False)
    by_id = {s.id: max(0.0, min(1.0, float(sc))) for s, sc in zip(flat, scores, strict=True)}
    blend = cfg.rerank_blend
    out: dict[Kind, list[Scored]] = {}
    for kind, items in shortlisted.items():
        out[kind] = [
            s.with_rerank(by_id[s.id], (1.0 - blend) * s.final + blend * by_id[s.id]) if s.id in by_id else s
            for s in items
        ]
    return RerankOutcome(out, "ok", None, True)


async def rerank_stage(ctx: RequestContext, services: Services) -> str:
    """The rerank stage: its status is the outcome's; a reranker that fails or runs past
    ``rerank_budget_s`` makes the response degraded."""
    outcome = ctx.reranked = await run_rerank(
        ctx.intake,
        ctx.hydrated.shortlist,
        ctx.hydrated.entities,
        services.reranker,
        ctx.cfg.rerank,
        budget_s=services.settings.rerank_budget_s,
    )
    if outcome.status in ("degraded", "timeout") and outcome.reason:
        ctx.degraded.append(outcome.reason)
        services.metrics.degraded.labels(stage="rerank").inc()
    return outcome.status
