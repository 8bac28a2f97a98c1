"""Turn by turn: what a conversation's messages add to a user's memory (:func:`plan_messages`).

Each message becomes a memory unit (``FOLLOWS`` the previous one of its session) and the rule
extractor (:mod:`hrt.extraction.rules`) finds its entities and topics. Which of those become
concepts depends on statistics over all the user's messages: a topic is linked while it appears in
at least ``min_topic_df`` messages and at most ``max_topic_df_ratio`` of them, an entity while in
at most twice that share; co-occurrence counts give ``RELATED_TO``; capitalisation counts say
which sentence-initial words are names. The batch importer of the evaluation computes these over a
whole conversation at once; here they are kept per user, incrementally, as rows written in the same
transaction as the records (:attr:`hrt.stores.base.WriteBatch.state`), so the same sequence of
calls gives the same graph. The rules, and where they depart from the batch import, are in
docs/api.md, "Conversations".

Statistics rows (namespace: key -> JSON):

- ``meta``: ``meta`` -> messages counted and a version every write bumps (the optimistic lock);
- ``session``: session id -> next position, last timestamp; ``mh``: session + SEP + message hash
  -> its position (a resend without positions is recognised by it);
- ``msg``: memory unit id -> the message's hash, position, timestamp and extracted keys, and
  when the change rules (:mod:`hrt.extraction.superseding`) say so: its life-fact families
  (``fam``), the units it superseded (``sup``), a restatement written (``rs``), a cue (``cue``);
- ``fam``: family + SEP + muid -> 1 (the messages about a life fact: a job, a home, ...);
  ``tail``: ``tail`` -> the user's last messages, in order;
- ``term``: concept key -> messages that mention it (df), surface forms, concept id, linked or not,
  the salience and name last written, the partners it chose for ``RELATED_TO``;
- ``post``: key + SEP + muid -> 1 (the messages of a key); ``dfx``: df + SEP + key (keys by df);
- ``pair``: key + SEP + key -> co-occurrence count (both orders); ``name``: word -> capitalised and
  lower-case counts; ``cid``: concept id -> key; ``speaker``: lower-case name -> name;
- ``llm``: message hash -> the LLM extractor's validated answer (or its failure), when it is on.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from hrt.errors import PayloadTooLarge
from hrt.extraction.ids import entity_id, message_id, slug
from hrt.extraction.messages import ConversationRequest, Message, MessageResult
from hrt.extraction.notes import MAX_PARTICIPANTS, note_id, rule_note
from hrt.extraction.rules import ProperNouns, allowance, extract, name_counts, too_common, topic_key
from hrt.extraction.superseding import ChangeFinder, restatement_id
from hrt.ingest import Record
from hrt.records import Artifact, Concept, Deletion, EdgeType, Entity, Kind, MemoryUnit, Relation, iso, utc
from hrt.text import content_words

SEP = "\x1f"


@dataclass(frozen=True, slots=True)
class ExtractionOptions:
    """The rules' constants (those of the batch import, hrt/eval/locomo/importer.py)."""

    follows_weight: float = 0.5
    speaker_mentions_weight: float = 0.1  # a message MENTIONS its own speaker
    max_topic_df_ratio: float = 0.05  # topics in more messages than this share are too common
    common_topic_floor: int = 8  # ... but never fewer than this many (rules.allowance)
    min_topic_df: int = 2  # topics in fewer messages connect nothing
    related_per_concept: int = 10
    min_cooccurrence: int = 2
    max_pair_keys: int = 24  # co-occurrences counted among a message's first keys only
    salience_step: float = 0.05  # a linked concept is rewritten when its salience moved this much
    fact_weight: float = 1.0  # an LLM fact DERIVED_FROM its message
    # an LLM fact DERIVED_FROM its speaker's concept and each concept of its message it names (as
    # the batch import's observations: the walk reaches a fact from what it is about)
    fact_concept_weight: float = 0.3
    notes: bool = True  # each message's rule note (hrt.extraction.notes), HRT_CONVERSATION_NOTES
    note_weight: float = 1.0  # a note DERIVED_FROM its message
    # what one message may add to the statistics: capitalisation counts of its first distinct
    # words, and its first keys (unbounded, a 100 KB message of distinct words would write ~70,000 rows)
    max_message_words: int = 2000
    max_message_keys: int = 256
    # the statistics rows one user may hold (0: no bound); a call that would pass it is refused
    max_state_rows: int = 0

    def max_df(self, turns: int) -> int:
        return allowance(turns, self.max_topic_df_ratio, self.min_topic_df, self.common_topic_floor)


class StateStore(Protocol):
    async def get_many(self, user_id: str, kind: Kind, ids: Sequence[str]) -> dict[str, Entity]: ...

    async def state_get(self, user_id: str, ns: str, keys: Sequence[str]) -> dict[str, str]: ...

    async def state_scan(self, user_id: str, ns: str, prefix: str) -> dict[str, str]: ...


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class State:
    """The user's statistics as read from the store, with this call's writes on top."""

    def __init__(self, store: StateStore, user_id: str) -> None:
        self.store = store
        self.user_id = user_id
        self.read: dict[tuple[str, str], str | None] = {}
        self.writes: dict[str, dict[str, Any]] = {}  # ns -> key -> value (None: deleted)
        self._scans: dict[tuple[str, str], dict[str, str]] = {}

    async def get_many(self, ns: str, keys: Sequence[str]) -> dict[str, Any]:
        written = self.writes.get(ns, {})
        missing = sorted({k for k in keys if k not in written and (ns, k) not in self.read})
        if missing:
            found = await self.store.state_get(self.user_id, ns, missing)
            for k in missing:
                self.read[(ns, k)] = found.get(k)
        out: dict[str, Any] = {}
        for k in keys:
            if k in written:
                value = written[k]
            else:
                raw = self.read[(ns, k)]
                value = json.loads(raw) if raw is not None else None
            if value is not None:
                out[k] = value
        return out

    async def get(self, ns: str, key: str) -> Any:
        return (await self.get_many(ns, [key])).get(key)

    async def scan(self, ns: str, prefix: str) -> dict[str, Any]:
        if (ns, prefix) not in self._scans:
            self._scans[(ns, prefix)] = await self.store.state_scan(self.user_id, ns, prefix)
        out = {k: json.loads(v) for k, v in self._scans[(ns, prefix)].items()}
        for k, v in self.writes.get(ns, {}).items():
            if k.startswith(prefix):
                if v is None:
                    out.pop(k, None)
                else:
                    out[k] = v
        return dict(sorted(out.items()))

    def put(self, ns: str, key: str, value: Any) -> None:
        self.writes.setdefault(ns, {})[key] = value

    async def row_delta(self) -> int:
        """Rows this call's writes add to the user's statistics, less those they delete (the
        ``meta`` row aside): one read per namespace for the rows written without being read."""
        delta = 0
        for ns, values in self.writes.items():
            if ns == "meta":
                continue
            unknown = [k for k in values if (ns, k) not in self.read]
            found = await self.store.state_get(self.user_id, ns, unknown) if unknown else {}
            for k, v in values.items():
                existed = self.read[(ns, k)] is not None if (ns, k) in self.read else k in found
                delta += (v is not None and not existed) - (v is None and existed)
        return delta

    def written(self, ns: str, key: str) -> Any:
        return self.writes.get(ns, {}).get(key)

    def rows(self) -> dict[tuple[str, str, str], str | None]:
        return {
            (self.user_id, ns, k): (_dump(v) if v is not None else None)
            for ns, values in self.writes.items()
            for k, v in values.items()
        }


@dataclass(slots=True)
class LLMOutcome:
    """What the optional LLM extractor added for one message (already validated)."""

    entities: list[tuple[str, str]] = field(default_factory=list)  # (name, type)
    relations: list[tuple[str, str, str]] = field(default_factory=list)  # (source, target, type)
    facts: list[str] = field(default_factory=list)


# speaker, text, previous texts -> the LLM's answer, None when it failed (rules only)
LLMCall = Callable[[str, str, Sequence[str]], Awaitable[LLMOutcome | None]]


def budgeted(call: LLMCall, budget_s: float) -> LLMCall:
    """``call`` within ``budget_s`` seconds in all, from now: a call still running when the budget
    is spent is abandoned, and later ones are not made (None: the rules alone, as a failure). One
    conversation call holds a write slot while it plans, so its LLM time is its slot time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget_s

    async def within(speaker: str, text: str, context: Sequence[str]) -> LLMOutcome | None:
        left = deadline - loop.time()
        if left <= 0:
            return None
        try:
            async with asyncio.timeout(left):
                return await call(speaker, text, context)
        except TimeoutError:
            return None

    return within


def on_loop(call: LLMCall, loop: asyncio.AbstractEventLoop) -> LLMCall:
    """``call`` run on ``loop`` (where its HTTP client lives), awaited from another loop: the
    planner's, in a worker thread."""

    async def there(speaker: str, text: str, context: Sequence[str]) -> LLMOutcome | None:
        future = asyncio.run_coroutine_threadsafe(_ask(call, speaker, text, list(context)), loop)
        return await asyncio.wrap_future(future)

    return there


async def _ask(call: LLMCall, speaker: str, text: str, context: Sequence[str]) -> LLMOutcome | None:
    return await call(speaker, text, context)


@dataclass(slots=True)
class Plan:
    """What one call writes: records, deletions and statistics rows, and what it reports."""

    records: list[Record]
    state: dict[tuple[str, str, str], str | None]
    expect: dict[tuple[str, str, str], str | None]
    results: list[MessageResult]
    concepts_linked: int = 0
    concepts_unlinked: int = 0
    relations: int = 0
    llm_used: bool = False
    llm_fallbacks: int = 0


def message_hash(message: Message, speaker: str | None = None) -> str:
    body = [
        message.role,
        speaker or message.speaker,
        message.content,
        iso(message.timestamp) if message.timestamp else None,
        message.metadata,
    ]
    return hashlib.sha256(_dump(body).encode()).hexdigest()[:32]


def unit_content(speaker: str, content: str) -> str:
    """What a message's memory unit holds: who said what (the format that retrieves best on
    LoCoMo, docs/eval-locomo.md)."""
    return f'{speaker} said, "{content}"'


def said_text(speaker: str, content: str) -> str:
    """A message's own text, out of its memory unit's :func:`unit_content`."""
    said = f'{speaker} said, "'
    return content[len(said) : -1] if content.startswith(said) and content.endswith('"') else content


class Planner:
    """One call's plan, from the statistics as committed (:func:`plan_messages`)."""

    def __init__(
        self,
        store: StateStore,
        request: ConversationRequest,
        now: datetime,
        options: ExtractionOptions,
        llm: LLMCall | None,
    ) -> None:
        self.req = request
        self.user = request.user_id
        self.now = utc(now)
        self.opts = options
        self.llm = llm
        self.st = State(store, self.user)
        self.changes = ChangeFinder(self.st, self.user, request.session_id)
        self.imported: set[str] = set()  # units at this call's positions the statistics do not know
        self.records: list[Record] = []
        self.relations: dict[tuple[str, str, str], Relation] = {}
        self.unrelate: set[tuple[str, str, str]] = set()
        self.concepts: dict[str, Concept] = {}
        self.deleted_concepts: set[str] = set()
        self.touched: set[str] = set()
        self.new_posts: dict[str, list[str]] = {}  # key -> muids mentioning it, added by this call
        self.speaker_of: dict[str, str] = {}  # muid -> speaker key
        self.results: list[MessageResult] = []
        self.llm_used = False
        self.llm_fallbacks = 0
        self.llm_relations: list[tuple[str, str, str]] = []  # (key, key, type)
        self.llm_keys: set[str] = set()  # keys the LLM found (their concepts' source says so)
        self.rule_keys: set[str] = set()
        self.said: dict[int, tuple[str, str]] = {}  # position -> (speaker, text), this call's
        self.participants: list[str] = []
        self.stale_artifacts: set[str] = set()  # a retracted message's restatement and note
        self.message_ts: dict[str, datetime] = {}  # muid -> its time (the LLM's facts are dated by it)
        self.facts_of: dict[str, int] = {}  # muid -> facts the LLM extractor gave for it
        # muid -> (fact artifact id, the message's keys the fact names): linked as the message is
        self.fact_keys: dict[str, list[tuple[str, set[str]]]] = {}
        self.fact_texts: dict[str, list[tuple[str, str]]] = {}  # muid -> (fact id, text), this call's

    # --- messages -----------------------------------------------------------------------------

    async def run(self) -> Plan:
        st = self.st
        meta = await st.get("meta", "meta") or {"turns": 0, "version": 0}
        turns_before = int(meta["turns"])
        session = await st.get("session", self.req.session_id) or {"next": 0, "last_ts": None}
        hashes = [message_hash(m, self.req.speaker(m)) for m in self.req.messages]
        positions = await self._positions(session, hashes)
        named = [n for n in (self.req.user_name, self.req.agent_name) if n]
        called = [self.req.speaker(m) for m in self.req.messages]
        self.participants = list(dict.fromkeys([*session.get("spk", []), *named, *called]))
        if self.opts.notes and self.participants[:MAX_PARTICIPANTS] != session.get("spk", []):
            session["spk"] = self.participants[:MAX_PARTICIPANTS]
        turns = turns_before
        history: list[str] = []
        for message, h, position in zip(self.req.messages, hashes, positions, strict=True):
            added = await self._message(message, h, position, session, history)
            turns += added
        if turns == turns_before and not self.touched and all(r.status == "unchanged" for r in self.results):
            return Plan([], {}, {}, self.results)
        st.put("session", self.req.session_id, session)
        await self._thresholds(turns_before, turns)
        return await self.finish(meta, turns)

    async def finish(self, meta: Mapping[str, Any], turns: int) -> Plan:
        """The touched keys linked again, co-occurrences, the version row: the plan."""
        st = self.st
        await self._link(turns)
        await self._related()
        self._llm_relations()
        delta = await st.row_delta()
        rows = int(meta.get("rows", 0)) + delta
        if delta > 0 and self.opts.max_state_rows and rows > self.opts.max_state_rows:
            raise PayloadTooLarge(
                f"this call would bring the user's conversation statistics to {rows} rows, over their bound "
                f"of {self.opts.max_state_rows} (HRT_MAX_CONVERSATION_STATE_ROWS)",
                field="messages",
            )
        meta = {"turns": turns, "version": int(meta["version"]) + 1, "rows": max(0, rows)}
        st.put("meta", "meta", meta)
        raw_meta = st.read.get(("meta", "meta"))
        for key in self.unrelate - set(self.relations):
            source, target, kind = key
            self.records.append(
                Deletion(
                    op="delete", kind="relation", user_id=self.user, type=EdgeType(kind), source=source, target=target
                )
            )
        for nid in sorted(self.stale_artifacts):
            self.records.append(Deletion(op="delete", kind="artifact", user_id=self.user, id=nid))
        for cid in sorted(self.deleted_concepts):
            self.records.append(Deletion(op="delete", kind="concept", user_id=self.user, id=cid))
        records = [*self.records, *(self.concepts[c] for c in sorted(self.concepts))]
        records.extend(self.relations[k] for k in sorted(self.relations))
        return Plan(
            records=records,
            state=st.rows(),
            expect={(self.user, "meta", "meta"): raw_meta},
            results=self.results,
            concepts_linked=len(self.concepts),
            concepts_unlinked=len(self.deleted_concepts),
            relations=len(self.relations),
            llm_used=self.llm_used,
            llm_fallbacks=self.llm_fallbacks,
        )

    async def _positions(self, session: dict[str, Any], hashes: Sequence[str]) -> list[int]:
        """Each message's position: its ``index``, else ``start`` + its offset, else after the
        session's last one. Without positions, a message identical to one the session holds
        (speaker, role, content, timestamp and metadata: :func:`message_hash`) is a resend of it
        and keeps its position; timestamps or ``index`` tell a true repeat apart."""
        req = self.req
        following = int(session["next"])
        out: list[int] = []
        if req.start is not None or any(m.index is not None for m in req.messages):
            for i, m in enumerate(req.messages):
                p = m.index if m.index is not None else (req.start + i if req.start is not None else following)
                out.append(p)
                following = max(following, p + 1)
            await self._imported(out)
            return out
        sid = self.req.session_id
        following = await self._first_free(following, len(hashes))
        known = await self.st.get_many("mh", [sid + SEP + h for h in hashes])
        for h in hashes:
            if sid + SEP + h in known:
                out.append(int(known[sid + SEP + h]))
            else:
                known[sid + SEP + h] = following
                out.append(following)
                following += 1
        return out

    def _timestamp(self, message: Message, existing: Mapping[str, Any] | None, session: Mapping[str, Any]) -> datetime:
        """The message's own time, else its earlier version's, else the call's in whole seconds (as
        a retrieval's as_of is: a message is visible to a retrieval in the same second), never
        before the session's last message (positions keep the order)."""
        if message.timestamp is not None:
            return message.timestamp
        if existing is not None:
            return datetime.fromisoformat(existing["ts"])
        last = datetime.fromisoformat(session["last_ts"]) if session["last_ts"] else None
        now = self.now.replace(microsecond=0)
        return now if last is None or now >= last else last

    async def _taken(self, positions: Sequence[int]) -> list[int]:
        """The positions held by a memory unit the statistics do not know: a session written by
        ``hrt ingest`` of an export, or by the batch import, holds its messages' ids."""
        ids = {message_id(self.req.session_id, p): p for p in positions}
        known = await self.st.get_many("msg", list(ids))
        units = await self.st.store.get_many(self.user, Kind.MEMORY_UNIT, [i for i in ids if i not in known])
        return sorted(ids[i] for i in units)

    async def _first_free(self, following: int, n: int) -> int:
        """After the session's last known message, past any position an imported unit holds, so an
        append never replaces a message it does not know (the common case: one read of one id)."""
        if not await self._taken([following]):
            return following
        while taken := await self._taken(range(following, following + n + 64)):
            following = taken[-1] + 1
        return following

    async def _imported(self, positions: Sequence[int]) -> None:
        """Explicit positions that an imported unit holds: their messages replace it, and say so."""
        self.imported.update(message_id(self.req.session_id, p) for p in await self._taken(positions))

    async def _message(
        self, message: Message, h: str, position: int, session: dict[str, Any], history: list[str]
    ) -> int:
        """Plan one message; returns 1 when it is a new message (counted), else 0."""
        st = self.st
        muid = message_id(self.req.session_id, position)
        existing = await st.get("msg", muid)
        if existing is not None and existing["h"] == h:
            self.results.append(MessageResult(index=position, muid=muid, status="unchanged"))
            self.said[position] = (self.req.speaker(message), message.content)
            history.append(f"{self.req.speaker(message)}: {message.content}")
            return 0
        if existing is not None:
            await self._retract(muid, existing)
        speaker = self.req.speaker(message)
        ts = self._timestamp(message, existing, session)
        metadata: dict[str, Any] = {
            **message.metadata,
            "session_id": self.req.session_id,
            "index": position,
            "role": message.role,
            "speaker": speaker,
        }
        if self.req.agent_id is not None:
            metadata["agent_id"] = self.req.agent_id
        change = await self.changes.plan(muid, speaker, message.content, ts, position)
        if change.meta is not None:
            metadata["changes"] = change.meta
        self.records.append(
            MemoryUnit(
                user_id=self.user,
                muid=muid,
                content=unit_content(speaker, message.content)[:100_000],
                creation_ts=ts,
                source_type="dialogue_turn",
                importance_score=5.0,
                source_agent_id=speaker[:128],
                metadata=metadata,
                supersedes=change.supersedes,
            )
        )
        if change.restatement is not None:
            self.stale_artifacts.discard(change.restatement.id)
            self.records.append(change.restatement)
            for source in (muid, *change.restated):
                self._relate(EdgeType.DERIVED_FROM, change.restatement.id, source, self.opts.fact_weight)
        self.changes.remember(muid, speaker, message.content)
        await self.changes.note_tail(muid)
        await self._follows(muid, position)
        self.message_ts[muid] = ts
        keys = await self._extract(muid, speaker, message.content, h, history)
        noted = await self._note(muid, speaker, message.content, ts, position)
        row: dict[str, Any] = {"h": h, "pos": position, "ts": iso(ts), "keys": keys, "speaker": speaker}
        fams = self.changes.index_rows(muid, message.content, +1)
        for name, value in (
            ("fam", fams),
            ("sup", change.supersedes),
            ("rs", change.restatement is not None),
            ("cue", change.cued),
            ("nt", noted),
        ):
            if value:
                row[name] = value
        st.put("msg", muid, row)
        last_ts = datetime.fromisoformat(session["last_ts"]) if session["last_ts"] else None
        if last_ts is None or ts > last_ts:
            session["last_ts"] = iso(ts)
        session["next"] = max(int(session["next"]), position + 1)
        if existing is not None:
            st.put("mh", self.req.session_id + SEP + existing["h"], None)
        st.put("mh", self.req.session_id + SEP + h, position)
        replaced = existing is not None or muid in self.imported
        self.results.append(MessageResult(index=position, muid=muid, status="replaced" if replaced else "added"))
        history.append(f"{speaker}: {message.content}")
        return 0 if existing is not None else 1

    async def _extract(self, muid: str, speaker: str, text: str, h: str, history: Sequence[str]) -> list[str]:
        """Learn the text's capitalisation, extract, map names to speakers; count the keys."""
        st = self.st
        counts = dict(list(name_counts(text).items())[: self.opts.max_message_words])
        rows = await st.get_many("name", sorted(counts))
        for word, (cap, lower) in counts.items():
            old = rows.get(word, [0, 0])
            rows[word] = [old[0] + cap, old[1] + lower]
            st.put("name", word, rows[word])
        names = ProperNouns(
            Counter({w: c for w, (c, _) in rows.items()}), Counter({w: n for w, (_, n) in rows.items()})
        )
        found = extract(text, names)
        speaker_key = await self._speaker(speaker)
        self.speaker_of[muid] = speaker_key
        speakers = await st.scan("speaker", "")
        keys: list[str] = []
        surfaces: dict[str, str] = {}

        def entity_key(e: str) -> str:
            """A speaker's name (alone, or a run that starts with it) is the speaker's concept."""
            lowered = e.lower()
            first = lowered.split()[0]
            if lowered in speakers or (first in speakers and len(lowered.split()) == 1):
                return "person:" + str(speakers.get(lowered, speakers.get(first, e)))
            surfaces.setdefault("entity:" + lowered, e)
            return "entity:" + lowered

        keys.extend(entity_key(e) for e in found.entities)
        self.rule_keys.update(keys)
        for t in found.topics:
            key = "topic:" + topic_key(t)
            keys.append(key)
            surfaces.setdefault(key, t)
        if self.llm is not None:
            outcome = await self._llm(speaker, text, h, history) or LLMOutcome()
            found_by_llm = [entity_key(name) for name, _ in outcome.entities]
            for key in found_by_llm:
                self.llm_keys.add(key)
            keys.extend(found_by_llm)
            self._llm_facts(muid, speaker, outcome)
            self.llm_relations.extend((entity_key(a), entity_key(b), t) for a, b, t in outcome.relations)
        keys = list(dict.fromkeys(keys))[: self.opts.max_message_keys]
        await self._count(muid, keys, surfaces, +1)
        self._name_fact_keys(muid, keys, surfaces)
        return keys

    def _name_fact_keys(self, muid: str, keys: Sequence[str], surfaces: Mapping[str, str]) -> None:
        """Which of the message's keys each of its LLM facts names (every content word of the
        key's surface form in the fact): the fact is DERIVED_FROM their concepts once linked."""
        facts = self.fact_texts.pop(muid, [])
        if not facts:
            return
        named = []
        for aid, text in facts:
            words = set(content_words(text))
            found = set()
            for key in keys:
                wanted = content_words(surfaces.get(key, key.partition(":")[2]))
                if wanted and all(w in words for w in wanted):
                    found.add(key)
            named.append((aid, found))
        self.fact_keys[muid] = named

    async def _follows(self, muid: str, position: int) -> None:
        """FOLLOWS to the session's message before this one and from the one after, when stored."""
        for other, src, dst in ((position - 1, muid, None), (position + 1, None, muid)):
            if other < 0:
                continue
            neighbour = message_id(self.req.session_id, other)
            if await self.st.get("msg", neighbour) is not None:
                source, target = (src or neighbour), (dst or neighbour)
                self._relate(EdgeType.FOLLOWS, source, target, self.opts.follows_weight)

    async def _note(self, muid: str, speaker: str, text: str, ts: datetime, position: int) -> bool:
        """Write the message's rule note (:mod:`hrt.extraction.notes`), ``DERIVED_FROM`` it:
        attributed to the session's participants, dated from ``ts``, a reply written behind the
        message before it (this call's, else the stored one). Whether it has one."""
        self.said[position] = (speaker, text)
        if not self.opts.notes or self.facts_of.get(muid):  # the LLM's facts are the message's notes
            return False
        previous = self.said.get(position - 1)
        if previous is None and position > 0:
            before = message_id(self.req.session_id, position - 1)
            row = await self.st.get("msg", before)
            unit = (await self.st.store.get_many(self.user, Kind.MEMORY_UNIT, [before])).get(before)
            if row is not None and isinstance(unit, MemoryUnit):
                who = str(row.get("speaker", ""))
                previous = (who, said_text(who, unit.content))
        note = rule_note(self.user, muid, speaker, text, ts, self.participants, previous)
        if note is None:
            return False
        self.stale_artifacts.discard(note.id)
        self.records.append(note)
        self._relate(EdgeType.DERIVED_FROM, note.id, muid, self.opts.note_weight)
        return True

    async def _uncount_names(self, content: str, speaker: str) -> None:
        """Take a deleted message's capitalisation counts back out (its text is the unit's, inside
        :func:`unit_content`); a word counted nowhere any more loses its row."""
        text = said_text(speaker, content)
        counts = dict(list(name_counts(text).items())[: self.opts.max_message_words])
        rows = await self.st.get_many("name", sorted(counts))
        for word, (cap, lower) in counts.items():
            old = rows.get(word)
            if old is None:
                continue
            left = [max(0, int(old[0]) - cap), max(0, int(old[1]) - lower)]
            self.st.put("name", word, left if any(left) else None)

    async def _speaker(self, speaker: str) -> str:
        lowered = speaker.lower()
        if await self.st.get("speaker", lowered) is None:
            self.st.put("speaker", lowered, speaker)
        return "person:" + str(await self.st.get("speaker", lowered))

    async def _retract(self, muid: str, existing: Mapping[str, Any]) -> None:
        """An edited message: its old keys no longer count, its old mentions go."""
        keys = list(existing["keys"])
        for fam in existing.get("fam", []):
            self.st.put("fam", fam + SEP + muid, None)
        # deleted at the end of the plan unless the message's new text makes them again (a store
        # applies a batch's deletions after its writes)
        if existing.get("rs"):
            self.stale_artifacts.add(restatement_id(muid))
        if existing.get("nt"):
            self.stale_artifacts.add(note_id(muid))
        terms = await self.st.get_many("term", keys)
        for key in keys:
            cid = terms.get(key, {}).get("cid")
            if cid:
                self.unrelate.add((muid, cid, EdgeType.MENTIONS.value))
        await self._count(muid, keys, {}, -1)

    async def _count(self, muid: str, keys: Sequence[str], surfaces: Mapping[str, str], sign: int) -> None:
        """df, postings, the df index and co-occurrences of one message's keys, plus or minus."""
        st = self.st
        terms = await st.get_many("term", keys)
        for key in keys:
            term = terms.get(key) or {"df": 0, "surf": {}, "cid": None, "linked": False, "rel": []}
            old_df = int(term["df"])
            term["df"] = old_df + sign
            if key in surfaces and sign > 0:
                surf = term["surf"]
                surf[surfaces[key]] = surf.get(surfaces[key], 0) + 1
            st.put("term", key, term)
            st.put("post", key + SEP + muid, 1 if sign > 0 else None)
            if old_df > 0:
                st.put("dfx", f"{old_df:09d}{SEP}{key}", None)
            if term["df"] > 0:
                st.put("dfx", f"{term['df']:09d}{SEP}{key}", 1)
            self.touched.add(key)
            if sign > 0:
                self.new_posts.setdefault(key, []).append(muid)
        plain = [k for k in keys if not k.startswith("person:")][: self.opts.max_pair_keys]
        pair_keys = [a + SEP + b for a in plain for b in plain if a != b]
        pairs = await st.get_many("pair", pair_keys)
        for pk in pair_keys:
            n = int(pairs.get(pk, 0)) + sign
            st.put("pair", pk, n if n > 0 else None)

    # --- concepts -----------------------------------------------------------------------------

    def _kept(self, key: str, df: int, max_df: int) -> bool:
        if key.startswith("person:"):
            return True
        if key.startswith("entity:"):
            return df > 0
        return self.opts.min_topic_df <= df and not too_common(key, df, max_df)

    async def _thresholds(self, before: int, after: int) -> None:
        """The share that is too common grew with the messages: keys at the new allowance are
        linked again (their df did not change, so nothing else touches them)."""
        old_max, new_max = self.opts.max_df(before), self.opts.max_df(after)
        if new_max <= old_max:
            return
        for df in [*range(old_max + 1, new_max + 1), *range(2 * old_max + 1, 2 * new_max + 1)]:
            for row in await self.st.scan("dfx", f"{df:09d}{SEP}"):
                self.touched.add(row.split(SEP, 1)[1])

    async def _concept_id(self, key: str) -> str:
        """The concept id of a key: derived from it, unless another key holds that id or the user
        stored an entity under it (ingested, not made here): then a hashed variant, so a made id
        never lands on an ingested one (which answered 409, or overwrote it, at every later call)."""
        kind, _, raw = key.partition(":")
        cid = entity_id(kind, raw.lower() if kind == "person" else raw)
        owner = await self.st.get("cid", cid)
        if (owner is not None and owner != key) or (owner is None and await self._stored_ids([cid])):
            cid = f"{cid}-{hashlib.sha1(key.encode()).hexdigest()[:6]}"
        self.st.put("cid", cid, key)
        return cid

    async def _stored_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` name an entity the user holds, of any kind."""
        found: set[str] = set()
        for kind in (Kind.CONCEPT, Kind.MEMORY_UNIT, Kind.ARTIFACT):
            found.update((await self.st.store.get_many(self.user, kind, list(ids))).keys())
        return found

    async def _relink_missing(self, terms: Mapping[str, dict[str, Any] | None]) -> None:
        """Linked keys whose concept is gone (deleted, or merged away by ``POST .../merge``, or an
        ingest's delete) count as unlinked: their concept is made again when kept, with every
        mention, instead of MENTIONS edges to nothing, which failed every later call. A key merged
        into another concept (``adopted``, :func:`hrt.merge`) follows that concept."""
        linked = {k: t for k, t in terms.items() if t is not None and t.get("linked") and t.get("cid")}
        if not linked:
            return
        present = await self.st.store.get_many(self.user, Kind.CONCEPT, sorted({t["cid"] for t in linked.values()}))
        for key, term in linked.items():
            if term["cid"] not in present:
                term["linked"] = False
                if term.pop("adopted", False):  # the concept it followed is gone too: its own again
                    term["cid"] = None
                self.st.put("term", key, term)

    async def _link(self, turns: int) -> None:
        """Every touched key linked or unlinked as the statistics now say; its mentions written."""
        st = self.st
        max_df = self.opts.max_df(turns)
        keys = sorted(self.touched)
        terms = await st.get_many("term", keys)
        await self._relink_missing(terms)
        for key in keys:
            term = terms.get(key)
            if term is None:
                continue
            df = int(term["df"])
            if self._kept(key, df, max_df):
                await self._link_key(key, term, df, max_df, turns)
            else:
                self._unlink_key(key, term, df)
        await self._link_speakers()

    def _unlink_key(self, key: str, term: dict[str, Any], df: int) -> None:
        """A key no longer kept: its concept goes (not one it was merged into, which is not the
        statistics' own); a key no message mentions goes too."""
        if term["linked"] and term["cid"]:
            if not term.get("adopted"):
                self.deleted_concepts.add(term["cid"])
            term["linked"] = False
            term["rel"] = []
            self.st.put("term", key, term)
        if df <= 0:
            self.st.put("term", key, None)

    async def _link_key(self, key: str, term: dict[str, Any], df: int, max_df: int, turns: int) -> None:
        """A kept key: its concept (re)written when new or stale, and its MENTIONS edges."""
        was = bool(term["linked"])
        if not term["cid"]:
            term["cid"] = await self._concept_id(key)
        source = term.get("src", "rules")
        if key in self.llm_keys and source == "rules":
            term["src"] = "rules+llm" if key in self.rule_keys or int(term["df"]) > 1 else "llm"
        cid = term["cid"]
        kind = key.partition(":")[0]
        if kind == "person":
            name = key.partition(":")[2]
            salience = 1.0
        else:
            name = sorted(term["surf"].items(), key=lambda kv: (-kv[1], kv[0]))[0][0] if term["surf"] else key
            salience = round(min(1.0, 0.3 + 0.7 * max(0.0, 1.0 - df / (2 * max_df + 1))), 4)
        stale = not term.get("adopted") and (  # a concept merged into is the merge's, not rewritten here
            not was
            or term.get("src", "rules") != source
            or term.get("name") != name
            or abs(float(term.get("sal", -1.0)) - salience) >= self.opts.salience_step
        )
        if stale:
            self.concepts[cid] = Concept(
                user_id=self.user,
                id=cid,
                name=name[:500],
                type={"person": "person", "entity": "entity"}.get(kind, "topic"),
                description="A participant of the user's conversations." if kind == "person" else "",
                salience=salience,
                properties={"turns": df, "source": term.get("src", "rules")},
            )
            term["name"], term["sal"] = name, salience
        term["linked"] = True
        self.st.put("term", key, term)
        await self._mentions(key, cid, kind, df, was, turns)

    async def _mentions(self, key: str, cid: str, kind: str, df: int, was: bool, turns: int) -> None:
        """MENTIONS from messages to a linked concept: every message of the key when it was not
        linked, else this call's; a topic's weight falls with its df (an idf)."""
        muids = [k.split(SEP, 1)[1] for k in await self.st.scan("post", key + SEP)] if not was else []
        muids = sorted({*muids, *self.new_posts.get(key, [])})
        log_n = math.log(turns + 1)
        if kind == "topic":
            weight = round(max(0.2, math.log((turns + 1) / df) / log_n), 4) if log_n > 0 else 1.0
        else:
            weight = 1.0
        for muid in muids:
            self._relate(EdgeType.MENTIONS, muid, cid, weight)
            for aid, named in self.fact_keys.get(muid, ()):
                if key in named:
                    self._relate(EdgeType.DERIVED_FROM, aid, cid, self.opts.fact_concept_weight)

    async def _link_speakers(self) -> None:
        """Each message MENTIONS its speaker's concept, made for the speaker when missing."""
        st = self.st
        speakers = sorted(set(self.speaker_of.values()))
        await self._relink_missing(await st.get_many("term", speakers))
        for muid, speaker_key in sorted(self.speaker_of.items()):
            term = await st.get("term", speaker_key)
            if term is None or not term.get("cid"):
                term = term or {"df": 0, "surf": {}, "cid": None, "linked": False, "rel": []}
                term["cid"] = await self._concept_id(speaker_key)
            if not term["linked"]:
                name = speaker_key.partition(":")[2]
                self.concepts[term["cid"]] = Concept(
                    user_id=self.user,
                    id=term["cid"],
                    name=name[:500],
                    type="person",
                    description="A participant of the user's conversations.",
                    salience=1.0,
                    properties={"turns": int(term["df"]), "source": "rules"},
                )
                term["linked"], term["name"], term["sal"] = True, name, 1.0
            st.put("term", speaker_key, term)
            edge = (muid, term["cid"], EdgeType.MENTIONS.value)
            if edge not in self.relations:
                self._relate(EdgeType.MENTIONS, muid, term["cid"], self.opts.speaker_mentions_weight)
            for aid, _ in self.fact_keys.get(muid, ()):  # a fact is its speaker's statement
                self._relate(EdgeType.DERIVED_FROM, aid, term["cid"], self.opts.fact_concept_weight)

    async def _related(self) -> None:
        """RELATED_TO from co-occurrence: each touched linked concept keeps its
        ``related_per_concept`` strongest partners (count / sqrt(df * df), counts of at least
        ``min_cooccurrence``); an edge goes when neither end chooses it any more."""
        st = self.st
        keys = sorted(k for k in self.touched if not k.startswith("person:"))
        terms = await st.get_many("term", keys)
        for key in keys:
            term = terms.get(key)
            if term is None or not term["linked"]:
                continue
            counts = {
                k.split(SEP, 1)[1]: int(c)
                for k, c in (await st.scan("pair", key + SEP)).items()
                if int(c) >= self.opts.min_cooccurrence
            }
            partners = await st.get_many("term", sorted(counts))
            scored: list[tuple[float, str, str, str]] = []
            for other, c in counts.items():
                p = partners.get(other)
                if p is None or not p["linked"] or not p["cid"] or p["cid"] == term["cid"]:
                    continue
                weight = c / math.sqrt(int(term["df"]) * int(p["df"]))
                a, b = sorted((term["cid"], p["cid"]))
                scored.append((weight, a, b, other))
            chosen = sorted(scored, key=lambda x: (-x[0], x[1], x[2]))[: self.opts.related_per_concept]
            for weight, a, b, _ in chosen:
                self._relate(EdgeType.RELATED_TO, a, b, round(min(1.0, weight), 4), "co_occurs")
            chosen_keys = sorted(other for *_, other in chosen)
            for other in sorted(set(term.get("rel", [])) - set(chosen_keys)):
                p = await st.get("term", other)
                if p is None or not p.get("cid") or key in p.get("rel", []):
                    continue
                a, b = sorted((term["cid"], p["cid"]))
                self.unrelate.add((a, b, EdgeType.RELATED_TO.value))
            term["rel"] = chosen_keys
            st.put("term", key, term)

    # --- the optional LLM extractor -------------------------------------------------------------

    async def _llm(self, speaker: str, text: str, h: str, history: Sequence[str]) -> LLMOutcome | None:
        """The LLM's answer for a message: stored with the statistics, so a replay (or an edit
        back) does not ask again; a failure counts and leaves the rules alone."""
        assert self.llm is not None
        cached = await self.st.get("llm", h)
        if cached is None:
            outcome = await self.llm(speaker, text, list(history[-4:]))
            if outcome is None:
                self.llm_fallbacks += 1
                return None
            cached = {"entities": outcome.entities, "relations": outcome.relations, "facts": outcome.facts}
            self.st.put("llm", h, cached)
        self.llm_used = True
        return LLMOutcome(
            entities=[(str(n), str(t)) for n, t in cached["entities"]],
            relations=[(str(a), str(b), str(t)) for a, b, t in cached["relations"]],
            facts=[str(f) for f in cached["facts"]],
        )

    def _llm_facts(self, muid: str, speaker: str, outcome: LLMOutcome) -> None:
        """The LLM's facts, artifacts DERIVED_FROM the message and dated by it, as its rule note
        is (which they replace); each is DERIVED_FROM the message's speaker and the concepts it
        names too (:meth:`_name_fact_keys`)."""
        self.facts_of[muid] = len(outcome.facts)
        for j, fact in enumerate(outcome.facts, start=1):
            aid = f"fact:{muid.partition(':')[2]}:{j}"[:128]
            self.fact_texts.setdefault(muid, []).append((aid, fact))
            self.records.append(
                Artifact(
                    user_id=self.user,
                    id=aid,
                    artifact_type="fact",
                    title=f"Fact from {speaker}"[:500],
                    content=fact[:100_000],
                    created_at=self.message_ts.get(muid, self.now),
                    confidence=0.5,
                )
            )
            self._relate(EdgeType.DERIVED_FROM, aid, muid, self.opts.fact_weight)

    def _llm_relations(self) -> None:
        for a, b, kind in self.llm_relations:
            ta = self.st.written("term", a) or {}
            tb = self.st.written("term", b) or {}
            if ta.get("linked") and tb.get("linked") and ta["cid"] != tb["cid"]:
                self._relate(EdgeType.RELATED_TO, ta["cid"], tb["cid"], 1.0, slug(kind, 64))

    def _relate(
        self, kind: EdgeType, source: str, target: str, weight: float, relation_type: str | None = None
    ) -> None:
        self.relations[(source, target, kind.value)] = Relation(
            user_id=self.user, type=kind, source=source, target=target, weight=weight, relation_type=relation_type
        )


async def adopted_terms(
    records: StateStore, user_id: str, target: str, merged: Sequence[str]
) -> tuple[dict[tuple[str, str, str], str | None], dict[tuple[str, str, str], str | None]]:
    """The conversation statistics' rows that follow a merge (this module's),
    and the version row they expect: each key whose concept was merged now names the target,
    ``adopted`` (its later mentions link to the target, and the statistics never rename nor delete
    a concept they did not make), and the version moves on so a conversation call planned before
    the merge plans again. Empty when no merged concept came from a conversation."""
    owners = {cid: json.loads(raw) for cid, raw in (await records.state_get(user_id, "cid", list(merged))).items()}
    if not owners:
        return {}, {}
    terms = await records.state_get(user_id, "term", sorted({str(k) for k in owners.values()}))
    rows: dict[tuple[str, str, str], str | None] = {}
    for key, raw in sorted(terms.items()):
        term = json.loads(raw)
        if term.get("cid") in owners:
            term.update(cid=target, adopted=True)
            rows[(user_id, "term", key)] = _dump(term)
    meta_raw = (await records.state_get(user_id, "meta", ["meta"])).get("meta")
    if not rows or meta_raw is None:
        return rows, {}
    meta = json.loads(meta_raw)
    rows[(user_id, "meta", "meta")] = _dump({**meta, "version": int(meta["version"]) + 1})
    return rows, {(user_id, "meta", "meta"): meta_raw}


async def forget_messages(
    store: StateStore, user_id: str, muids: Sequence[str], now: datetime, options: ExtractionOptions | None = None
) -> Plan:
    """What deleting memory units takes out of the user's statistics (they shrank
    never, so a user's rows only grew): each of them that was a conversation's message is
    retracted as an edit retracts it (its keys' counts, postings, co-occurrences, families),
    its own rows go, and the keys it touched are linked again (a concept no message mentions any
    more goes). Written in the deleting batch, expecting the version row (a conversation call
    planned meanwhile plans again). An empty plan when none was a message."""
    # the planner's request only names the user: forgetting reads no message of it
    placeholder = ConversationRequest(user_id=user_id, session_id="-", messages=[Message(content="-")])
    planner = Planner(store, placeholder, now, options or ExtractionOptions(), None)
    st = planner.st
    meta = await st.get("meta", "meta")
    rows = await st.get_many("msg", sorted(set(muids))) if meta is not None else {}
    if meta is None or not rows:
        return Plan([], {}, {}, [])
    units = await store.get_many(user_id, Kind.MEMORY_UNIT, sorted(rows))
    for muid, row in sorted(rows.items()):
        await planner._retract(muid, row)
        st.put("msg", muid, None)
        unit = units.get(muid)
        if isinstance(unit, MemoryUnit):
            session = unit.metadata.get("session_id")
            if isinstance(session, str):
                st.put("mh", session + SEP + str(row["h"]), None)
            await planner._uncount_names(unit.content, str(row.get("speaker", "")))
    tail = await st.get("tail", "tail")
    if tail:
        st.put("tail", "tail", [m for m in tail if m not in rows])
    turns = max(0, int(meta["turns"]) - len(rows))
    return await planner.finish(meta, turns)


async def plan_messages(
    store: StateStore,
    request: ConversationRequest,
    now: datetime,
    options: ExtractionOptions | None = None,
    llm: LLMCall | None = None,
) -> Plan:
    """The records and statistics rows one call writes, from the statistics as committed; the
    write must expect ``Plan.expect`` (the user's version row) so two writers cannot both plan
    from the same state."""
    return await Planner(store, request, now, options or ExtractionOptions(), llm).run()
