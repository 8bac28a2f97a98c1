"""What the first stages of a retrieval produce, for a caller that studies them (the LoCoMo eval's
``--misses``): :func:`trace_walk` grounds and walks one request as the pipeline does and returns a
:class:`WalkTrace`, so no caller needs the stages' own functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hrt.pipeline.expansion import run_expansion
from hrt.pipeline.grounding import Grounding, run_grounding
from hrt.pipeline.intake import Intake, run_intake

if TYPE_CHECKING:
    from hrt.config import RetrievalConfig
    from hrt.contract import RetrieveRequest
    from hrt.pipeline import HybridRetrievalTool
    from hrt.stores.base import GraphCandidate


@dataclass(frozen=True, slots=True)
class WalkTrace:
    """One request's configuration, intake, grounding (its seeds) and expansion (its candidates,
    unscored)."""

    cfg: RetrievalConfig
    intake: Intake
    grounding: Grounding
    candidates: list[GraphCandidate]


async def trace_walk(tool: HybridRetrievalTool, request: RetrieveRequest) -> WalkTrace:
    """Ground and walk ``request`` with ``tool``'s configuration, stores and clock: the seeds and
    candidates the pipeline's grounding and expansion stages find for it."""
    cfg, _, _ = tool.config_for(request)
    intake = run_intake(request, cfg, tool.clock())
    vectors = tool.embedder.embed(list(intake.phrases))
    grounding = await run_grounding(intake, vectors, tool.vectors, cfg.grounding)
    candidates = await run_expansion(intake, grounding, tool.graph, cfg.expansion)
    return WalkTrace(cfg, intake, grounding, candidates)
