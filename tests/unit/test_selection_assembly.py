import pytest

from hrt.pipeline.assembly import make_snippet, related_memory_units, summary_text
from hrt.pipeline.selection import Fingerprint
from hrt.records import Kind
from hrt.stores.base import GraphNode

FILLER = "Filler words about nothing in particular. " * 10
TEXT = FILLER + "The Kubernetes upgrade failed at noon. " + "More filler afterwards. " * 10


@pytest.mark.parametrize(
    ("text", "phrases", "limit", "expect_in", "prefix", "suffix"),
    [
        ("short text stays whole", ["x"], 80, "short text stays whole", False, False),
        (TEXT, ["kubernetes UPGRADE"], 80, "Kubernetes upgrade failed", True, True),  # case-insensitive phrase
        (TEXT, ["upgrade of kubernetes"], 80, "Kubernetes upgrade", True, True),  # falls back to a word
        (TEXT, ["absent phrase"], 80, "Filler words", False, True),  # no anchor: the beginning
        (FILLER + "tail match", ["tail match"], 60, "tail match", True, False),
    ],
)
def test_snippet_table(text, phrases, limit, expect_in, prefix, suffix):
    s = make_snippet(text, phrases, limit)
    assert expect_in in s
    assert len(s) <= limit + 2
    assert s.startswith("…") is prefix and s.endswith("…") is suffix
    body = s.strip("…")
    assert body == body.strip() and " ".join(text.split()).find(body) >= 0  # whole words, verbatim


def test_snippet_is_deterministic():
    assert make_snippet(TEXT, ["noon"], 100) == make_snippet(TEXT, ["noon"], 100)


@pytest.mark.parametrize(
    ("a", "b", "dup"),
    [
        (
            "Migrated the billing tables to Postgres 16 over the weekend without downtime.",
            "Migrated the billing tables to Postgres 16 over the weekend without any downtime.",
            True,
        ),
        (
            "Standup: Ben on alerts, Priya on the pricing page, Maya reviewing the beta list.",
            "standup - Ben on alerts, Priya on the pricing page; Maya reviewing the beta list",
            True,
        ),
        (
            "Weekly review: shipped alerts, pricing still open, beta list at 40 names.",
            "Weekly review: shipped onboarding, hiring still open, churn report at 12 pages.",
            False,
        ),
        ("the cat sat on the mat", "the mat sat on the cat", False),  # same words, other order
    ],
)
def test_near_duplicate_table(a, b, dup):
    assert Fingerprint(a).near_duplicate(Fingerprint(b), 0.8) is dup


def test_summary_wording():
    counts = {Kind.MEMORY_UNIT: 2, Kind.CONCEPT: 1, Kind.ARTIFACT: 0}
    text = summary_text(1, 1, 5, 2, counts, ["deep work"], False, [])
    assert text == (
        "HRT: Processed 1 key phrase. Found 1 seed entity via hybrid search. Expanded to 5 graph "
        "candidates at depth 2. Prioritized and returned top 2 MemoryUnits, 1 Concepts, 0 Artifacts. "
        "Unmatched phrases: ['deep work']."
    )
    assert summary_text(2, 0, 0, 1, counts, [], True, ["rerank failed: Timeout"]).endswith(
        "Unmatched phrases: none. Reranked. Degraded: rerank failed: Timeout."
    )


def test_related_memory_units_put_the_returned_ones_first_then_the_newest_others():
    def mu(i: int) -> GraphNode:
        return GraphNode(f"m{i}", Kind.MEMORY_UNIT, f"note {i}", float(i), 0.5, "meeting_note")

    hub = GraphNode("c-hub", Kind.CONCEPT, "Hub", None, 0.5, "topic")
    other = GraphNode("c-other", Kind.CONCEPT, "Other", None, 0.5, "topic")
    # the response returns m2 (an old mention, beyond the newest read), m7 (among them) and m5
    # (which mentions another concept only)
    selected = [mu(2), mu(7), mu(5)]
    mu_concepts = {"m2": [hub], "m7": [other, hub], "m5": [other]}
    newest = {"c-hub": [mu(9), mu(8), mu(7), mu(6), mu(4), mu(3)]}  # count 3 + 3 returned
    got = related_memory_units("c-hub", selected, mu_concepts, newest, 3)
    assert [n.id for n in got] == ["m2", "m7", "m9"]
    assert [n.id for n in related_memory_units("c-hub", selected, mu_concepts, newest, 5)] == [
        "m2",
        "m7",
        "m9",
        "m8",
        "m6",
    ]
    # a returned one among the newest counts as returned; the rest newest first
    assert [n.id for n in related_memory_units("c-x", selected, mu_concepts, {"c-x": [mu(5), mu(1)]}, 3)] == [
        "m5",
        "m1",
    ]
    assert related_memory_units("c-hub", selected, mu_concepts, newest, 0) == []
