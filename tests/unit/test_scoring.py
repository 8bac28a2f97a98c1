import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hrt.config import WEIGHT_PRESETS, Weights
from hrt.pipeline.scoring import (
    PLAIN,
    PreferenceBook,
    combine,
    preference_score,
    recency_score,
    score_candidates,
    semantic_score,
)
from hrt.records import EdgeType, Kind, Preference
from hrt.stores.base import GraphCandidate, GraphNode

DAY = 86_400.0
AS_OF = 1_000 * DAY


@pytest.mark.parametrize(
    ("ts", "half_life", "expected"),
    [
        (AS_OF, 30, 1.0),  # now
        (AS_OF - 30 * DAY, 30, 0.5),  # one half-life
        (AS_OF - 60 * DAY, 30, 0.25),  # two
        (AS_OF - 7 * DAY, 7, 0.5),
        (AS_OF + 5 * DAY, 30, 1.0),  # future timestamps never exceed 1
        (None, 30, 0.5),  # no timestamp: neutral
    ],
)
def test_recency_halves_every_half_life(ts, half_life, expected):
    assert recency_score(ts, AS_OF, half_life) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("direct", "path", "expected"),
    [(0.8, 0.3, 0.8), (None, 0.3, 0.3), (0.2, 0.5, 0.5), (-0.4, 0.0, 0.0), (1.3, 0.0, 1.0)],
)
def test_semantic_is_best_of_direct_and_path_clamped(direct, path, expected):
    assert semantic_score(direct, path) == pytest.approx(expected)


def node(ident, kind, category="x", salience=0.5, ts=None):
    return GraphNode(id=ident, kind=kind, label=ident, ts=ts, salience=salience, category=category)


BOOK = PreferenceBook.build(
    [
        Preference(user_id="u", target_kind="concept", target="c1", weight=0.9),
        Preference(user_id="u", target_kind="concept_type", target="project", weight=0.7),
        Preference(user_id="u", target_kind="source_type", target="email", weight=0.1),
        Preference(user_id="u", target_kind="artifact_type", target="plan", weight=0.8),
    ]
)


@pytest.mark.parametrize(
    ("n", "mentions", "expected"),
    [
        (node("c1", Kind.CONCEPT, "project"), (), 0.9),  # own weight beats its type's
        (node("c2", Kind.CONCEPT, "project"), (), 0.7),  # type weight
        (node("c3", Kind.CONCEPT, "person"), (), 0.5),  # neutral
        (node("a1", Kind.ARTIFACT, "plan"), (), 0.8),
        (node("a2", Kind.ARTIFACT, "digest"), (), 0.5),
        (node("m1", Kind.MEMORY_UNIT, "email"), (), 0.1),  # source type only
        (node("m2", Kind.MEMORY_UNIT, "email"), ("c1",), (0.1 + 0.9) / 2),  # mean of both signals
        (node("m3", Kind.MEMORY_UNIT, "chat"), ("c1", "c9"), 0.9),  # strongest mentioned concept
        (node("m4", Kind.MEMORY_UNIT, "chat"), ("c9",), 0.5),  # no signal: neutral
    ],
)
def test_preference_table(n, mentions, expected):
    assert preference_score(n, mentions, BOOK, {}) == pytest.approx(expected)


def test_weights_normalise_and_presets_sum_to_one():
    w = Weights(alpha_semantic_similarity=2, beta_recency=1, gamma_salience=1, delta_user_preference=0).normalised()
    assert (w.alpha_semantic_similarity, w.beta_recency, w.gamma_salience, w.delta_user_preference) == (
        0.5,
        0.25,
        0.25,
        0.0,
    )
    for preset in WEIGHT_PRESETS.values():
        assert math.isclose(preset.normalised().total(), 1.0)
    with pytest.raises(ValueError):
        Weights(alpha_semantic_similarity=0, beta_recency=0, gamma_salience=0, delta_user_preference=0)


def test_combine_is_the_weighted_sum():
    w = Weights(alpha_semantic_similarity=0.4, beta_recency=0.3, gamma_salience=0.2, delta_user_preference=0.1)
    assert combine(w, 1.0, 0.5, 0.25, 0.0) == pytest.approx(0.4 + 0.15 + 0.05)


def test_score_candidates_orders_by_score_then_id_and_uses_last_mention_for_concepts():
    w = Weights().normalised()
    book = PreferenceBook.build([])
    recent = AS_OF - 1 * DAY
    cands = [GraphCandidate(node(i, Kind.MEMORY_UNIT, ts=recent), 0, i, (), 0.5) for i in ("b", "a")] + [
        GraphCandidate(node("c", Kind.CONCEPT), 1, "a", (), 0.3, last_mention_ts=recent),
        GraphCandidate(node("d", Kind.CONCEPT), 1, "a", (), 0.3, last_mention_ts=None),
    ]
    out = score_candidates(cands, {}, book, w, AS_OF, 30, PLAIN)
    assert [s.id for s in out] == ["a", "b", "c", "d"]  # a/b tie -> id; c newer than d
    assert out[2].recency > out[3].recency == 0.5
    assert all(0.0 <= s.final <= 1.0 for s in out)


@given(
    raw=st.lists(
        st.tuples(
            st.sampled_from(list(Kind)),
            st.sampled_from(["email", "chat", "project", "person", "plan"]),
            st.floats(-0.5, 1.5),  # salience, clamped
            st.one_of(st.none(), st.floats(AS_OF - 400 * DAY, AS_OF + 5 * DAY)),
            st.floats(-0.2, 1.3),  # path score
            st.one_of(st.none(), st.floats(-0.3, 1.2)),  # direct similarity
            st.lists(st.sampled_from(["n0", "n1", "n2", "c1", "c9"]), max_size=3),
        ),
        max_size=12,
    ),
    with_book=st.booleans(),
)
def test_score_candidates_is_the_per_term_functions(raw, with_book):
    """The written-out loop of score_candidates gives exactly what the documented functions give."""
    book = BOOK if with_book else PreferenceBook.build([])
    w = Weights().normalised()
    cands, similarity = [], {}
    for i, (kind, category, salience, ts, path, direct, mentions) in enumerate(raw):
        ident = f"n{i}"
        n = node(ident, kind, category, salience, None if kind is Kind.CONCEPT else ts)
        last = ts if kind is Kind.CONCEPT else None
        mentioned = tuple(mentions) if kind is Kind.MEMORY_UNIT else ()
        cands.append(GraphCandidate(n, 1, "n0", (), path, mentions=mentioned, last_mention_ts=last))
        if direct is not None:
            similarity[ident] = direct
    types = {c.node.id: c.node.category for c in cands if c.node.kind is Kind.CONCEPT}
    expected = {}
    for c in cands:
        sem = semantic_score(similarity.get(c.node.id), c.path_score)
        rec = recency_score(c.last_mention_ts if c.node.kind is Kind.CONCEPT else c.node.ts, AS_OF, 30)
        sal = min(1.0, max(0.0, c.node.salience))
        pref = min(1.0, max(0.0, preference_score(c.node, c.mentions, book, types)))
        expected[c.node.id] = (sem, rec, sal, pref, combine(w, sem, rec, sal, pref))
    out = score_candidates(cands, similarity, book, w, AS_OF, 30, PLAIN)
    assert {s.id: (s.semantic, s.recency, s.salience, s.preference, s.final) for s in out} == expected
    assert [s.id for s in out] == sorted(expected, key=lambda i: (-expected[i][4], i))


# --- relevance first: the scoped rule, the time match and the relevance gate ------------------


def cand(ident, hops, path, reached_at=None, ts=None, kind=Kind.MEMORY_UNIT):
    return GraphCandidate(node(ident, kind, ts=ts), hops, "s", (), path, reached_at=reached_at)


@pytest.mark.parametrize(
    ("c", "direct", "own", "expected"),
    [
        (cand("s", 0, 0.9), 0.7, None, 0.7),  # a seed: its direct evidence, not a better path into it
        (cand("h", 1, 0.5), 0.3, 0.9, 0.5),  # a hit one hop out: the best of direct and path
        (cand("h", 1, 0.2), 0.3, 0.9, 0.3),
        (cand("r", 1, 0.5), None, 0.6, 0.3),  # reached one hop out: path x own cosine
        (cand("r", 1, 0.5), None, -0.2, 0.0),  # a negative cosine counts 0
        (cand("r", 1, 0.5), None, None, 0.5),  # no vector yet: its path
        (cand("f", 2, 0.5), 0.9, 0.6, 0.5 * 0.6 * 0.6),  # two hops out, hit or not: path x own x decay
        (cand("f", 3, 0.5), None, 0.6, 0.5 * 0.6 * 0.6 * 0.6),
        (cand("d", 3, 0.5, reached_at=1), None, 0.6, 0.3),  # distance is the first hop, not the path's
    ],
)
def test_scoped_semantic_evidence(c, direct, own, expected):
    from hrt.pipeline.scoring import candidate_semantic

    assert candidate_semantic(c, direct, own, "scoped", 0.6) == pytest.approx(expected)


def test_earlier_rules_are_kept():
    from hrt.pipeline.scoring import candidate_semantic

    c = cand("r", 2, 0.5)
    assert candidate_semantic(c, None, 0.6, "path", 0.6) == 0.5
    assert candidate_semantic(c, None, 0.6, "path_x_cosine", 0.6) == pytest.approx(0.3)
    assert candidate_semantic(c, 0.2, 0.6, "path_x_cosine", 0.6) == 0.5  # a hit: max(direct, path)
    with pytest.raises(ValueError, match="reached_evidence"):
        candidate_semantic(c, None, 0.6, "sum", 0.6)


def test_time_match_puts_candidates_in_the_named_window_first():
    from hrt.pipeline.scoring import time_matched
    from hrt.pipeline.temporal import TimeWindow

    w = [TimeWindow("p", "May 2023", 100.0, 200.0)]
    assert time_matched(0.3, 150.0, w) == pytest.approx(0.65)
    assert time_matched(0.9, 250.0, w) == pytest.approx(0.45)  # out of the window: below any in it
    assert time_matched(0.9, None, w) == pytest.approx(0.45)
    assert time_matched(0.9, 250.0, []) == 0.9  # no date named: unchanged


@given(
    sems=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=12),
    others=st.lists(st.tuples(st.floats(AS_OF - 400 * DAY, AS_OF), st.floats(0.0, 1.0)), min_size=12, max_size=12),
    tau=st.sampled_from([0.3, 0.5, 0.8]),
    preset=st.sampled_from(sorted(WEIGHT_PRESETS)),
)
def test_the_relevance_gate_never_lets_other_terms_carry_an_irrelevant_candidate_past_a_relevant_one(
    sems, others, tau, preset
):
    """Below tau x the best semantic term, no age, salience or preference lifts a candidate above
    one at or above it, under every preset; the gated score is what docs/api.md says."""
    from hrt.pipeline.scoring import Evidence, relevance_factor

    w = WEIGHT_PRESETS[preset].normalised()
    cands, similarity = [], {}
    for i, s in enumerate(sems):
        ts, sal = others[i]
        ident = f"n{i}"
        cands.append(GraphCandidate(node(ident, Kind.MEMORY_UNIT, salience=sal, ts=ts), 0, ident, (), s))
        similarity[ident] = s
    out = score_candidates(cands, similarity, PreferenceBook.build([]), w, AS_OF, 30, Evidence(rule="scoped", gate=tau))
    best = max(sems)
    relevant = [x for x in out if x.semantic >= tau * best]
    irrelevant = [x for x in out if x.semantic < tau * best]
    if relevant and irrelevant:
        assert min(x.final for x in relevant) >= max(x.final for x in irrelevant)
    for x in out:
        rel = relevance_factor(x.semantic, best, tau)
        assert x.relevance == pytest.approx(rel)
        assert x.final == pytest.approx(combine(w, x.semantic, x.recency, x.salience, x.preference, rel))


def test_no_gate_is_the_plain_weighted_sum():
    from hrt.pipeline.scoring import Evidence

    w = Weights().normalised()
    cands = [GraphCandidate(node("a", Kind.MEMORY_UNIT, ts=AS_OF), 0, "a", (), 0.1)]
    plain = score_candidates(cands, {"a": 0.1}, PreferenceBook.build([]), w, AS_OF, 30, PLAIN)
    gate0 = score_candidates(cands, {"a": 0.1}, PreferenceBook.build([]), w, AS_OF, 30, Evidence(rule="path", gate=0.0))
    assert plain[0].final == gate0[0].final == combine(w, 0.1, 1.0, 0.5, 0.5)


def test_positional_makers_build_what_the_frozen_constructors_build() -> None:
    """The hot loops' constructors (hrt.stores.base.positional_maker) give equal, still frozen,
    objects: every field set, in field order."""
    import dataclasses

    from hrt.pipeline.scoring import Scored, make_scored
    from hrt.stores.base import PathStep, make_candidate

    node = GraphNode("mu-1", Kind.MEMORY_UNIT, "a memory", 5.0, 0.25, "note", ("t",), "agent", 1.0, 9.0)
    step = PathStep(EdgeType.MENTIONS, "c-1", True)
    values = (node, 2, "c-0", (step,), 0.375, ("c-1",), 4.0, 1)
    fast, slow = make_candidate(*values), GraphCandidate(*values)
    assert fast == slow and dataclasses.astuple(fast) == dataclasses.astuple(slow)
    scored = make_scored(fast, 0.5, 0.25, 0.125, 0.75, 0.6, None, 0.9, "mu-0", True, ("mu-9",))
    assert scored == Scored(fast, 0.5, 0.25, 0.125, 0.75, 0.6, None, 0.9, "mu-0", True, ("mu-9",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        scored.final = 1.0  # type: ignore[misc]


def test_recency_runs_on_the_candidates_clock() -> None:
    """recency_clock latest: the newest candidate is as recent as can be however old the data; the
    one a half-life before it scores half; as_of still caps the clock; as_of: the old behaviour."""
    from hrt.pipeline.scoring import Evidence, recency_clock

    day = 86_400.0
    old, older = 1_000 * day, 970 * day  # thirty days apart, years before as_of
    as_of = 3_000 * day
    cands = [
        GraphCandidate(GraphNode(i, Kind.MEMORY_UNIT, i, ts, 0.5, "note"), 0, i, (), 0.0)
        for i, ts in (("new", old), ("older", older))
    ]
    assert recency_clock(cands, as_of) == old and recency_clock(cands, older) == older
    book = PreferenceBook.build([], 0.5)
    weights = Weights(alpha_semantic_similarity=0.5, beta_recency=0.5, gamma_salience=0.0, delta_user_preference=0.0)
    sim = {"new": 0.5, "older": 0.5}
    latest = {s.id: s.recency for s in score_candidates(cands, sim, book, weights, as_of, 30.0, Evidence(gate=0.0))}
    assert latest == {"new": 1.0, "older": 0.5}
    fixed = Evidence(gate=0.0, latest_clock=False)
    by_as_of = {s.id: s.recency for s in score_candidates(cands, sim, book, weights, as_of, 30.0, fixed)}
    assert by_as_of["new"] < 1e-6 and by_as_of["older"] < by_as_of["new"]


def test_what_no_longer_holds_comes_after_what_replaced_it() -> None:
    """after_successors: a stale item above one of its successors moves to just after the last of
    them; one already below, and items without successors, keep their places."""
    from hrt.pipeline.scoring import Scored, after_successors

    def item(ident: str, after: tuple[str, ...] = ()) -> Scored:
        node = GraphNode(ident, Kind.MEMORY_UNIT, ident, 1.0, 0.5, "note")
        return Scored(
            GraphCandidate(node, 0, ident, (), 0.0), 0.5, 0.5, 0.5, 0.5, 0.5, None, 1.0, None, bool(after), after
        )

    ranked = [item("old", ("new", "newer")), item("x"), item("new"), item("y"), item("newer"), item("z")]
    assert [s.id for s in after_successors(ranked)] == ["x", "new", "y", "newer", "old", "z"]
    below = [item("new"), item("old", ("new",)), item("x")]
    assert [s.id for s in after_successors(below)] == ["new", "old", "x"]
    assert [s.id for s in after_successors([item("old", ("gone",)), item("x")])] == ["old", "x"]
