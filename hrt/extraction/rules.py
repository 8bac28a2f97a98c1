"""The phrase extractor (:func:`extract`): entities and topics of a text, by rules only.

Capitalised-word runs for entities (a sentence's first word only when the conversation also
capitalises it mid-sentence), RAKE-style runs of content words for topics, a light suffix stemmer
to group spellings. No network and no model.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hrt.text import STOPWORDS


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Words that carry no topic in chat: fillers, pronoun contractions, light verbs, intensifiers.
CHAT_STOPWORDS = _word_set(
    """
    hey hi hello wow yeah yes yep no nope oh ok okay thanks thank really great awesome cool nice good
    love like know think get gets got getting going go goes went gone just lot lots thing things
    something anything everything nothing also always definitely totally sure glad much many well one
    ones way make makes made making actually pretty super amazing im i'm i've i'd i'll you're you've
    you'd you'll it's that's what's there's here's let's don't doesn't didn't can't won't isn't
    aren't wasn't weren't haven't hasn't wouldn't couldn't shouldn't he's she's we're we've they're
    they've us him hers ours yours mine myself yourself herself himself ourselves themselves
    even still though yet ever never maybe probably kind sort bit little big new old lately recently
    today yesterday tomorrow now soon back again since while until around through during before
    each every both few own same say says said tell told ask asked want wants wanted feel feels felt
    see saw seen look looks looked looking take took come came keep kept give gave need needs needed
    try tried trying sounds sound seems seem hope hoped hear heard mean means find found put use used
    here being having doing done am should might must shall may let lets those yourself anyone
    someone everyone people person guy guys man wow haha lol omg hmm um uh wish day days time times
    year years week weeks month months likely long ago current able absolutely best better bad
    please pls anyway btw kinda sorta stuff guess okay alright lol yay ugh oops hey by-the-way
    two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen
    seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred
    hundreds thousand thousands million millions dozen half twice once first second third
    """
)
# months and weekdays: a date, never part of a name ("October Marco" is a month and a name)
DATE_NAMES = _word_set(
    """
    january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday
    """
)


def allowance(turns: int, ratio: float, min_df: int, floor: int) -> int:
    """How many messages may name a topic before it is too common to be a concept: the share
    ``ratio`` of the conversation's messages, never fewer than ``floor`` (a short, focused
    conversation names its subjects in many of its messages) nor ``min_df``."""
    return max(min_df, floor, math.floor(ratio * turns))


def too_common(key: str, df: int, max_df: int) -> bool:
    """A topic named in more than ``max_df`` messages carries no subject; names (entities) and
    speakers are subjects however often they recur."""
    return key.startswith("topic:") and df > max_df


CONNECTORS = frozenset({"of", "the", "de"})
QUESTION_WORDS = frozenset({"what", "when", "where", "who", "whom", "whose", "which", "why", "how"})
TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’\-]*|&")
SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
SEGMENT_SPLIT = re.compile(r"[,;:()\[\]\"“”…—–/!?.]+")


def _stop(word: str) -> bool:
    return word in STOPWORDS or word in CHAT_STOPWORDS or word in QUESTION_WORDS


def _bare(token: str) -> str:
    """Lower case, curly apostrophes straightened, possessive ``'s`` dropped."""
    t = token.lower().replace("’", "'")
    if t.endswith("'s"):
        t = t[:-2]
    return t.strip("'-")


def stem(word: str) -> str:
    """A light suffix stemmer that groups plural and -ing/-ed spellings; only ever used as a key."""
    w = word
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if w.endswith("sses"):
        return w[:-2]
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3 and re.search(r"[aeiouy]", w[: -len(suffix)]):
            w = w[: -len(suffix)]
            if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]
            break
    return w


def topic_key(phrase: str) -> str:
    return " ".join(stem(w) for w in phrase.split())


class NameOracle(Protocol):
    def is_name(self, bare: str) -> bool: ...


def name_counts(text: str) -> dict[str, list[int]]:
    """Per word of ``text``: [capitalised mid-sentence, lower case] occurrences (a sentence's first
    word says nothing when capitalised)."""
    counts: dict[str, list[int]] = {}
    for sentence in SENTENCE_SPLIT.split(text):
        for i, token in enumerate(TOKEN.findall(sentence)):
            bare = _bare(token)
            if not bare:
                continue
            c = counts.setdefault(bare, [0, 0])
            if token[0].isupper():
                if i > 0:
                    c[0] += 1
            else:
                c[1] += 1
    return counts


@dataclass(slots=True)
class ProperNouns:
    """Which capitalised words a text collection treats as names: those it capitalises in the
    middle of a sentence at least as often as it writes them in lower case."""

    capitalised: Counter[str] = field(default_factory=Counter)
    lower: Counter[str] = field(default_factory=Counter)

    def learn(self, text: str) -> None:
        for word, (capitalised, lower) in name_counts(text).items():
            if capitalised:
                self.capitalised[word] += capitalised
            if lower:
                self.lower[word] += lower

    def is_name(self, bare: str) -> bool:
        return self.capitalised[bare] > 0 and self.capitalised[bare] >= self.lower[bare]


@dataclass(frozen=True, slots=True)
class Extraction:
    entities: tuple[str, ...]  # surface forms, in order of appearance
    topics: tuple[str, ...]  # lower-case phrases: multi-word runs, then their single words


def _capitalised(token: str) -> bool:
    bare = _bare(token)
    return token[0].isupper() and len(bare) > 1 and not _stop(bare) and not bare.startswith("i'")


def _entity_runs(tokens: Sequence[str], names: NameOracle | None) -> tuple[list[str], set[int]]:
    """Runs of capitalised tokens (connectors allowed between two of them); the positions covered."""
    runs: list[str] = []
    covered: set[int] = set()
    i = 0
    while i < len(tokens):
        starts = _capitalised(tokens[i]) and (i > 0 or names is None or names.is_name(_bare(tokens[i])))
        if not starts:
            i += 1
            continue
        end = i + 1
        j = i + 1
        while j < len(tokens) and _bare(tokens[i]) not in DATE_NAMES:
            if _capitalised(tokens[j]) and _bare(tokens[j]) in DATE_NAMES:
                break
            if _capitalised(tokens[j]):
                j += 1
                end = j
            elif tokens[j].lower() in CONNECTORS:
                j += 1
            else:
                break
        parts = [t.replace("’", "'") for t in tokens[i:end]]
        parts[-1] = re.sub(r"'s$", "", parts[-1]).strip("'-")
        surface = " ".join(p for p in parts if p)
        if surface:
            runs.append(surface)
            covered.update(range(i, end))
        i = end
    return runs, covered


def extract(text: str, names: NameOracle | None = None, max_words: int = 3) -> Extraction:
    """Entities and topics of one text, deterministically.

    - Entities: maximal runs of capitalised tokens, with ``of``/``the``/``and``/... allowed between
      two capitalised ones ("Lord of the Rings"). A sentence's first word starts a run only when it
      is not a stopword and ``names`` (statistics of the whole conversation) says it is a name.
    - Topics: per punctuation-free segment, maximal runs of content words (not a stopword, not a
      chat filler, at least three letters, not a number, not part of an entity): every run of up to
      ``max_words`` words (longer runs are cut into pieces of ``max_words``), then each of their
      words on its own. Lower case, possessives dropped.
    """
    entities: list[str] = []
    topics: list[str] = []
    singles: list[str] = []
    for sentence in SENTENCE_SPLIT.split(text):
        sentence_tokens = TOKEN.findall(sentence)
        runs, covered = _entity_runs(sentence_tokens, names)
        entities.extend(runs)
        position = 0
        for segment in SEGMENT_SPLIT.split(sentence):
            tokens = TOKEN.findall(segment)
            run: list[str] = []
            for token in [*tokens, ""]:
                at = position
                position += 1 if token else 0
                bare = _bare(token) if token else ""
                content = (
                    bool(bare)
                    and at not in covered
                    and not _stop(bare)
                    and len(bare) >= 3
                    and not bare.isdigit()
                    and bare.isascii()
                )
                if content:
                    run.append(bare)
                    continue
                for start in range(0, len(run), max_words):
                    piece = run[start : start + max_words]
                    if len(piece) > 1:
                        topics.append(" ".join(piece))
                    singles.extend(piece)
                run = []
    return Extraction(tuple(dict.fromkeys(entities)), tuple(dict.fromkeys([*topics, *singles])))
