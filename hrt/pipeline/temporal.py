"""Dates named in the key phrases, as time windows the scorer matches memories against.

A phrase that names a date ("What did John do the week before August 3, 2023?", "Maria's job in
August 2023", "the party on 25 February, 2022", "trips in 2022") asks about what happened then, so
a memory recorded at that time is more relevant than an equally similar one from another year.
This module finds those dates, deterministically and without a model: calendar dates written
with a month name and a year (``August 3, 2023``, ``3 August 2023``, ``3rd of Aug, 2023``), a
month and a year (``August 2023``), and a year after ``in``/``during``/``of`` (``in 2022``). A
day is widened by :data:`DAY_SLACK_S` on each side (time zones, and a memory recorded the next
morning), a month and a year are their calendar span. Dates without a year ("in May") and
relative ones ("last week", "yesterday") are left alone: their reference time is not known
(a phrase's "last week" may be the speaker's, not ``as_of``'s).

Scoring (``hrt/pipeline/scoring.py``, ``HRT_TEMPORAL_MATCH=tier``) puts the candidates whose
timestamp falls in a window above those whose timestamp does not; ``off`` ignores the windows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

DAY_SLACK_S = 86_400.0

_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
# full names, three-letter abbreviations (with an optional dot) and "sept"
_MONTH = r"(?P<{name}>" + "|".join([*_MONTHS, *(m[:3] + r"\.?" for m in _MONTHS if m != "may"), r"sept\.?"]) + r")"
_DAY = r"(?P<{name}>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<{name}>(?:19|20)\d\d)"

_MONTH_DAY_YEAR = re.compile(
    r"\b" + _MONTH.format(name="m") + r"\s+" + _DAY.format(name="d") + r",?\s+" + _YEAR.format(name="y") + r"\b",
    re.IGNORECASE,
)
_DAY_MONTH_YEAR = re.compile(
    r"\b"
    + _DAY.format(name="d")
    + r"\s+(?:of\s+)?"
    + _MONTH.format(name="m")
    + r",?\s+"
    + _YEAR.format(name="y")
    + r"\b",
    re.IGNORECASE,
)
_MONTH_YEAR = re.compile(
    r"\b" + _MONTH.format(name="m") + r",?\s+(?:of\s+)?" + _YEAR.format(name="y") + r"\b", re.IGNORECASE
)
_YEAR_ALONE = re.compile(r"\b(?:in|during|of|throughout)\s+" + _YEAR.format(name="y") + r"\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """A span named in a phrase: epoch seconds, ``start`` included, ``end`` excluded."""

    phrase: str
    text: str  # the words that named it
    start: float
    end: float

    def contains(self, ts: float) -> bool:
        return self.start <= ts < self.end


def _month(name: str) -> int:
    key = name.lower().rstrip(".")[:3]
    return next(i for i, m in enumerate(_MONTHS, start=1) if m.startswith(key))


def _ts(year: int, month: int, day: int = 1) -> float:
    return datetime(year, month, day, tzinfo=UTC).timestamp()


def _next_month(year: int, month: int) -> float:
    return _ts(year + 1, 1) if month == 12 else _ts(year, month + 1)


def windows_in(phrase: str) -> list[TimeWindow]:
    """The time windows one phrase names, in order of appearance (see the module docstring)."""
    found: list[tuple[int, TimeWindow]] = []
    taken: list[tuple[int, int]] = []

    def free(span: tuple[int, int]) -> bool:
        return all(span[1] <= a or span[0] >= b for a, b in taken)

    for pattern in (_MONTH_DAY_YEAR, _DAY_MONTH_YEAR):
        for m in pattern.finditer(phrase):
            if not free(m.span()):
                continue
            try:
                day = _ts(int(m.group("y")), _month(m.group("m")), int(m.group("d")))
            except ValueError:  # 31 February
                continue
            taken.append(m.span())
            found.append((m.start(), TimeWindow(phrase, m.group(0), day - DAY_SLACK_S, day + 86_400.0 + DAY_SLACK_S)))
    for m in _MONTH_YEAR.finditer(phrase):
        if not free(m.span()):
            continue
        year, month = int(m.group("y")), _month(m.group("m"))
        taken.append(m.span())
        start, end = _ts(year, month) - DAY_SLACK_S, _next_month(year, month) + DAY_SLACK_S
        found.append((m.start(), TimeWindow(phrase, m.group(0), start, end)))
    for m in _YEAR_ALONE.finditer(phrase):
        if not free(m.span()):
            continue
        year = int(m.group("y"))
        taken.append(m.span())
        start, end = _ts(year, 1) - DAY_SLACK_S, _ts(year + 1, 1) + DAY_SLACK_S
        found.append((m.start(), TimeWindow(phrase, m.group(0), start, end)))
    return [w for _, w in sorted(found, key=lambda x: x[0])]


def phrase_windows(phrases: Iterable[str]) -> tuple[TimeWindow, ...]:
    """Every phrase's windows, phrases in order; the same window named twice is kept once."""
    out: list[TimeWindow] = []
    seen: set[tuple[float, float]] = set()
    for phrase in phrases:
        for w in windows_in(phrase):
            if (w.start, w.end) not in seen:
                seen.add((w.start, w.end))
                out.append(w)
    return tuple(out)


def in_any(ts: float | None, windows: Sequence[TimeWindow]) -> bool:
    return ts is not None and any(w.contains(ts) for w in windows)
