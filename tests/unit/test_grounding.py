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

    req = RetrieveRequest(user_id="u1", key_phrases=["Postgres billing"], as_of="2025-08-01T00:00:00Z")
    cosine = await loaded_service.retrieve(req)
    loaded_service.tool.settings = loaded_service.settings.model_copy(update={"semantic_evidence": "fused"})
    fused = await loaded_service.retrieve(req)
    seeds = lambda doc: doc.retrieval_metadata.phrase_grounding[0].seed_ids  # noqa: E731
    assert seeds(cosine) == seeds(fused)
    top = fused.retrieved_memory_units[0]
    assert top.score_breakdown.semantic > next(
        m.score_breakdown.semantic for m in cosine.retrieved_memory_units if m.muid == top.muid
    )
