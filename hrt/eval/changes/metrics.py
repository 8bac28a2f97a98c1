"""The metrics of ``hrt eval changes``, on ranked lists of message indices (pure functions).

A response is seen as :class:`Response`: the returned memory units best first, each as the index
of its message in the conversation (``None`` for a unit that is no message of it), with the
validity the response gave it (``True``/``False``, ``None`` without an interval), and the number
of memory units the request set aside as no longer true (``validity.suppressed``).

Per question (docs/eval-changes.md): ``current_first`` (on the request with
``include_invalidated``), ``current_retrieved``, ``outdated_unmarked``, ``empty``,
``recall@5``/``recall@10`` (on the default request), ``control_superseded`` (control
conversations); per conversation, the store's supersession pairs against the labels
(:func:`supersession_scores`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

KS = (5, 10)
OVERALL = "overall"
# per question, in the order of the tables; None where a metric does not apply to the question
METRICS = (
    "current_first",
    "current_retrieved",
    "outdated_unmarked",
    "empty",
    "control_superseded",
    *(f"recall@{k}" for k in KS),
)


@dataclass(frozen=True, slots=True)
class Response:
    ranked: tuple[int | None, ...]  # message index of each returned memory unit, best first
    valid: Mapping[int, bool | None] = field(default_factory=dict)  # by message index; None: no interval
    suppressed: int = 0  # memory units set aside as not true at valid_at

    @property
    def invalid(self) -> list[int]:
        """Returned messages marked ``valid: false``, in rank order."""
        return [i for i in self.ranked if i is not None and self.valid.get(i) is False]


def best_rank(ranked: Sequence[int | None], wanted: Collection[int]) -> int | None:
    """The 0-based rank of the first of ``wanted`` in ``ranked``, None when none is there."""
    return next((r for r, i in enumerate(ranked) if i is not None and i in wanted), None)


def current_first(ranked: Sequence[int | None], current: Collection[int], outdated: Collection[int]) -> float:
    """1 when the best-ranked current message ranks above every outdated one returned (an
    outdated one not returned counts as below); 0 when no current message is returned."""
    first_current = best_rank(ranked, current)
    if first_current is None:
        return 0.0
    first_outdated = best_rank(ranked, outdated)
    return 1.0 if first_outdated is None or first_current < first_outdated else 0.0


def current_retrieved(ranked: Sequence[int | None], current: Collection[int]) -> float:
    """1 when a current message is among the returned memory units."""
    return 1.0 if best_rank(ranked, current) is not None else 0.0


def outdated_unmarked(response: Response, outdated: Collection[int]) -> float | None:
    """1 when an outdated message is returned without being marked no longer true (``valid`` true,
    or no interval); None for a question without outdated messages (a control)."""
    if not outdated:
        return None
    unmarked = any(i is not None and i in outdated and response.valid.get(i) is not False for i in response.ranked)
    return 1.0 if unmarked else 0.0


def empty(ranked: Sequence[int | None]) -> float:
    """1 when no memory unit is returned."""
    return 0.0 if ranked else 1.0


def recall_at(ranked: Sequence[int | None], relevant: Collection[int], k: int) -> float:
    """Share of the relevant messages among the first ``k`` returned."""
    if not relevant:
        return 0.0
    return len(set(relevant).intersection(i for i in ranked[:k] if i is not None)) / len(set(relevant))


def superseded_seen(default: Response, invalidated: Response) -> bool:
    """Whether the responses show a superseded (or ended) message: one set aside by the default
    request, or one marked ``valid: false`` with ``include_invalidated``."""
    return default.suppressed > 0 or invalidated.suppressed > 0 or bool(invalidated.invalid)


def question_metrics(
    default: Response,
    invalidated: Response,
    current: Collection[int],
    outdated: Collection[int],
    control_supersessions: bool | None,
) -> dict[str, float | None]:
    """Every metric of one question: ``default`` answered the default request, ``invalidated``
    the same with ``include_invalidated``; ``control_supersessions`` is whether the question's
    control conversation holds any supersession (None: not a control conversation)."""
    control: float | None = None
    if control_supersessions is not None:
        control = 1.0 if control_supersessions or superseded_seen(default, invalidated) else 0.0
    return {
        "current_first": current_first(invalidated.ranked, current, outdated),
        "current_retrieved": current_retrieved(default.ranked, current),
        "outdated_unmarked": outdated_unmarked(default, outdated),
        "empty": empty(default.ranked),
        "control_superseded": control,
        **{f"recall@{k}": recall_at(default.ranked, current, k) for k in KS},
    }


def aggregate(rows: Iterable[tuple[str, Mapping[str, float | None]]]) -> dict[str, dict[str, float | None]]:
    """Means per group (each row's kind) and ``overall``: ``n`` questions, then each metric over the
    questions it applies to (None when it applies to none), rounded to 4 places."""
    groups: dict[str, list[Mapping[str, float | None]]] = {OVERALL: []}
    for kind, metrics in rows:
        groups[OVERALL].append(metrics)
        groups.setdefault(kind, []).append(metrics)
    out: dict[str, dict[str, float | None]] = {}
    for group, members in groups.items():
        summary: dict[str, float | None] = {"n": float(len(members))}
        for name in METRICS:
            values = [v for m in members if (v := m.get(name)) is not None]
            summary[name] = round(sum(values) / len(values), 4) if values else None
        out[group] = summary
    return out


@dataclass(frozen=True, slots=True)
class SupersessionScore:
    """A conversation's supersession pairs (new -> old message index; None: a memory unit that is
    no message of the conversation) against its labels."""

    pairs: tuple[tuple[int | None, int | None], ...]
    correct: int  # pairs whose old message is labelled outdated (or reverted) and is older than the new one
    outdated: int  # messages labelled outdated
    outdated_superseded: int  # of them, superseded by a later message

    @property
    def precision(self) -> float | None:
        return round(self.correct / len(self.pairs), 4) if self.pairs else None

    @property
    def recall(self) -> float | None:
        return round(self.outdated_superseded / self.outdated, 4) if self.outdated else None


def supersession_scores(
    pairs: Iterable[tuple[int | None, int | None]], outdated: Collection[int], reverted: Collection[int] = ()
) -> SupersessionScore:
    """Precision of the pairs (one is correct when it supersedes an outdated message, or one a
    revert later restored, by a later message) and recall of the outdated messages (one is
    correctly superseded when any later message supersedes it)."""
    held = tuple(sorted(set(pairs), key=lambda p: (_order(p[0]), _order(p[1]))))
    allowed = set(outdated) | set(reverted)
    later = [(new, old) for new, old in held if new is not None and old is not None and new > old]
    correct = sum(1 for _, old in later if old in allowed)
    superseded = {old for _, old in later}
    return SupersessionScore(held, correct, len(set(outdated)), len(superseded & set(outdated)))


def _order(index: int | None) -> int:
    return -1 if index is None else index


def micro_supersession(scores: Iterable[SupersessionScore]) -> dict[str, float | None]:
    """Totals over conversations: pairs, correct ones, their precision; outdated messages, those
    superseded, the recall."""
    listed = list(scores)
    pairs = sum(len(s.pairs) for s in listed)
    correct = sum(s.correct for s in listed)
    outdated = sum(s.outdated for s in listed)
    superseded = sum(s.outdated_superseded for s in listed)
    return {
        "conversations": float(len(listed)),
        "with_supersessions": float(sum(1 for s in listed if s.pairs)),
        "pairs": float(pairs),
        "correct": float(correct),
        "precision": round(correct / pairs, 4) if pairs else None,
        "outdated": float(outdated),
        "outdated_superseded": float(superseded),
        "recall": round(superseded / outdated, 4) if outdated else None,
    }
