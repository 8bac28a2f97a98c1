"""What changed: when a later message updates, corrects, cancels or reverts an earlier one, by rules.

A message is searched for a *cue* (:func:`find_cue`): a plan moved ("we pushed the trip to
October"), something replaced ("switched to", "instead", "a new job", "no longer"), a correction
("sorry, I meant Tuesday"), a cancellation ("we called off the party") or a revert ("back to the
original plan"). A cue alone supersedes nothing; an earlier message is superseded for what it
stated (:func:`superseded`) only when it is about the same subject and stated what changed:

- **the same subject**: the cue's clause and the earlier message share a content key (an entity or
  a topic the rule extractor finds, the speaker's own name left out), or both are about the same
  life fact of the same person (a job, a home, a phone number, an email address, a diet: *families*),
  or, for a cue without an object of its own ("we moved it to October"), the earlier message is one
  of the last few of the conversation;
- **what changed**: the earlier message named the old value the cue names ("instead of Kyoto",
  "not 2pm", "dropping Kyoto", "no longer at Acme"), or it stated a value of a kind the cue gives
  anew (a month, a weekday, a day, a time, a number, an amount; a name for a life fact) that the
  cue does not repeat. A cancellation needs no new value: the earlier statements of what it
  cancels end. An echo of what ended ("Got it: Thursday at 9:30") ends with it.

Questions state nothing and are never superseded; a message that only mentions the subject again
("still on for October", "can't wait for Japan") carries no cue and supersedes nothing; a cue
under a negation, in reported speech or used as an adjective announces nothing. Every decision
names the rule that fired. Pure functions: the planner's side (:mod:`hrt.extraction.superseding`)
gives them the texts it has. docs/api.md, "What changed", has the table of rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, wraps
from typing import TypeVar

from hrt.extraction.rules import TOKEN, extract, stem, topic_key
from hrt.text import STOPWORDS


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# how many of the conversation's last messages a cue without an object of its own looks back on
RECENT = 6
# the kinds of value a statement states exactly (a name may be a subject)
_TYPED = ("month", "weekday", "season", "day", "year", "time", "number", "amount")
# the words on each side of a cancellation's cue that name what it cancels
WINDOW = 6
# how many earlier statements one message ends at the most, and of those through a family alone
MAX_ENDED = 6
MAX_BY_FAMILY = 1
# how many of the speaker's last messages a correction ("I meant ...") may correct
CORRECTABLE = 3

MONTHS = _words(
    """january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec"""
)
WEEKDAYS = _words("monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat")
SEASONS = _words("spring summer autumn fall winter christmas easter weekend")
# words that name a month only when capitalised ("may" and "march" are verbs too)
_AMBIGUOUS = frozenset({"may", "march", "sun", "sat", "wed", "fall", "mar", "jan"})
_DATE_WORDS = MONTHS | WEEKDAYS | SEASONS

_TIME = re.compile(r"\b(\d{1,2}(?::\d{2})?\s?(?:am|pm|a\.m\.|p\.m\.)|\d{1,2}:\d{2}|noon|midnight)\b", re.I)
_NUMERIC_DATE = re.compile(
    r"\b(\d{1,2}[/.]\d{1,2}(?:[/.]\d{2,4})?|\d{4}-\d{2}-\d{2}|(?:19|20)\d{2}|\d{1,2}(?:st|nd|rd|th))\b"
)
_PHONE = re.compile(r"(?<![\w])(\+?\d[\d ()\-]{5,}\d)(?![\w])")
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_AMOUNT = re.compile(
    r"\b(\d[\d,.]*)\s?(?:iu|mg|g|kg|lbs?|km|miles?|%|percent|hours?|minutes?|mins?|days?|weeks?|nights?|people|guests)\b",
    re.I,
)
_MONEY = re.compile(r"(?:[$€£]\s?\d[\d,.]*|\b\d[\d,.]*\s?(?:dollars|euros|pounds|k)\b)", re.I)

# life facts one holds one of at a time: the subject when two messages share no other key
_JOB = (
    r"jobs?|employer|career|salary|hired|promoted|resigned|internship|(?:work(?:s|ing|ed)?|position|role) (?:at|as|for)"
)
_HOME = (
    r"(?:live|lives|living|lived) (?:in|here|there)|mov(?:ed|ing) (?:in)?to|moved out|apartment|flat|address|rent|lease"
)
FAMILIES: dict[str, re.Pattern[str]] = {
    "job": re.compile(r"\b(?:" + _JOB + r")\b", re.I),
    "home": re.compile(r"\b(?:" + _HOME + r")\b", re.I),
    "manager": re.compile(r"\b(?:manager|boss|supervisor|report(?:s|ing)? to)\b", re.I),
    "car": re.compile(r"\b(?:car|drive|drives|driving)\b", re.I),
    "phone": re.compile(r"\b(?:phone|cell|mobile)(?: number)?\b", re.I),
    "email": re.compile(r"\be-?mail\b", re.I),
    "diet": re.compile(r"\b(?:vegan|vegetarian|pescatarian|keto|gluten|dairy|diet)\b", re.I),
}
# who a statement is about, when it is not the speaker
HOLDERS = _words(
    """brother sister mom mum mother dad father wife husband partner boyfriend girlfriend son daughter
    friend boss colleague coworker roommate neighbor neighbour cousin aunt uncle grandma grandpa kid kids"""
)


class _NoSentenceStart:
    """A name oracle for one message: a sentence's first word is never taken for a name (it is a
    topic word instead, so "Kyoto is lovely." still shares "kyoto" with "... then Kyoto.")."""

    def is_name(self, bare: str) -> bool:
        return False


_MID_SENTENCE = _NoSentenceStart()


@dataclass(frozen=True, slots=True)
class Cue:
    """A change a message announces: its kind, the rule that fired, the clause it is in, and the
    old values it names."""

    kind: str  # update | correction | cancellation | revert
    rule: str
    clause: str  # the sentence the cue is in (its object and new values)
    old_values: tuple[str, ...]  # lower case: what the cue says no longer holds
    start: int = 0  # where the cue starts in the clause
    at: int = 0  # where it ends
    stated: str = ""  # where its new values are: the clause without a reason before "so"

    @property
    def strength(self) -> int:
        return 0 if self.kind == "correction" else 1


def _any(*alternatives: str) -> str:
    return r"\b(?:" + "|".join(alternatives) + r")\b"


_BACK = r"back to (?:the |our |my )?(?:original|old|first|initial|previous|earlier)(?: \w+)?"
_STOPPED = r"stopped (?:going|doing|eating|drinking|using|playing|taking)"
_NOT_DOING = r"(?:are|is|am|'re|'m|'s) not (?:going|happening|doing)(?: \w+)? (?:anymore|any more|after all)"
_NOW_AFTER = r"(?:we're|we are|i'm|i am|it's|it is|they're|she's|he's) now"
_NOW = r"(?:now|these days) (?:it's|it is|we're|we are|i'm|i am|they're|she's|he's|i live|we live|i work|she works)"
_NOW_END = (
    r"now(?=\s*(?:[.!;]|$))|from now on|starting (?:next|this|tomorrow|today|on)|from (?:next|this) (?:week|month)"
)
_NEW_THING = (
    r"new (?:jobs?|roles?|positions?|address(?:es)?|numbers?|phones?|apartments?|flats?|places?|houses?|homes?|"
    r"emails?|dates?|times?|plans?|ones?|schedules?|policy|manager|boss|teacher|drummer|name)"
)
_STARTED = (
    r"started (?:a new|my new|working (?:at|as|for)|at)|first day (?:as|at)|signed a lease|"
    r"(?:accepted|took|got|landed) (?:an?|the) (?:job|offer|position|role)"
)
_CORRECTED = r"i meant|correction|my (?:bad|mistake)|scratch that|typo|misread|got (?:that|it|something) wrong"

# (kind, rule, pattern) in order: the first that matches is the message's cue
_CUES: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (kind, rule, re.compile(pattern, re.I))
    for kind, rule, pattern in (
        (
            "revert",
            "reverted",
            _any(_BACK, "going back to", "went back to", "revert(?:ing|ed)(?: to)?", "as originally planned"),
        ),
        (
            "revert",
            "reverted",
            r"\b\w+ after all\b(?! (?:the|that|this|these))|\b(?:is|are|'s|'re) back (?:at|to)\b",
        ),
        (
            "correction",
            "corrected",
            _any(_CORRECTED, r"actually\b[^.!?;]*\bnot", r"[\w:]+, not [\w:]+", r"(?:it's|it is) not \w+"),
        ),
        ("correction", "corrected", r"^\s*\*\s*\S"),
        (
            "cancellation",
            "cancelled",
            _any("cancel(?:l?ed|l?ing)", "call(?:ed|ing)? off", "scrapp(?:ed|ing)", "dropped out"),
        ),
        ("cancellation", "cancelled", _any("fell through", _NOT_DOING, "won't be (?:going|doing)", "isn't happening")),
        ("cancellation", "cancelled", _any("not happening anymore", "g(?:a|i)ve up on", "giving up on", "no more")),
        ("cancellation", "ended", _any("no longer", r"not \w+ any ?more", "any ?more", _STOPPED)),
        (
            "cancellation",
            "quit",
            _any("quit(?:s)?", "left my (?:job|position|role|company)", "resigned", "sold (?:my|the|our)"),
        ),
        (
            "update",
            "moved",
            _any("mov(?:e|ed|es|ing)", "push(?:ed|ing)", "postpon(?:e|ed|ing)", "reschedul(?:e|ed|ing)"),
        ),
        ("update", "moved", _any("delayed", "bumped", "shifted", "brought forward", "moved up", "push(?:ed)? back")),
        (
            "update",
            "replaced",
            _any("switch(?:ed|ing)", "swapp(?:ed|ing)", "replac(?:ed|ing)", "instead", "rather than"),
        ),
        (
            "update",
            "replaced",
            _any("chang(?:ed|ing)", "change of (?:plans?|heart)", "renam(?:ed|ing)", "doubled", "halved"),
        ),
        ("update", "new", _any(_NEW_THING, _STARTED, "got hired", "turns out", _NOW_AFTER, _NOW, "updated?:")),
        ("update", "now", _any(_NOW_END, "report(?:s|ing)? to")),
    )
)
# a verb of change after one of these is an adjective ("a moving speech", "my changing body")
_ADJECTIVAL = _words("a an the my your our his her their its this that these those")
# a message that says nothing changed changes nothing ("still on for October", "kept the same number")
_UNCHANGED = re.compile(
    r"\b(?:still on|nothing'?s changed|nothing has changed|unchanged|kept the same|keeping the same|still the same|"
    r"same as before|as planned|still going|still vegan|keeping (?:the|my) \w+ (?:job )?too)\b",
    re.I,
)
# reported speech and conditions state no change ("asked if it was cancelled")
_REPORTED = re.compile(r"\b(?:asked|wonder(?:ed|ing)?|if|whether|in case|unless|might|maybe)\b[^.!?;]*$", re.I)

_OLD_VALUE = (
    re.compile(r"\binstead of ([\w' -]{2,40}?)(?=[,.;!?]|$| and | but )", re.I),
    re.compile(r"\brather than ([\w' -]{2,40}?)(?=[,.;!?]|$| and | but )", re.I),
    re.compile(r"\bfrom ([\w' :-]{2,30}?) to\b", re.I),
    re.compile(r"\bnot ([\w':]{2,20}(?: ?[ap]m)?)[,;]? (?:but|it's|its|it is)\b", re.I),
    re.compile(
        r"\b(?:dropping|dropped|skipping|skipped|ditching|ditched|no more|no longer at|no longer in|left) "
        r"([A-Z][\w'-]+(?: [A-Z][\w'-]+)?)"
    ),
    re.compile(r"\bnot ([A-Z][\w'-]+|\d[\w:]*)\b"),
    re.compile(r"\bout of ([A-Z][\w'-]+(?: [A-Z][\w'-]+)?)"),
    re.compile(r"\bit'?s not ([\w' ]{2,30}?), it'?s\b", re.I),
)


_R = TypeVar("_R")
# a text of at most this many characters is remembered (:func:`_remembered`), this many texts at most
MEMO_CHARS = 2_000
MEMO_TEXTS = 4_096


def _remembered(fn: Callable[..., _R]) -> Callable[..., _R]:
    """``fn`` of a short text (its first argument) remembered: the rules ask the same of an earlier
    message for each new message that may change it, within a call and across calls. ``fn`` is
    pure and its result immutable."""
    cached = lru_cache(maxsize=MEMO_TEXTS)(fn)

    @wraps(fn)
    def call(text: str, *more: str) -> _R:
        return cached(text, *more) if len(text) <= MEMO_CHARS else fn(text, *more)

    return call


def asks(text: str) -> bool:
    """A message that only asks ("Is the meeting on Monday?") states nothing; one that states and
    then asks ("Friday at 2pm, noted. Want to rehearse?") states."""
    return all(s.rstrip().endswith("?") for s in _sentences(text))


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?;])\s+|\n+", text) if s.strip()]


# a cue under a negation announces nothing ("I won't give up on", "we didn't change the date")
_NEGATED = re.compile(
    r"\b(?:not|never|don't|didn't|won't|wouldn't|can't|cannot|shouldn't|no need to)\W+(?:\w+\W+){0,2}$", re.I
)
# where a sentence stops stating the change and starts giving a reason or an aside
# "A, so B": A is the reason, B the change
_CONSEQUENCE = re.compile(r",\s*so\s+(?!that\b)", re.I)
_BOUNDARY = re.compile(r"\b(?:because|so that|although|though|but|whereas)\b|,\s*(?:which|since|as)\b", re.I)
_ASIDE = re.compile(r"(?:\b(?:because|so that|although|though|but|whereas)\b|,\s*(?:which|since|as)\b).*$", re.I | re.S)


def _announces(rule: str, sentence: str, found: re.Match[str]) -> bool:
    """A cue's match announces a change unless negated ("we didn't change"), reported or
    conditional ("asked if it was cancelled"), or an adjective ("my changing body")."""
    before = sentence[: found.start()]
    if rule != "ended" and _NEGATED.search(before):
        return False
    if rule != "corrected" and _REPORTED.search(before):
        return False
    words = before.lower().split()
    if rule in ("moved", "replaced") and words and words[-1] in _ADJECTIVAL:
        return False
    # "it pushed me to", "that moved me": a feeling, not a plan
    return not (rule == "moved" and re.match(r"\s+(?:me|you)\b", sentence[found.end() :], re.I))


def find_cue(text: str) -> Cue | None:
    """The change a message announces, or None. Questions announce nothing. The cue's clause is its
    sentence without a reason or an aside ("... to October because Lena can't in April")."""
    if _UNCHANGED.search(text):
        return None
    sentences = _sentences(text)
    for i, sentence in enumerate(sentences):
        if sentence.rstrip().endswith("?"):
            continue
        for kind, rule, pattern in _CUES:
            found = pattern.search(sentence)
            if found and _announces(rule, sentence, found):
                return _cue(
                    kind, rule, sentence, found, [s for s in sentences[i + 1 :] if not s.rstrip().endswith("?")]
                )
    return None


def answer_cue(question: str, reply: str) -> Cue | None:
    """The change a short reply states when it answers a question about one: the question asks
    about a change ("What's the new date?", "Did they move it?") and the reply gives a date, a
    time or a number ("September 6.")."""
    asked = " ".join(s.rstrip(" ?") + "." for s in _sentences(question) if s.rstrip().endswith("?"))
    cue = find_cue(asked) if asked else None
    if cue is None or cue.kind not in ("update", "correction") or not _typed(values(reply)):
        return None
    clause = f"{cue.clause} {reply}"
    return Cue(cue.kind, "answered", clause, cue.old_values, cue.start, cue.at, reply)


def _cue(kind: str, rule: str, sentence: str, found: re.Match[str], rest: Sequence[str]) -> Cue:
    """The cue's clause: its sentence without a reason or an aside, and when that states no date,
    time or number, the message's next sentences too ("I had to move Lisbon. New dates: ...")."""
    core = _segment(sentence, found.start())
    extra = [_ASIDE.sub("", s).strip() for s in rest]
    stated = _CONSEQUENCE.split(core)[-1]
    if not _typed(values(stated)):
        stated = " ".join([stated, *extra])
    clause = core if _typed(values(core)) else " ".join([core, *extra])
    named = " ".join([sentence, *rest])
    old = tuple(dict.fromkeys(v.strip().lower() for p in _OLD_VALUE for v in p.findall(named) if v.strip()))
    at = sentence.find(core)
    return Cue(kind, rule, clause, old, max(0, found.start() - at), max(0, found.end() - at), stated)


def _segment(sentence: str, position: int) -> str:
    """The part of a sentence the cue is in, between reasons and asides ("Losing my job was hard,
    but I'm living my dreams now": the part after "but")."""
    start, end = 0, len(sentence)
    for m in _BOUNDARY.finditer(sentence):
        if m.start() <= position:
            start = m.end()
        elif m.start() < end:
            end = m.start()
            break
    return sentence[start:end].strip() or sentence


def _typed(found: Mapping[str, frozenset[str]]) -> bool:
    return any(k in found for k in _TYPED)


def values(text: str) -> dict[str, frozenset[str]]:
    """The values a text states, by kind: a month, a weekday, a day of the month, a year, a
    season, a time, a number (a phone number, an email address, an amount), a name (a capitalised
    run). Kinds are compared one with the same kind only: "the 16th" does not replace "October"."""
    return dict(_values(text))


@_remembered
def _values(text: str) -> tuple[tuple[str, frozenset[str]], ...]:
    out: dict[str, set[str]] = {
        k: set() for k in ("month", "weekday", "season", "day", "year", "time", "number", "amount", "name")
    }
    for token in TOKEN.findall(text):
        bare = token.lower().strip("'")
        if bare.endswith("s") and bare[:-1] in WEEKDAYS:
            bare = bare[:-1]  # "on Mondays"
        if bare in _DATE_WORDS and (bare not in _AMBIGUOUS or token[0].isupper()):
            kind = "month" if bare in MONTHS else "weekday" if bare in WEEKDAYS else "season"
            out[kind].add(bare[:3] if kind != "weekday" else bare[:3].rstrip("s"))
    for found in _NUMERIC_DATE.findall(text):
        kind = "year" if re.fullmatch(r"(?:19|20)\d{2}", found) else "day"
        out[kind].add(re.sub(r"(?:st|nd|rd|th)$", "", found.lower()))
    out["day"].update(m for m in re.findall(r"\b(\d{1,2})(?=\s*(?:-|to|–)\s*\d{1,2}\b)", text))
    out["time"].update(_clock(m) for m in _TIME.findall(text))
    for phone in _PHONE.findall(text):
        digits = re.sub(r"\D", "", phone)
        if len(digits) >= 7:
            out["number"].add(digits)
    out["number"].update(m.lower() for m in _EMAIL.findall(text))
    out["number"].update(re.sub(r"[\s,]", "", m.lower()) for m in _MONEY.findall(text))
    out["amount"].update(re.sub(r",", "", m) for m in _AMOUNT.findall(text))
    for entity in extract(text, _MID_SENTENCE).entities:
        lowered = entity.lower()
        if not (set(lowered.split()) & _DATE_WORDS):
            out["name"].add(lowered)
    return tuple((k, frozenset(v)) for k, v in out.items() if v)


def _clock(text: str) -> str:
    """A time as hours and minutes ("3pm", "3:00 pm" and "15:00" are one)."""
    t = re.sub(r"[\s.]", "", text.lower())
    if t in ("noon", "midnight"):
        return {"noon": "12:00", "midnight": "0:00"}[t]
    m = re.fullmatch(r"(\d{1,2})(?::(\d{2}))?(am|pm)?", t)
    if m is None:
        return t
    hour, minute, half = int(m.group(1)), m.group(2) or "00", m.group(3)
    if half == "pm" and hour < 12:
        hour += 12
    if half == "am" and hour == 12:
        hour = 0
    return f"{hour}:{minute}"


@_remembered
def families(text: str) -> frozenset[str]:
    """The life facts a text is about (:data:`FAMILIES`)."""
    found = {name for name, pattern in FAMILIES.items() if pattern.search(text)}
    if _PHONE.search(text):
        found.add("phone")
    if _EMAIL.search(text):
        found.add("email")
    return frozenset(found)


@_remembered
def holders(text: str) -> frozenset[str]:
    """Whom a text's statements are about when not its speaker: the relatives and friends its
    sentences (or what follows a colon) start with ("Sad day: my best friend Margaux moved", "My
    brother got a job"; not "... a trip with my sister")."""
    out: set[str] = set()
    for sentence in _sentences(text):
        for part in sentence.split(":"):
            words = [w.lower() for w in TOKEN.findall(part)[:4]]
            out.update(stem(w) for w in words if w in HOLDERS)
    return frozenset(out)


@_remembered
def subject_keys(text: str, speaker: str) -> frozenset[str]:
    """Content keys of a text, as the rule extractor finds them (entities and topics, stemmed),
    without its speaker's name and without the values themselves (months, days)."""
    found = extract(text, _MID_SENTENCE)
    keys = {e.lower() for e in found.entities}
    keys.update(w for e in found.entities if " " in e for w in e.lower().split() if w not in STOPWORDS)
    keys.update(topic_key(t) for t in found.topics if " " not in t)
    keys.discard(speaker.lower())
    return frozenset(k for k in keys if not (set(k.split()) & _DATE_WORDS) and not any(ch.isdigit() for ch in k))


@dataclass(frozen=True, slots=True)
class Earlier:
    """An earlier message as the rules see it."""

    muid: str
    speaker: str
    text: str  # as the user sent it
    recent: int  # how many messages back it is in the conversation (1: the one before), 0: far
    mine: int  # how many of the same speaker's messages back it is (1: the speaker's last), 0: far
    changed: bool = False  # it ended something itself: a later echo of the change does not end it
    cued: bool = False  # it announced a change itself


def superseded(cue: Cue, text: str, speaker: str, earlier: Sequence[Earlier]) -> list[str]:
    """The earlier messages (muids, in the given order, newest first) the message ``text`` with
    ``cue`` ends (module docstring), :data:`MAX_ENDED` at the most. A revert ends nothing here:
    see :func:`revert_target`."""
    if cue.kind == "revert":
        return []
    clause_keys = subject_keys(cue.clause[: cue.start] + " … " + cue.clause[cue.at :], speaker)  # the cue's words aside
    new = values(cue.stated or cue.clause)
    fams = families(cue.clause)
    who = holders(_sentences(cue.clause)[0] if cue.clause.strip() else "")
    out: list[str] = []
    by_family = 0
    for old in earlier:
        if old.changed or asks(old.text):
            continue
        if old.cued and old.speaker != speaker and 0 < old.recent <= 2:
            continue  # the other side's announcement of the change this message echoes
        if not _same_holder(who, holders(old.text)) and not _named_old(cue, old.text):
            continue
        how = _ends(cue, clause_keys, new, fams, old)
        if how == "family":
            # a life fact is held once: only the speaker's latest statement of it ends
            if by_family >= MAX_BY_FAMILY or old.speaker != speaker:
                continue
            by_family += 1
        if how:
            out.append(old.muid)
    # an echo of what it ends, in a value of the kind it changes (a cancellation's: any) ends with it
    kinds = _TYPED if cue.kind == "cancellation" else tuple(k for k in _TYPED if k in new)
    out.extend(e for e in _repeats(out, earlier, new, kinds) if e not in out)
    return out[:MAX_ENDED]


def _repeats(
    ended: Sequence[str], earlier: Sequence[Earlier], new: Mapping[str, frozenset[str]], kinds: Sequence[str]
) -> list[str]:
    """The messages after the first one ended (``earlier`` newest first) that repeat one of the
    ended messages' dates, times or numbers and not the new ones: an echo of the old fact ("Got
    it: dentist, Thursday at 9:30") ends with it."""
    if not ended or not kinds:
        return []
    by_id = {e.muid: e for e in earlier}
    old_values = [values(by_id[m].text) for m in ended if m in by_id]
    out: list[str] = []
    for e in earlier:
        if e.muid in ended:
            if e.muid == ended[-1]:
                break
            continue
        if e.changed or asks(e.text):
            continue
        stated = values(e.text)
        repeats = any(stated.get(k, frozenset()) & v.get(k, frozenset()) for v in old_values for k in kinds)
        if repeats and not any(stated.get(k, frozenset()) & new.get(k, frozenset()) for k in kinds):
            out.append(e.muid)
    return out


def _same_holder(new: frozenset[str], old: frozenset[str]) -> bool:
    """A statement about one's sister does not end one about oneself, nor the reverse."""
    return new == old or (not new and not old) or bool(new & old)


def _named_old(cue: Cue, old_text: str) -> bool:
    lowered = old_text.lower()
    return any(re.search(r"\b" + re.escape(v) + r"\b", lowered) for v in cue.old_values)


def _ends(
    cue: Cue, clause_keys: frozenset[str], new: Mapping[str, frozenset[str]], fams: frozenset[str], old: Earlier
) -> str:
    """How the cue ends ``old``: "named" (it names the old value), "value" (a value of the kind the
    cue gives anew), "subject" (a cancellation of what it names), "family" (a life fact replaced
    without a value the rules can type), or "" (it does not)."""
    if _named_old(cue, old.text):
        return "named"
    if cue.old_values:
        return ""  # it says what no longer holds: what does not state that stays
    if cue.kind == "correction" and not (0 < old.mine <= CORRECTABLE):
        return ""
    shared = bool(clause_keys & subject_keys(old.text, old.speaker))
    same_family = bool(fams & families(old.text))
    about = shared or same_family or (not clause_keys and 0 < old.recent <= RECENT) or cue.kind == "correction"
    if not about:
        return ""
    if cue.kind == "cancellation":
        return "subject" if _cancels(cue, old) else ""
    stated = values(old.text)
    # a name is a value only for a life fact (where one works, lives); elsewhere it is a subject
    typed = [k for k in new if k != "name" or same_family]
    if any(stated.get(kind, frozenset()) - new[kind] for kind in typed):
        return "value"
    # a life fact replaced without a value the rules can type ("I quit my job", "new apartment")
    return "family" if same_family and cue.rule == "new" and not new else ""


def _cancels(cue: Cue, old: Earlier) -> bool:
    """A cancellation ends what states its object, the keys within :data:`WINDOW` words of the cue
    ("we called off the wedding party", "I don't go to the gym anymore"): two of them in common,
    or one in a message of the same speaker."""
    before = cue.clause[: cue.start].split()[-WINDOW:]
    after = cue.clause[cue.at :].split()[:WINDOW]
    keys = subject_keys(" ".join([*before, "…", *after]), "")
    common = keys & subject_keys(old.text, old.speaker)
    if len(common) >= 2:
        return True
    # one word in common: the speaker's own statement of a name the cue names, of all the cue
    # names, or of the same life fact
    names = values(old.text).get("name", frozenset())
    named = bool(common & (names | {w for n in names for w in n.split()}))
    same = bool(families(cue.clause) & families(old.text))
    return len(common) == 1 and old.mine > 0 and (named or len(keys) == 1 or same)


def echoes(target: str, earlier: Sequence[Earlier]) -> list[str]:
    """The messages after a change (``earlier`` newest first, down to ``target``) that repeat one
    of its dates, times or numbers ("Noted, June 2."): a revert ends them with the change."""
    by_id = {e.muid: e for e in earlier}
    if target not in by_id:
        return []
    changed = values(by_id[target].text)
    out: list[str] = []
    for e in earlier:
        if e.muid == target:
            break
        stated = values(e.text)
        if not asks(e.text) and any(stated.get(k, frozenset()) & changed.get(k, frozenset()) for k in _TYPED):
            out.append(e.muid)
    return out[: MAX_ENDED - 1]


def revert_target(clause: str, speaker: str, changers: Iterable[tuple[str, str, int]]) -> str | None:
    """A revert ends the latest change about its subject: ``changers`` are (muid, text, recent)
    of earlier messages that superseded something, newest first; the first that shares a key with
    the revert's clause, else the newest within :data:`RECENT` messages."""
    keys = subject_keys(clause, speaker)
    fallback: str | None = None
    for muid, text, recent in changers:
        if keys & subject_keys(text, speaker):
            return muid
        if fallback is None and 0 < recent <= RECENT:
            fallback = muid
    return fallback
