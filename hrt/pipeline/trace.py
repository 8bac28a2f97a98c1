"""What one retrieval's stages produced, for a caller that studies them (the LoCoMo eval's
candidate recall and ``--misses``): ``HybridRetrievalTool.run(request, trace=True)`` returns a
:class:`RequestTrace` beside the response, so no caller needs the stages' own functions or runs
them apart from the pipeline. Never part of a response."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hrt.config import RetrievalConfig
    from hrt.pipeline.context import RequestContext
    from hrt.pipeline.grounding import Grounding
    from hrt.pipeline.intake import Intake
    from hrt.pipeline.scoring import Scored
    from hrt.stores.base import GraphCandidate


@dataclass(frozen=True, slots=True)
class RequestTrace:
    """One request's configuration, intake (its phrases and parameters), grounding (its seeds),
    expansion (the walk's candidates the request's filters leave, before validity) and scoring
    (every candidate validity kept, best first)."""

    cfg: RetrievalConfig
    intake: Intake
    grounding: Grounding
    candidates: list[GraphCandidate]
    scored: list[Scored]

    @classmethod
    def of(cls, ctx: RequestContext) -> RequestTrace:
        """The trace of a request the pipeline ran to the end."""
        return cls(ctx.cfg, ctx.intake, ctx.grounded.grounding, ctx.expanded.candidates, ctx.scores.scored)
