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

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from hrt.errors import PayloadTooLarge
from hrt.extraction.ids import message_id
from hrt.extraction.linking import ConceptLinking
from hrt.extraction.llm_call import LLMCall, LLMOutcome, budgeted, on_loop
from hrt.extraction.messages import ConversationRequest, Message, MessageResult
from hrt.extraction.notes import MAX_PARTICIPANTS, note_id, rule_note
from hrt.extraction.planner_base import Plan, PlannerBase, message_hash, said_text, unit_content
from hrt.extraction.read_ahead import MessageKeys, counted_names, found_in
from hrt.extraction.rules import name_counts
from hrt.extraction.statistics import SEP, ExtractionOptions, State, StateStore, _dump
from hrt.extraction.superseding import Change, restatement_id
from hrt.records import Deletion, EdgeType, Kind, MemoryUnit, iso
from hrt.text import content_words

__all__ = [
    "SEP",
    "ExtractionOptions",
    "LLMCall",
    "LLMOutcome",
    "Plan",
    "Planner",
    "PlannerBase",
    "State",
    "StateStore",
    "adopted_terms",
    "budgeted",
    "forget_messages",
    "message_hash",
    "on_loop",
    "plan_messages",
    "said_text",
    "unit_content",
]


class Planner(ConceptLinking):
    """One call's plan, from the statistics as committed (:func:`plan_messages`)."""

    # --- messages -----------------------------------------------------------------------------

    async def run(self) -> Plan:
        st = self.st
        hashes = [message_hash(m, self.req.speaker(m)) for m in self.req.messages]
        await self._read_request(hashes)
        meta = await st.get("meta", "meta") or {"turns": 0, "version": 0}
        turns_before = int(meta["turns"])
        session = await st.get("session", self.req.session_id) or {"next": 0, "last_ts": None}
        positions = await self._positions(session, hashes)
        await self._read_keys(hashes, positions)
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
            await self._read_positions(out)
            await self._imported(out)
            return out
        sid = self.req.session_id
        known = await self.st.get_many("mh", [sid + SEP + h for h in hashes])
        await self._read_positions([*range(following, following + len(hashes)), *map(int, known.values())])
        following = await self._first_free(following, len(hashes))
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
        units = await self.st.entities(Kind.MEMORY_UNIT, [i for i in ids if i not in known])
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
        change = await self.changes.plan(muid, speaker, message.content, ts, position)
        self.records.append(self._unit(message, muid, speaker, ts, position, change))
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
        self._write_rows(muid, h, position, ts, keys, speaker, change, noted, message.content)
        self._advance(session, ts, position, h, existing)
        replaced = existing is not None or muid in self.imported
        self.results.append(MessageResult(index=position, muid=muid, status="replaced" if replaced else "added"))
        history.append(f"{speaker}: {message.content}")
        return 0 if existing is not None else 1

    def _unit(
        self, message: Message, muid: str, speaker: str, ts: datetime, position: int, change: Change
    ) -> MemoryUnit:
        """The message's memory unit: who said it, when, where in its session, what it changed."""
        metadata: dict[str, Any] = {
            **message.metadata,
            "session_id": self.req.session_id,
            "index": position,
            "role": message.role,
            "speaker": speaker,
        }
        if self.req.agent_id is not None:
            metadata["agent_id"] = self.req.agent_id
        if change.meta is not None:
            metadata["changes"] = change.meta
        return MemoryUnit(
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

    def _write_rows(
        self,
        muid: str,
        h: str,
        position: int,
        ts: datetime,
        keys: list[str],
        speaker: str,
        change: Change,
        noted: bool,
        content: str,
    ) -> None:
        """The message's ``msg`` row: its hash, place, time, keys, and what the change rules said."""
        row: dict[str, Any] = {"h": h, "pos": position, "ts": iso(ts), "keys": keys, "speaker": speaker}
        fams = self.changes.index_rows(muid, content, +1)
        for name, value in (
            ("fam", fams),
            ("sup", change.supersedes),
            ("rs", change.restatement is not None),
            ("cue", change.cued),
            ("nt", noted),
        ):
            if value:
                row[name] = value
        self.st.put("msg", muid, row)

    def _advance(
        self, session: dict[str, Any], ts: datetime, position: int, h: str, existing: Mapping[str, Any] | None
    ) -> None:
        """The session's last time and next position, and its message-hash rows."""
        st = self.st
        last_ts = datetime.fromisoformat(session["last_ts"]) if session["last_ts"] else None
        if last_ts is None or ts > last_ts:
            session["last_ts"] = iso(ts)
        session["next"] = max(int(session["next"]), position + 1)
        if existing is not None:
            st.put("mh", self.req.session_id + SEP + existing["h"], None)
        st.put("mh", self.req.session_id + SEP + h, position)

    async def _extract(self, muid: str, speaker: str, text: str, h: str, history: Sequence[str]) -> list[str]:
        """Learn the text's capitalisation, extract, map names to speakers; count the keys."""
        st = self.st
        max_words = self.opts.max_message_words
        rows = counted_names(text, await st.get_many("name", sorted(counted_names(text, {}, max_words))), max_words)
        for word, counts in rows.items():
            st.put("name", word, counts)
        found = found_in(text, rows)
        speaker_key = await self._speaker(speaker)
        self.speaker_of[muid] = speaker_key
        made = MessageKeys(await st.scan("speaker", ""))
        entity_key, surfaces = made.entity, made.surfaces
        keys = [entity_key(e) for e in found.entities]
        self.rule_keys.update(keys)
        keys.extend(made.topics(found))
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
            unit = (await self.st.entities(Kind.MEMORY_UNIT, [before])).get(before)
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
