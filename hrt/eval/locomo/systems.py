"""The systems a question is asked of: the baselines over the store's own search (BM25, dense,
hybrid RRF) and HRT's configurations (:data:`HRT_SYSTEMS`), each HRT system a request to the one
pipeline (its depth, weights, retrieval preset and config overrides), never a patched pipeline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hrt.config import RELEVANCE_WEIGHTS, Weights
from hrt.contract import ConfigOverrides, Limits, RetrievalPresetName, RetrieveRequest
from hrt.eval.locomo.metrics import KS, RENDER_BUDGETS, Ranking
from hrt.eval.locomo.questions import Question
from hrt.eval.locomo.rendered import hrt_rendered, returned_entities, texts_rendered
from hrt.pipeline import RequestTrace, rrf_score
from hrt.records import Kind
from hrt.stores.base import VectorHit

RRF_K = 60


System = Callable[[Question], Awaitable[Ranking]]

SYSTEMS = (
    "bm25",
    "dense",
    "hybrid-rrf",
    "hrt-depth0",
    "hrt",
    "hrt-unweighted",
    "hrt-depth1",
    "hrt-depth2",
    "hrt-depth3",
    "hrt-tuned-depth1",
)
# system names still accepted by --systems, and the name each now has
DEPRECATED_SYSTEMS = {"hrt-before": "hrt-tuned-depth1"}
# run unless --systems names others: the headline rows, the baselines and the depth sweep
DEFAULT_SYSTEMS = SYSTEMS
SYSTEM_LABELS: dict[str, str] = {
    "bm25": "BM25 only",
    "dense": "dense only",
    "hybrid-rrf": "hybrid RRF, no graph",
    "hrt-depth0": "HRT, no expansion (depth 0)",
    "hrt": "HRT, product defaults (semantic weights)",
    "hrt-unweighted": "HRT, nothing overridden (default weights too)",
    "hrt-depth1": "HRT defaults at depth 1",
    "hrt-depth2": "HRT defaults at depth 2",
    "hrt-depth3": "HRT defaults at depth 3",
    "hrt-tuned-depth1": "HRT's earlier tuned configuration (depth 1)",
}
# HRT systems: (max_depth, None = the request leaves it to HRT_DEFAULT_DEPTH; semantic weights or
# the defaults; the retrieval preset the request names, None = the server's configuration)
HRT_SYSTEMS: dict[str, tuple[int | None, bool, RetrievalPresetName | None]] = {
    "hrt-depth0": (0, True, None),
    "hrt": (None, True, None),
    "hrt-unweighted": (None, False, None),
    "hrt-depth1": (1, True, None),
    "hrt-depth2": (2, True, None),
    "hrt-depth3": (3, True, None),
    # the eval's tuned configuration before the defaults became the best measured one: search_k
    # 25, fused evidence over the best phrase, reached candidates path x cosine, no date match, no
    # relevance gate, depth 1 (hrt/config.py PRESETS)
    "hrt-tuned-depth1": (1, True, "tuned-depth1"),
}
# The one thing the headline row overrides: the weights. "Which turn holds the evidence" is a question
# of relevance alone here: every question is asked a day after the last session (recency would rank
# the last sessions first whatever they say), and the import gives every turn the same importance and
# the user no preferences (salience and preference are flat). The row "nothing overridden" runs the
# default weights too.
EVAL_WEIGHTS = RELEVANCE_WEIGHTS  # the "relevance" preset's (hrt/config.py)
# No Settings override: the HRT systems run with the product's defaults (hrt/config.py), plus any
# --setting given (which then applies to every HRT system and is echoed in the results).
EVAL_SETTINGS: dict[str, Any] = {}


@dataclass(frozen=True, slots=True)
class EvalConfig:
    """What the HRT systems are asked: the request parameters and Settings overrides of the run."""

    depth: int | None = None  # the headline rows' max_depth: None leaves it to HRT_DEFAULT_DEPTH
    top_k: int = max(KS)
    artifacts: int = max(KS)
    weights: Weights = field(default_factory=lambda: EVAL_WEIGHTS)
    settings: Mapping[str, Any] = field(default_factory=lambda: dict(EVAL_SETTINGS))
    phrases: str = "keywords"  # see question_phrases
    # Proposal B's path part: every HRT system's request overrides path_evidence = noisy_or
    experimental_path_sum: bool = False
    # the token budgets of the rendered-text metrics (hrt/eval/locomo/rendered.py), for the headline
    # system and hybrid RRF; () measures none
    render_budgets: tuple[int, ...] = RENDER_BUDGETS

    def overrides(self) -> ConfigOverrides | None:
        """The per-request retrieval overrides every HRT system of the run sends."""
        return ConfigOverrides(path_evidence="noisy_or") if self.experimental_path_sum else None

    def as_json(self) -> dict[str, Any]:
        return {
            "depth": self.depth,
            "top_k": self.top_k,
            "artifacts": self.artifacts,
            "weights": self.weights.model_dump(),
            "settings": {k: _jsonable(v) for k, v in sorted(self.settings.items())},
            "phrases": self.phrases,
            "experimental_path_sum": self.experimental_path_sum,
            "render_budgets": list(self.render_budgets),
        }


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | type(None)) else str(value)


def _by_rank(hits: Iterable[tuple[str, int | None]]) -> list[str]:
    ranked = [(r, i) for i, r in hits if r is not None]
    return [i for _, i in sorted(ranked)]


def _rrf(hits: Iterable[tuple[str, int | None, int | None]], k: int = RRF_K) -> list[str]:
    """Reciprocal rank fusion of the two legs, with the pipeline's own :func:`rrf_score`."""
    scored = [(-rrf_score((a, b), k), ident) for ident, a, b in hits if a is not None or b is not None]
    return [i for _, i in sorted(scored)]


def baseline_systems(
    service: Any,
    derived: Mapping[str, Mapping[str, frozenset[str]]],
    top_k: int,
    render_budgets: Sequence[int] = (),
) -> dict[str, System]:
    """BM25, dense and hybrid RRF over the store's own search (``service.vectors.search``) with the
    question as the one phrase: memory units for recall, memory units and artifacts for the
    artifact-credited recall. No graph, no scoring. Hybrid RRF also renders its ranked turns'
    texts within each of ``render_budgets`` (hrt/eval/locomo/rendered.py)."""

    async def search(q: Question, kinds: list[Kind]) -> list[VectorHit]:
        vectors = service.embedder.embed_queries([q.text])
        hits: list[list[VectorHit]] = await service.vectors.search(
            q.user_id, [q.text], vectors, kinds=kinds, k=top_k, not_after=q.as_of.timestamp()
        )
        return hits[0]

    def covers(q: Question, ids: Sequence[str]) -> list[frozenset[str]]:
        table = derived.get(q.user_id, {})
        return [table.get(i, frozenset([i])) for i in ids]

    async def rendered(q: Question, ranked: list[str], budgets: Sequence[int]) -> dict[str, frozenset[str]]:
        if not budgets:
            return {}
        found = await service.records.get_many(q.user_id, Kind.MEMORY_UNIT, ranked)
        return texts_rendered([(i, found[i].content) for i in ranked if i in found], budgets)

    def make(order: Callable[[list[VectorHit]], list[str]], budgets: Sequence[int] = ()) -> System:
        async def run(q: Question) -> Ranking:
            ranked = order(await search(q, [Kind.MEMORY_UNIT]))
            mixed = order(await search(q, [Kind.MEMORY_UNIT, Kind.ARTIFACT]))[:top_k]
            shown = await rendered(q, ranked[:top_k], budgets)
            return Ranking(ranked[:top_k], covers(q, mixed), frozenset(ranked), shown)

        return run

    return {
        "bm25": make(lambda hits: _by_rank((h.id, h.lexical_rank) for h in hits)),
        "dense": make(lambda hits: _by_rank((h.id, h.vector_rank) for h in hits)),
        "hybrid-rrf": make(lambda hits: _rrf((h.id, h.vector_rank, h.lexical_rank) for h in hits), render_budgets),
    }


def request_for(
    q: Question,
    config: EvalConfig,
    depth: int | None,
    weights: Weights | None = None,
    preset: RetrievalPresetName | None = None,
) -> RetrieveRequest:
    """The question as a request: its key phrases, 25 memory units and 25 artifacts (no concepts),
    ``as_of`` a day after the last session; ``depth``, ``weights`` and ``preset`` None leave them to
    HRT's configuration (``HRT_DEFAULT_DEPTH``, ``HRT_WEIGHTS``), plus the run's overrides."""
    phrases = list(q.key_phrases(config.phrases))
    return RetrieveRequest(
        user_id=q.user_id,
        key_phrases=phrases,
        limits=Limits(memory_units=config.top_k, concepts=0, artifacts=config.artifacts),
        max_depth=depth,
        weights=weights,
        as_of=q.as_of,
        preset=preset,
        config=config.overrides(),
    )


class Traced:
    """The ids of the memory units each request scored (the request's trace,
    :class:`hrt.pipeline.RequestTrace`): which evidence turns became candidates at all, at any
    rank. Read once per request, right after it."""

    def __init__(self) -> None:
        self.last: frozenset[str] = frozenset()

    def __call__(self, trace: RequestTrace) -> None:
        self.last = frozenset(x.id for x in trace.scored if x.kind is Kind.MEMORY_UNIT)


class PhraseTally:
    """Key phrases asked and left unmatched (no seed above the floor) over a system's requests:
    the meta's ``unmatched_phrases``, what aliases are for (docs/eval-locomo.md)."""

    def __init__(self) -> None:
        self.asked = 0
        self.unmatched = 0

    def add(self, asked: int, unmatched: int) -> None:
        self.asked += asked
        self.unmatched += unmatched

    def as_json(self) -> dict[str, float]:
        rate = self.unmatched / self.asked if self.asked else 0.0
        return {"asked": self.asked, "unmatched": self.unmatched, "rate": round(rate, 4)}


def hrt_system(
    tool: Any,
    derived: Mapping[str, Mapping[str, frozenset[str]]],
    config: EvalConfig,
    depth: int | None,
    weights: Weights | None,
    traced: Traced | None = None,
    preset: RetrievalPresetName | None = None,
    tally: PhraseTally | None = None,
    render_budgets: Sequence[int] = (),
) -> System:
    """HRT's own retrieval: memory units for recall, memory units and artifacts merged by score for
    the artifact-credited recall; with ``traced``, the memory units it scored (candidate recall);
    with ``render_budgets``, what its rendering holds within each (hrt/eval/locomo/rendered.py)."""

    async def run(q: Question) -> Ranking:
        retrieval = await tool.run(request_for(q, config, depth, weights, preset), trace=traced is not None)
        if traced is not None and retrieval.trace is not None:
            traced(retrieval.trace)
        ctx = retrieval.response
        if tally is not None:
            tally.add(len(ctx.retrieval_metadata.key_phrases_processed), len(ctx.unmatched_key_phrases))
        mus = [m.muid for m in ctx.retrieved_memory_units]
        items = [(-m.final_retrieval_score, m.muid) for m in ctx.retrieved_memory_units]
        items += [(-a.final_retrieval_score, a.id) for a in ctx.retrieved_artifacts]
        table = derived.get(q.user_id, {})
        mixed = [table.get(i, frozenset([i])) for _, i in sorted(items)]
        shown: dict[str, frozenset[str]] = {}
        if render_budgets:
            shown = hrt_rendered(ctx, await returned_entities(tool.records, ctx), render_budgets)
        return Ranking(mus, mixed, traced.last if traced is not None else None, shown)

    return run
