"""What a conversation call reads before it plans (:class:`ReadAhead`, a part of the planner): the
statistics rows and records its messages will need, each batch in one round trip to the store
(:meth:`hrt.extraction.statistics.State.prefetch`), so a call reads in a handful of round trips
however many keys its messages touch. Reading ahead changes no answer: the planner reads the same
rows as before, answered from what was read ahead; a row it did not foresee is read when needed.

The keys of a message come from here for both the read-ahead and the plan
(:class:`MessageKeys`, :func:`counted_names`, :func:`pair_keys`), so what is read ahead is what
the plan counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from hrt.extraction.ids import message_id
from hrt.extraction.planner_base import PlannerBase
from hrt.extraction.rules import Extraction, ProperNouns, extract, name_counts, topic_key
from hrt.extraction.statistics import SEP
from hrt.records import Kind


def counted_names(text: str, rows: Mapping[str, Sequence[int]], max_words: int) -> dict[str, list[int]]:
    """The capitalisation rows of a text's first ``max_words`` distinct words once it is counted:
    [capitalised mid-sentence, lower case], ``rows`` (as stored) plus the text's own."""
    out: dict[str, list[int]] = {}
    for word, (cap, lower) in list(name_counts(text).items())[:max_words]:
        old = rows.get(word, [0, 0])
        out[word] = [int(old[0]) + cap, int(old[1]) + lower]
    return out


def found_in(text: str, rows: Mapping[str, Sequence[int]]) -> Extraction:
    """The rule extractor's finds in a text, with the names its capitalisation ``rows`` say."""
    names = ProperNouns(Counter({w: c for w, (c, _) in rows.items()}), Counter({w: n for w, (_, n) in rows.items()}))
    return extract(text, names)


def pair_keys(keys: Sequence[str], max_pair_keys: int) -> list[str]:
    """The co-occurrence rows of a message's keys: its first ``max_pair_keys`` keys that are no
    speaker's, in both orders."""
    plain = [k for k in keys if not k.startswith("person:")][:max_pair_keys]
    return [a + SEP + b for a in plain for b in plain if a != b]


class MessageKeys:
    """A message's concept keys from what the rule extractor found (``entity:``, ``topic:``) and
    their surface forms; a speaker's name (alone, or a run that starts with it) is the speaker's
    concept (``person:``). ``speakers``: lower-case name -> name."""

    def __init__(self, speakers: Mapping[str, Any]) -> None:
        self.speakers = speakers
        self.surfaces: dict[str, str] = {}

    def entity(self, e: str) -> str:
        lowered = e.lower()
        first = lowered.split()[0]
        speakers = self.speakers
        if lowered in speakers or (first in speakers and len(lowered.split()) == 1):
            return "person:" + str(speakers.get(lowered, speakers.get(first, e)))
        self.surfaces.setdefault("entity:" + lowered, e)
        return "entity:" + lowered

    def topics(self, found: Extraction) -> list[str]:
        keys = []
        for t in found.topics:
            key = "topic:" + topic_key(t)
            keys.append(key)
            self.surfaces.setdefault(key, t)
        return keys


class ReadAhead(PlannerBase):
    """The planner's reads ahead (module docstring)."""

    async def _read_request(self, hashes: Sequence[str]) -> None:
        """What the request names: the version and session rows, its messages' hash rows, the
        capitalisation rows of their words, the speakers, the user's last messages (and the LLM
        extractor's answers, when it is on)."""
        sid = self.req.session_id
        words = self._words()
        speakers = [self.req.speaker(m).lower() for m in self.req.messages]
        keys = {
            "meta": ["meta"],
            "session": [sid],
            "mh": [sid + SEP + h for h in hashes],
            "tail": ["tail"],
            "name": words,
            "speaker": speakers,
            "llm": list(hashes) if self.llm is not None else [],
        }
        await self.st.prefetch(keys, {"speaker": [""]})

    async def _read_positions(self, positions: Sequence[int]) -> None:
        """The statistics rows and units of the messages at ``positions`` and beside them (what
        an append finds free, what follows what, which message a reply answers), and of the
        user's last message (what a short reply may answer)."""
        near = {p + d for p in positions for d in (-1, 0, 1) if p + d >= 0}
        muids = [message_id(self.req.session_id, p) for p in sorted(near)]
        tail = await self.st.get("tail", "tail") or []
        await self.st.prefetch({"msg": [*muids, *tail[-1:]]})
        await self.st.prefetch_entities(Kind.MEMORY_UNIT, muids)

    async def _read_keys(self, hashes: Sequence[str], positions: Sequence[int]) -> None:
        """The term and co-occurrence rows of every key the messages will count (and of those an
        edited message's earlier text counted), found as the plan finds them: each message with
        the capitalisation counts and speakers of the messages before it."""
        speakers = dict(await self.st.scan("speaker", ""))
        max_words = self.opts.max_message_words
        names = await self.st.get_many("name", self._words())
        terms: set[str] = set()
        pairs: set[str] = set()
        for message, h, position in zip(self.req.messages, hashes, positions, strict=True):
            existing = await self.st.get("msg", message_id(self.req.session_id, position))
            if existing is not None and existing["h"] == h:
                continue
            if existing is not None:
                terms.update(existing["keys"])
                pairs.update(pair_keys(existing["keys"], self.opts.max_pair_keys))
            speaker = self.req.speaker(message)
            speakers.setdefault(speaker.lower(), speaker)
            rows = counted_names(message.content, names, max_words)
            names.update(rows)
            keys = self._rule_keys(found_in(message.content, rows), MessageKeys(speakers))
            terms.update([*keys, "person:" + str(speakers[speaker.lower()])])
            pairs.update(pair_keys(keys, self.opts.max_pair_keys))
        await self.st.prefetch({"term": terms, "pair": pairs})

    def _words(self) -> list[str]:
        """The words of the request's messages whose capitalisation is counted."""
        max_words = self.opts.max_message_words
        return sorted({w for m in self.req.messages for w in counted_names(m.content, {}, max_words)})

    def _rule_keys(self, found: Extraction, made: MessageKeys) -> list[str]:
        """A message's rule keys, the first ``max_message_keys`` (the LLM extractor's are read
        when it answers)."""
        keys = [*(made.entity(e) for e in found.entities), *made.topics(found)]
        return list(dict.fromkeys(keys))[: self.opts.max_message_keys]
