"""Notes from the rules: what a message states, written the way a reader's question names it.

An LLM's notes on a conversation help retrieval for reasons a deterministic pipeline can copy
(docs/eval-locomo.md, "Notes from the rules"), and this module copies them, without a model:

- **who**: first person becomes the speaker's name, second person the listener's when the
  conversation has exactly one other participant (``"I adopted a puppy"`` -> ``"Caroline adopted
  a puppy"``): questions name people, never "I";
- **one statement per line**: sentences, then clauses joined by ``;`` or ``, but``/``, and so``;
  questions, greetings and filler (fewer than :data:`MIN_CONTENT_WORDS` content words) left out;
- **when**: a relative time resolved against the message's own time and written absolutely the
  way people answer "when?" (``yesterday`` -> ``yesterday (7 May 2023)``, ``last week`` -> ``last
  week (the week before 8 May 2023)``, ``two years ago`` -> ``two years ago (2021)``);
- **what a reply answers**: a message with too little of its own (``"Yes, with TAP"``) is
  written behind the message it answers, and the statements of one that answers a question
  behind that question (``Caroline, answering Melanie's "What made you decide to adopt?":``),
  so each is found by the words of the question (a question itself has no note).

The note is one artifact per message, ``DERIVED_FROM`` it and linked to the concepts it names:
:func:`note_text` is the one function both writers call, the conversation route's planner
(:mod:`hrt.extraction.conversation`) and the LoCoMo batch import, so both build the same note from
the same message. The message's own text is never changed. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from hrt.records import NOTE_ARTIFACT_TYPE, Artifact, note_id

__all__ = ["NOTE_ARTIFACT_TYPE", "note_id", "note_text", "rule_note"]
from hrt.text import content_words

MIN_CONTENT_WORDS = 2  # a clause with fewer states nothing a question can find ("Wow, thanks!")
SHORT_REPLY_WORDS = 3  # a message with fewer content words is written behind the one it answers
MAX_NOTE_CHARS = 2_000
MAX_QUOTED_CHARS = 240  # of the message a short reply answers

MAX_PARTICIPANTS = 16  # the speakers a session remembers (who "you" is)

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_CLAUSE = re.compile(r";\s+|,\s+(?:but|and so|so)\s+", re.IGNORECASE)

# first and second person, longest forms first; {s} the speaker, {l} the listener
_FIRST = (
    (r"i'm|i am", "{s} is"),
    (r"i've|i have", "{s} has"),
    (r"i'd", "{s} would"),
    (r"i'll", "{s} will"),
    (r"i was", "{s} was"),
    (r"myself", "{s}"),
    (r"mine", "{s}'s"),
    (r"my", "{s}'s"),
    (r"me", "{s}"),
    (r"i", "{s}"),
)
_SECOND = (
    (r"you're|you are", "{l} is"),
    (r"you've|you have", "{l} has"),
    (r"you were", "{l} was"),
    (r"yourself", "{l}"),
    (r"yours", "{l}'s"),
    (r"your", "{l}'s"),
    (r"you", "{l}"),
)
# words that carry no statement of their own: reactions, thanks, intensifiers, fillers
_FILLER = frozenset(
    [
        "wow",
        "oh",
        "ah",
        "haha",
        "lol",
        "yeah",
        "yes",
        "yep",
        "no",
        "nope",
        "ok",
        "okay",
        "sure",
        "thanks",
        "thank",
        "great",
        "awesome",
        "cool",
        "nice",
        "amazing",
        "wonderful",
        "fantastic",
        "glad",
        "happy",
        "really",
        "totally",
        "much",
        "very",
        "just",
        "sounds",
        "sound",
        "good",
        "hey",
        "hi",
        "hello",
        "bye",
        "congrats",
        "congratulations",
        "s",
        "t",
        "ll",
        "ve",
        "re",
        "d",
        "m",
    ]
)
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'"})

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a couple of": 2,
    "a few": 3,
}
_COUNT = r"(?P<n>\d{1,2}|a couple of|a few|an?|one|two|three|four|five|six|seven|eight|nine|ten)"
_AGO = re.compile(r"\b" + _COUNT + r"\s+(?P<unit>day|week|month|year)s?\s+ago\b", re.IGNORECASE)
_RELATIVE = re.compile(
    r"\b(?P<what>yesterday|today|tonight|tomorrow|this (?:morning|afternoon|evening)"
    r"|(?:last|this past|past) (?:weekend|week|month|year)|next (?:weekend|week|month|year)"
    r"|this (?:weekend|week|month|year)"
    r"|(?:last|this past) (?:" + "|".join(_WEEKDAYS) + r"))\b",
    re.IGNORECASE,
)


def day_text(when: datetime) -> str:
    """``7 May 2023``: the form LoCoMo's answers and most people write."""
    return f"{when.day} {when.strftime('%B')} {when.year}"


def _month_back(when: datetime, months: int) -> datetime:
    index = when.year * 12 + when.month - 1 - months
    return when.replace(year=index // 12, month=index % 12 + 1, day=1)


def resolve_relative(phrase: str, when: datetime) -> str | None:
    """An absolute reading of a relative time expression said at ``when``; None when none."""
    p = phrase.lower()
    if p == "yesterday":
        return day_text(when - timedelta(days=1))
    if p in ("today", "tonight") or (p.startswith("this ") and p.split()[1] in ("morning", "afternoon", "evening")):
        return day_text(when)
    if p == "tomorrow":
        return day_text(when + timedelta(days=1))
    unit = p.split()[-1]
    if unit in _WEEKDAYS:
        back = (when.weekday() - _WEEKDAYS.index(unit) - 1) % 7 + 1
        return f"{unit.capitalize()}, {day_text(when - timedelta(days=back))}"
    ahead = p.startswith("next ")
    this = p.startswith("this ") and not p.startswith("this past")
    if unit in ("week", "weekend"):
        if this:
            return f"the {unit} of {day_text(when)}"
        return f"the {unit} {'after' if ahead else 'before'} {day_text(when)}"
    if unit == "month":
        month = when if this else _month_back(when, -1 if ahead else 1)
        return f"{month.strftime('%B')} {month.year}"
    return str(when.year + (0 if this else 1 if ahead else -1))


def resolve_ago(count: str, unit: str, when: datetime) -> str:
    """``3 days ago`` said at ``when``: the day, the week, the month or the year it was."""
    n = int(count) if count.isdigit() else _NUMBERS.get(count.lower(), 1)
    unit = unit.lower()
    if unit == "day":
        return day_text(when - timedelta(days=n))
    if unit == "week":
        return f"the week of {day_text(when - timedelta(weeks=n))}"
    if unit == "month":
        month = _month_back(when, n)
        return f"{month.strftime('%B')} {month.year}"
    return str(when.year - n)


def with_dates(text: str, when: datetime) -> str:
    """``text`` with each relative time expression followed by its absolute reading in brackets."""

    def relative(m: re.Match[str]) -> str:
        resolved = resolve_relative(m.group(0), when)
        return m.group(0) if resolved is None else f"{m.group(0)} ({resolved})"

    def ago(m: re.Match[str]) -> str:
        return f"{m.group(0)} ({resolve_ago(m.group('n'), m.group('unit'), when)})"

    return _AGO.sub(ago, _RELATIVE.sub(relative, text))


def _compiled(pairs: Sequence[tuple[str, str]]) -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(rf"\b(?:{p})\b", re.IGNORECASE), r) for p, r in pairs]


_FIRST_RE, _SECOND_RE = _compiled(_FIRST), _compiled(_SECOND)


def attributed(text: str, speaker: str, listener: str | None) -> str:
    """First person as ``speaker``, second person as ``listener`` (when there is one). The names
    are put in as they are (a function replacement: a backslash in a name is no group reference)."""
    out = text.translate(_APOSTROPHES)
    for patterns, name in ((_FIRST_RE, speaker), (_SECOND_RE, listener)):
        if not name:
            continue
        for pattern, template in patterns:
            out = pattern.sub(_literal(template.format(s=name, l=name)), out)
    return out


def _literal(text: str) -> Callable[[re.Match[str]], str]:
    """A replacement that puts ``text`` in as it is."""
    return lambda _match: text


def _said(text: str) -> list[str]:
    return [w for w in content_words(text) if w not in _FILLER]


def clauses(text: str) -> list[str]:
    """The statements of ``text``: its sentences and clauses that are not questions and hold at
    least :data:`MIN_CONTENT_WORDS` content words, each ending with a full stop."""
    out: list[str] = []
    for sentence in _SENTENCE.split(text.strip()):
        sentence = sentence.strip()
        if not sentence or sentence.endswith("?"):
            continue
        for clause in _CLAUSE.split(sentence):
            clause = clause.strip(" ,-\u2014").rstrip(".!").strip()
            if len(_said(clause)) >= MIN_CONTENT_WORDS:
                out.append(clause[0].upper() + clause[1:] + ".")
    return out


def is_short_reply(text: str) -> bool:
    """A message with too little of its own to be found: fewer than :data:`SHORT_REPLY_WORDS`
    content words outside questions."""
    said = [s for s in _SENTENCE.split(text.strip()) if s.strip() and not s.strip().endswith("?")]
    return len(_said(" ".join(said))) < SHORT_REPLY_WORDS


def _quoted(text: str) -> str:
    """``text`` on one line, at most :data:`MAX_QUOTED_CHARS` (cut at a word, marked)."""
    said = text.strip().replace("\n", " ")
    return said if len(said) <= MAX_QUOTED_CHARS else said[:MAX_QUOTED_CHARS].rsplit(" ", 1)[0] + "..."


def _answers(previous: tuple[str, str], speaker: str, text: str) -> bool:
    """A short reply to another speaker that says something (a word of its own, or yes or no to
    a question): a bare "Thanks!" to a statement answers nothing a question would ask."""
    if previous[0] == speaker or not text.strip() or not is_short_reply(text):
        return False
    answer = {"yes", "no", "yeah", "nope"} & set(content_words(text))
    return bool(_said(text)) or (previous[1].rstrip().endswith("?") and bool(answer))


def note_text(
    speaker: str,
    text: str,
    when: datetime,
    listener: str | None = None,
    previous: tuple[str, str] | None = None,
) -> str | None:
    """The note of one message: its statements, one per line, attributed and dated. With
    ``previous`` (``(speaker, text)`` of the message before it) another speaker's: a short reply is
    written behind that message, and statements that answer its question behind the question.
    None when the message states nothing (a greeting, a question, a bare "Wow!")."""
    lines = clauses(with_dates(attributed(text, speaker, listener), when))
    if previous is not None and _answers(previous, speaker, text):
        reply = attributed(text.strip().replace("\n", " "), speaker, listener)
        lines = [f'{speaker}, answering {previous[0]}\'s "{_quoted(previous[1])}": {reply}']
    elif lines and previous is not None and previous[0] != speaker:
        asked = [q.strip() for q in _SENTENCE.split(previous[1].strip()) if q.strip().endswith("?")]
        if asked:
            lines = [f'{speaker}, answering {previous[0]}\'s "{_quoted(asked[-1])}":', *lines]
    if not lines:
        return None
    return "\n".join(lines)[:MAX_NOTE_CHARS]


def listener_of(speaker: str, participants: Sequence[str]) -> str | None:
    """The one other participant, when there is exactly one."""
    others = [p for p in dict.fromkeys(participants) if p.lower() != speaker.lower()]
    return others[0] if len(others) == 1 else None


def rule_note(
    user_id: str,
    muid: str,
    speaker: str,
    text: str,
    when: datetime,
    participants: Sequence[str],
    previous: tuple[str, str] | None,
) -> Artifact | None:
    """The note artifact of one message (its id :func:`note_id`, created at the message's time),
    None when :func:`note_text` has none. The writer adds its ``DERIVED_FROM`` edge."""
    content = note_text(speaker, text, when, listener_of(speaker, participants), previous)
    if content is None:
        return None
    return Artifact(
        user_id=user_id,
        id=note_id(muid),
        artifact_type=NOTE_ARTIFACT_TYPE,
        title=f"What {speaker} said"[:500],
        content=content,
        created_at=when,
        confidence=0.5,
    )
