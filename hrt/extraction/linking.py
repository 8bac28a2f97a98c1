"""Concepts from the statistics: a key's counts, which keys are linked (too rare, too common),
their concepts, ``MENTIONS`` and ``RELATED_TO`` by co-occurrence, the speakers' concepts, and
what the LLM extractor added (:class:`ConceptLinking`, a part of the conversation planner)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from hrt.extraction.ids import entity_id, slug
from hrt.extraction.llm_call import LLMOutcome
from hrt.extraction.read_ahead import ReadAhead, pair_keys
from hrt.extraction.rules import too_common
from hrt.extraction.statistics import SEP
from hrt.records import Artifact, Concept, EdgeType, Kind, Relation


class ConceptLinking(ReadAhead):
    """The planner's concepts and links (:class:`hrt.extraction.conversation.Planner`)."""

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
        pks = pair_keys(keys, self.opts.max_pair_keys)
        pairs = await st.get_many("pair", pks)
        for pk in pks:
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
        prefixes = [
            f"{df:09d}{SEP}" for df in [*range(old_max + 1, new_max + 1), *range(2 * old_max + 1, 2 * new_max + 1)]
        ]
        await self.st.prefetch({}, {"dfx": prefixes})
        for prefix in prefixes:
            for row in await self.st.scan("dfx", prefix):
                self.touched.add(row.split(SEP, 1)[1])

    async def _concept_id(self, key: str) -> str:
        """The concept id of a key: derived from it, unless another key holds that id or the user
        stored an entity under it (ingested, not made here): then a hashed variant, so a made id
        never lands on an ingested one (which answered 409, or overwrote it, at every later call)."""
        cid = _made_id(key)
        owner = await self.st.get("cid", cid)
        if (owner is not None and owner != key) or (owner is None and await self._stored_ids([cid])):
            cid = f"{cid}-{hashlib.sha1(key.encode()).hexdigest()[:6]}"
        self.st.put("cid", cid, key)
        return cid

    async def _stored_ids(self, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` name an entity the user holds, of any kind."""
        found: set[str] = set()
        for kind in (Kind.CONCEPT, Kind.MEMORY_UNIT, Kind.ARTIFACT):
            found.update((await self.st.entities(kind, list(ids))).keys())
        return found

    async def _relink_missing(self, terms: Mapping[str, dict[str, Any] | None]) -> None:
        """Linked keys whose concept is gone (deleted, or merged away by ``POST .../merge``, or an
        ingest's delete) count as unlinked: their concept is made again when kept, with every
        mention, instead of MENTIONS edges to nothing, which failed every later call. A key merged
        into another concept (``adopted``, :func:`hrt.merge`) follows that concept."""
        linked = {k: t for k, t in terms.items() if t is not None and t.get("linked") and t.get("cid")}
        if not linked:
            return
        present = await self.st.entities(Kind.CONCEPT, sorted({t["cid"] for t in linked.values()}))
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
        await self._read_links(terms, max_df)
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

    async def _read_links(self, terms: Mapping[str, dict[str, Any] | None], max_df: int) -> None:
        """Read ahead what linking the keys needs: the messages of each key linked anew, and, for
        each key (and speaker) without a concept yet, who holds the id it would take."""
        posts: list[str] = []
        ids: list[str] = []
        for key, term in terms.items():
            if term is not None and self._kept(key, int(term["df"]), max_df):
                posts.extend([key + SEP] if not term["linked"] else [])
                ids.extend([_made_id(key)] if not term["cid"] else [])
        speakers = await self.st.get_many("term", sorted(set(self.speaker_of.values())))
        ids.extend(_made_id(k) for k in set(self.speaker_of.values()) if not speakers.get(k, {}).get("cid"))
        await self.st.prefetch({"cid": ids}, {"post": posts})
        unowned = [cid for cid in ids if await self.st.get("cid", cid) is None]
        for kind in (Kind.CONCEPT, Kind.MEMORY_UNIT, Kind.ARTIFACT):
            await self.st.prefetch_entities(kind, unowned)

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
        await self._read_partners(terms)
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

    async def _read_partners(self, terms: Mapping[str, dict[str, Any] | None]) -> None:
        """Read ahead the co-occurrences of the linked keys, then their partners' terms (those
        counted often enough, and those chosen before)."""
        linked = {k: t for k, t in terms.items() if t is not None and t["linked"]}
        await self.st.prefetch({}, {"pair": [k + SEP for k in linked]})
        partners: set[str] = set()
        for key, term in linked.items():
            rows = await self.st.scan("pair", key + SEP)
            partners.update(k.split(SEP, 1)[1] for k, c in rows.items() if int(c) >= self.opts.min_cooccurrence)
            partners.update(term.get("rel", []))
        await self.st.prefetch({"term": partners})

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


def _made_id(key: str) -> str:
    """The concept id a key takes unless another holds it (:meth:`ConceptLinking._concept_id`)."""
    kind, _, raw = key.partition(":")
    return entity_id(kind, raw.lower() if kind == "person" else raw)
