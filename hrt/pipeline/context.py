"""One request's state through the pipeline, and the shape every stage has.

A stage is ``async (ctx, services) -> status``: it reads what earlier stages put in the
:class:`RequestContext`, sets its own fields, and returns its status for
``retrieval_metadata.stages`` (``ok``, ``skipped``, or rerank's outcome). The pipeline
(``hrt/pipeline/__init__.py``, ``PIPELINE``) runs them in order, each timed under its name: the
keys of the timings the pipeline returns (the ``Server-Timing`` header's) are the stage names, then
``total``. A stage with ``reported_as`` is part of another in the response: its status is not
reported, and what a store's fallback answered for it marks the stage it is reported as
(``retrieval_metadata.stages`` keeps the contract's stage names). A context field without a
default is set by the stage that produces it; reading it before raises ``AttributeError``.
A stage's ``prefetch`` starts reads a later stage awaits (:meth:`RequestContext.started`): the
runner settles whatever is still running when a request fails.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

if TYPE_CHECKING:
    from datetime import datetime

    from hrt.config import RetrievalConfig, Settings
    from hrt.contract import AppliedConfig, AugmentedMemoryContext, RetrieveRequest
    from hrt.embedder import Embedder
    from hrt.metrics import Metrics
    from hrt.pipeline.expansion import Expanded, OwnEvidence
    from hrt.pipeline.grounding import Grounded, Grounding
    from hrt.pipeline.hydration import Hydrated
    from hrt.pipeline.intake import Intake
    from hrt.pipeline.neighbours import Neighbours
    from hrt.pipeline.rerank import RerankOutcome
    from hrt.pipeline.scoring import Scores
    from hrt.pipeline.selection import Selection
    from hrt.pipeline.validity import Validity
    from hrt.records import Preference
    from hrt.reranker import Reranker
    from hrt.stores.base import GraphStore, RecordStore, Vector, VectorIndex
    from hrt.stores.fallback import Degradation


T = TypeVar("T")


class Services(Protocol):
    """What the stages run against (the :class:`~hrt.pipeline.HybridRetrievalTool` is one)."""

    settings: Settings
    embedder: Embedder
    vectors: VectorIndex
    graph: GraphStore
    records: RecordStore
    reranker: Reranker
    metrics: Metrics
    deployment: str  # retrieval_metadata.deployment


@dataclass(slots=True, eq=False)
class RequestContext:
    """A request, its configuration, and each stage's output (one value of the stage's own type,
    set by the stage), in the stages' order."""

    request: RetrieveRequest
    cfg: RetrievalConfig
    config_hash: str
    applied: AppliedConfig | None  # retrieval_metadata.config
    now: datetime
    stages: dict[str, str] = field(default_factory=dict)  # retrieval_metadata.stages, in order
    # false when nothing was ever stored for the user: intake and assembly alone run (an empty answer)
    user_known: bool = True
    degraded: list[str] = field(default_factory=list)  # retrieval_metadata.degraded_reasons
    # reads answered by a fallback while a store was down (hrt/stores/fallback.py), in no order
    outages: list[Degradation] = field(default_factory=list)
    # what the stages' prefetches started, settled by the runner if the request fails
    pending: list[asyncio.Future[Any]] = field(default_factory=list)
    # intake
    intake: Intake = field(init=False)
    embedding: asyncio.Future[Vector] = field(init=False)
    searching: asyncio.Future[tuple[Grounding, list[Preference]]] | None = field(init=False)
    # each stage's output, set by the stage (its type is the stage module's own)
    grounded: Grounded = field(init=False)
    expanded: Expanded = field(init=False)
    own_evidence: asyncio.Future[OwnEvidence] = field(init=False)  # expansion's prefetch, for scoring
    validity: Validity = field(init=False)
    scores: Scores = field(init=False)
    hydrated: Hydrated = field(init=False)
    reranked: RerankOutcome = field(init=False)
    selection: Selection = field(init=False)
    neighbours: Neighbours = field(init=False)
    # assembly
    response: AugmentedMemoryContext = field(init=False)

    def started(self, read: Awaitable[T]) -> asyncio.Future[T]:
        """``read`` running on its own from now on (a prefetch), settled by the runner if the
        request fails before a stage awaits it."""
        future = asyncio.ensure_future(read)
        self.pending.append(future)
        return future


StageRun = Callable[[RequestContext, Services], Awaitable[str]]


async def settle(*pending: asyncio.Future[Any] | None) -> None:
    """Cancel what a failed request left running and wait for it, so nothing outlives the request
    and no exception goes unretrieved."""
    for future in pending:
        if future is not None and not future.done():
            future.cancel()
    for future in pending:
        if future is not None:
            with contextlib.suppress(BaseException):
                await future


class Stage(NamedTuple):
    """A stage of the pipeline: its name (its timing key, its ``stages`` key) and its function;
    ``prefetch``, which the runner starts right after it (within its time), reads a later stage
    needs, started early; ``reported_as``, the stage whose ``stages`` entry covers it (module
    docstring), None for a stage the response reports."""

    name: str
    run: StageRun
    prefetch: Callable[[RequestContext, Services], Awaitable[None]] | None = None
    reported_as: str | None = None

    @property
    def reported(self) -> str:
        """The ``retrieval_metadata.stages`` key its status and outages go to."""
        return self.reported_as or self.name
