import pytest

from hrt.config import Settings
from hrt.pipeline.grounding import adaptive_threshold, ground_phrase, rrf_score, threshold_ladder
from hrt.records import Kind
from hrt.stores.base import VectorHit


def test_ladder_is_seed_002s():
    assert threshold_ladder(0.75, 0.35, 0.05) == [0.75, 0.7, 0.65, 0.6, 0.55, 0.5, 0.45, 0.4, 0.35]


@pytest.mark.parametrize(
    ("sims", "target", "expected"),
    [
        ([0.9] * 8, 8, 0.75),  # enough at the top: stay precise
        ([0.9] * 4 + [0.62] * 4, 8, 0.6),  # lowered until 8 pass
        ([0.9, 0.8], 8, 0.35),  # never reached: the floor
        ([], 8, 0.35),
        ([0.5] * 10, 8, 0.5),  # exactly on a rung counts
        ([0.7000000001] * 8, 8, 0.7),
    ],
)
def test_adaptive_threshold_one_pass(sims, target, expected):
    assert adaptive_threshold(sims, target, 0.75, 0.35, 0.05) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("ranks", "expected"),
    [((1, 1), 2 / 61), ((1, None), 1 / 61), ((None, 3), 1 / 63), ((None, None), 0.0), ((2, 5), 1 / 62 + 1 / 65)],
)
def test_rrf_k60(ranks, expected):
    assert rrf_score(ranks, 60) == pytest.approx(expected)


def hit(i, sim, vr, lr=None):
    return VectorHit(id=i, kind=Kind.MEMORY_UNIT, similarity=sim, vector_rank=vr, lexical_rank=lr)


def test_ground_phrase_admits_by_threshold_or_lexical_at_floor_and_orders_by_rrf():
    s = Settings(seeds_per_phrase=3)  # target = ceil(0.8 * 3) = 3
    hits = [
        hit("a", 0.80, 1, None),
        hit("b", 0.40, 3, 1),  # lexical top hit above the floor: admitted
        hit("c", 0.30, 4, 2),  # below the floor: never admitted
        hit("d", 0.50, 2, None),
    ]
    result, chosen = ground_phrase("p", hits, s)
    assert result.threshold == pytest.approx(0.4)  # the first rung admitting 3: a, d, b
    assert [h.id for h in chosen] == ["b", "a", "d"]  # RRF: b is in both lists
    assert "c" not in result.seed_ids
    assert result.matched


def test_ground_phrase_unmatched_when_nothing_reaches_the_floor():
    result, chosen = ground_phrase("p", [hit("a", 0.2, 1, 1)], Settings())
    assert not result.matched and chosen == [] and result.best_similarity == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("vr", "lr", "expected"), [(1, 1, 1.0), (1, None, 0.5), (None, 1, 0.5), (3, 2, (1 / 63 + 1 / 62) * 61 / 2)]
)
def test_fused_similarity_is_normalised_rrf(vr, lr, expected):
    from hrt.pipeline.grounding import fused_similarity

    assert fused_similarity(hit("a", 0.1, vr, lr), 60) == pytest.approx(expected)


async def test_fused_semantic_evidence_changes_scores_not_seeds(loaded_service):
    from hrt.contract import RetrieveRequest

    body = {"user_id": "u1", "key_phrases": ["Postgres billing"], "as_of": "2025-08-01T00:00:00Z"}
    cosine = await loaded_service.retrieve(RetrieveRequest(**body, config={"semantic_evidence": "cosine"}))
    fused = await loaded_service.retrieve(RetrieveRequest(**body, config={"semantic_evidence": "fused"}))
    seeds = lambda doc: doc.retrieval_metadata.phrase_grounding[0].seed_ids  # noqa: E731
    assert seeds(cosine) == seeds(fused)
    top = fused.retrieved_memory_units[0]
    assert top.score_breakdown.semantic > next(
        m.score_breakdown.semantic for m in cosine.retrieved_memory_units if m.muid == top.muid
    )


# --- evidence across phrases (phrase_evidence) -------------------------------------------------


@pytest.mark.parametrize(
    ("per_phrase", "n", "mode", "expected"),
    [
        ([0.8, 0.6], 2, "max", 0.8),
        ([0.8, 0.6], 2, "mean", 0.7),
        ([0.8], 2, "mean", 0.4),  # the phrase that did not return it counts 0
        ([0.8], 1, "mean", 0.8),  # one phrase: mean is max
        ([0.9, 0.9, 0.9], 3, "mean", 0.9),  # every phrase agrees: full evidence
        ([1.4, -0.2], 2, "mean", 0.5),  # each term clamped to [0, 1]
        ([], 2, "max", 0.0),
        ([], 2, "mean", 0.0),
    ],
)
def test_combine_phrase_evidence(per_phrase, n, mode, expected):
    from hrt.pipeline.grounding import combine_phrase_evidence

    assert combine_phrase_evidence(per_phrase, n, mode) == pytest.approx(expected)


def test_combine_phrase_evidence_rejects_an_unknown_mode():
    from hrt.pipeline.grounding import combine_phrase_evidence

    with pytest.raises(ValueError, match="phrase_evidence"):
        combine_phrase_evidence([0.5], 1, "sum")


class FixedIndex:
    """A VectorIndex answering each phrase with fixed hits (only ``search`` is used by grounding)."""

    def __init__(self, hits: dict[str, list[VectorHit]]) -> None:
        self.hits = hits

    async def search(self, user_id, phrases, vectors, kinds, k, not_after=None, where=None):
        return [self.hits[p] for p in phrases]


# p1 returns a (both legs, first) and b (vector leg only, second); p2 returns b (both legs, first)
# and c (both legs, second). With two seeds per phrase every hit is a seed.
TWO_PHRASES = {
    "p1": [hit("a", 0.8, 1, 1), hit("b", 0.6, 2, None)],
    "p2": [hit("b", 0.7, 1, 1), hit("c", 0.5, 2, 2)],
}
B_P1 = (1 / 62) * 61 / 2  # fused: second of the vector leg only
C_P2 = (2 / 62) * 61 / 2  # fused: second of both legs


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"semantic_evidence": "cosine", "phrase_evidence": "max"}, {"a": 0.8, "b": 0.7, "c": 0.5}),
        ({"semantic_evidence": "cosine", "phrase_evidence": "mean"}, {"a": 0.4, "b": 0.65, "c": 0.25}),
        ({"semantic_evidence": "fused", "phrase_evidence": "max"}, {"a": 1.0, "b": 1.0, "c": C_P2}),
        ({"semantic_evidence": "fused", "phrase_evidence": "mean"}, {"a": 0.5, "b": (B_P1 + 1.0) / 2, "c": C_P2 / 2}),
        ({}, {"a": 0.5, "b": (B_P1 + 1.0) / 2, "c": C_P2 / 2}),  # the defaults: fused evidence, mean over phrases
    ],
)
async def test_grounding_evidence_over_phrases(overrides, expected):
    from datetime import UTC, datetime

    from hrt.contract import RetrieveRequest
    from hrt.pipeline.grounding import run_grounding
    from hrt.pipeline.intake import run_intake

    s = Settings(seeds_per_phrase=2, **overrides).retrieval()
    intake = run_intake(RetrieveRequest(user_id="u", key_phrases=["p1", "p2"]), s, datetime(2025, 1, 1, tzinfo=UTC))
    g = await run_grounding(intake, [[0.0], [0.0]], FixedIndex(TWO_PHRASES), s.grounding)
    assert [p.seed_ids for p in g.phrases] == [("a", "b"), ("b", "c")]  # seed choice never changes
    assert g.similarity == pytest.approx(expected)
    assert g.seeds == pytest.approx(expected)  # a seed scores its evidence over the phrases too
