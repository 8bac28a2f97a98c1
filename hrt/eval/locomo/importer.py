"""The import (:func:`import_conversation`, no LLM, deterministic): one LoCoMo conversation as one
user's records (turns, session summaries and observations, concepts and their relations).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hrt.extraction.ids import entity_id, slug
from hrt.extraction.locomo import FALLBACK_START, Turn, evidence_ids, parse_sessions, user_id_for
from hrt.extraction.notes import rule_note
from hrt.extraction.rules import ProperNouns, allowance, extract, too_common, topic_key
from hrt.ingest import Record
from hrt.records import (
    MAX_ALIAS_CHARS,
    MAX_ALIASES,
    Artifact,
    Concept,
    EdgeType,
    MemoryUnit,
    Relation,
    alias_key,
    valid_id,
)


@dataclass(frozen=True, slots=True)
class ImportOptions:
    """Edge weights and concept filters of the import (all data, none of it HRT's code)."""

    follows_weight: float = 0.5
    speaker_mentions_weight: float = 0.1  # a turn MENTIONS its own speaker
    observation_weight: float = 1.0  # observation DERIVED_FROM a cited turn
    # observation DERIVED_FROM each concept its text names (its speaker's aside), so the walk goes
    # observation -> concept -> turn in two hops (was three, through the cited turn: a quarter of the
    # multi-hop evidence was never a candidate at depth 2; docs/eval-locomo.md, "Multi-hop candidates").
    # Below every topic MENTIONS weight of dev (0.46 at the least): a concept's fan-out visits the turns
    # that mention it before the observations that name it, and depth 1 reaches the same turns. 0: none
    observation_concept_weight: float = 0.3
    summary_weight: float = 0.3  # session summary DERIVED_FROM each turn of its session
    max_topic_df_ratio: float = 0.05  # topics in more turns than this share are too common
    common_topic_floor: int = 8  # ... but never fewer than this many (hrt.extraction.rules.allowance)
    min_topic_df: int = 2  # topics in fewer turns connect nothing
    related_per_concept: int = 10
    min_cooccurrence: int = 2
    with_concepts: bool = True  # False: no concepts, MENTIONS or RELATED_TO (an ablation)
    with_summaries: bool = True
    with_observations: bool = True
    # the rules' own note of each turn (hrt.extraction.notes), DERIVED_FROM it, as the
    # conversation route writes it: part of "rules only"
    with_rule_notes: bool = True
    note_weight: float = 1.0  # a note DERIVED_FROM its turn
    turn_format: str = "said"  # said: `Speaker said, "text"` (LoCoMo's RAG format); title; colon; bare
    # a concept's other surface forms in the conversation (a topic's plural or other inflection: topics
    # are keyed by stems) become its aliases. Off: LoCoMo dev recall@10 -0.47 [-1.03, +0.00] with it, no phrase
    # unmatched either way (docs/eval-locomo.md, "Tried and not kept")
    surface_aliases: bool = False


@dataclass(slots=True)
class ImportedConversation:
    sample_id: str
    user_id: str
    records: list[Record]
    turn_ids: dict[str, str]  # dia_id -> muid
    derived_from: dict[str, frozenset[str]]  # artifact id -> muids it is DERIVED_FROM
    names: ProperNouns
    speakers: tuple[str, ...]
    as_of: datetime
    counts: dict[str, int]
    texts: dict[str, str]  # muid -> the turn's text and caption (what extraction reads)
    # muid -> the keys ("topic:...", "entity:...") of the concepts its text names that the import left
    # out as too common (:func:`too_common`): what ``--misses`` needs to tell such a path apart
    too_common: dict[str, tuple[str, ...]] = field(default_factory=dict)


def speaker_concept_id(speaker: str) -> str:
    """The id of a speaker's concept (type ``person``), which every turn of the speaker MENTIONS."""
    return entity_id("person", speaker.lower())


def turn_content(turn: Turn, fmt: str = "said") -> str:
    """A turn's memory-unit content; ``bare`` is the text and caption alone (what extraction reads)."""
    parts = [turn.text] if turn.text else []
    if fmt == "said":
        parts = [f'{turn.speaker} said, "{turn.text}"'] if turn.text else [f"{turn.speaker}:"]
    elif fmt == "colon":
        parts = [f"{turn.speaker}: {turn.text}"]
    if turn.caption:
        parts.append(f"[image: {turn.caption}]")
    return " ".join(parts)


@dataclass(slots=True)
class _Turns:
    """The turns' records and what the rest of the import reads of them."""

    records: list[Record] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    notes: list[Artifact] = field(default_factory=list)
    turn_ids: dict[str, str] = field(default_factory=dict)  # dia_id -> muid
    turn_ts: dict[str, datetime] = field(default_factory=dict)
    session_turns: dict[int, list[str]] = field(default_factory=dict)
    session_end: dict[int, datetime] = field(default_factory=dict)
    texts: list[tuple[str, str]] = field(default_factory=list)  # (muid, text) for extraction
    last_ts: datetime | None = None


def _speakers(conversation: Mapping[str, Any], sessions: Sequence[Any]) -> tuple[str, ...]:
    return tuple(
        dict.fromkeys(
            [str(conversation[k]) for k in ("speaker_a", "speaker_b") if conversation.get(k)]
            + [t.speaker for s in sessions for t in s.turns]
        )
    )


def import_conversation(sample: Mapping[str, Any], options: ImportOptions | None = None) -> ImportedConversation:
    """One LoCoMo sample (``{"sample_id", "conversation", "observation", "session_summary", ...}``)
    as one user's records: turns, artifacts, concepts and relations. Deterministic."""
    opts = options or ImportOptions()
    sample_id = str(sample.get("sample_id") or "conversation")
    user = user_id_for(sample_id)
    conversation = sample.get("conversation") or {}
    sessions = parse_sessions(conversation)
    speakers = _speakers(conversation, sessions)
    turns = _import_turns(user, sessions, speakers, opts)
    records, relations = turns.records, turns.relations
    end_ts = turns.last_ts or FALLBACK_START

    derived: dict[str, frozenset[str]] = {}
    artifacts: list[Artifact] = []
    if opts.with_summaries:
        _import_summaries(user, sample.get("session_summary") or {}, turns, opts, artifacts, derived)
    if opts.with_observations:
        _import_observations(user, sample.get("observation") or {}, turns, opts, artifacts, derived)

    names = ProperNouns()
    for _, text in turns.texts:
        names.learn(text)
    observed = [(a.id, a.content) for a in artifacts if a.artifact_type == "observation"]
    found = (
        _concepts(user, sample_id, speakers, turns.texts, records, names, opts, observed)
        if opts.with_concepts
        else _Concepts([], [], [], [], {})
    )
    relations.extend(found.mentions)
    relations.extend(found.observed)
    relations.extend(found.related)

    records.extend(artifacts)
    records.extend(turns.notes)
    records.extend(found.concepts)
    records.extend(relations)
    return ImportedConversation(
        sample_id=sample_id,
        user_id=user,
        records=records,
        turn_ids=turns.turn_ids,
        derived_from=derived,
        names=names,
        speakers=speakers,
        as_of=end_ts + timedelta(days=1),
        counts=_counts(turns, artifacts, found, relations),
        texts=dict(turns.texts),
        too_common=found.too_common,
    )


def _counts(
    turns: _Turns, artifacts: Sequence[Artifact], found: _Concepts, relations: Sequence[Relation]
) -> dict[str, int]:
    return {
        "memory_units": len(turns.turn_ts),
        "artifacts": len(artifacts),
        "notes": len(turns.notes),
        "concepts": len(found.concepts),
        "mentions": len(found.mentions),
        "related_to": len(found.related),
        "observation_concepts": len(found.observed),
        "follows": sum(1 for r in relations if r.type is EdgeType.FOLLOWS),
        "derived_from": sum(1 for r in relations if r.type is EdgeType.DERIVED_FROM),
    }


def _turn_unit(user: str, muid: str, turn: Turn, session: Any, ts: datetime, opts: ImportOptions) -> MemoryUnit:
    return MemoryUnit(
        user_id=user,
        muid=muid,
        title=turn.speaker[:500] if opts.turn_format == "title" else "",
        content=turn_content(turn, opts.turn_format)[:100_000],
        creation_ts=ts,
        source_type="dialogue_turn",
        importance_score=5.0,
        source_agent_id=turn.speaker[:128],
        tags=[f"session-{session.number}"],
        metadata={
            "dia_id": turn.dia_id,
            "session": session.number,
            "session_date": session.date_text,
            "speaker": turn.speaker,
        },
    )


def _import_turns(user: str, sessions: Sequence[Any], speakers: Sequence[str], opts: ImportOptions) -> _Turns:
    """Each turn as a memory unit (one second apart, never earlier than the turn before), its rule
    note DERIVED_FROM it and FOLLOWS to the turn before it in its session."""
    out = _Turns()
    for session in sessions:
        previous_muid: str | None = None
        previous: tuple[str, str] | None = None
        for turn in session.turns:
            muid = f"turn:{turn.dia_id}" if valid_id(f"turn:{turn.dia_id}") else f"turn:s{turn.session}-{turn.index}"
            if muid in out.turn_ts:  # a repeated dialog id: keep both turns apart
                muid = f"turn:s{turn.session}-{turn.index}"
            ts = session.start + timedelta(seconds=turn.index - 1)
            if out.last_ts is not None and ts <= out.last_ts:
                ts = out.last_ts + timedelta(seconds=1)
            out.last_ts = ts
            out.turn_ids.setdefault(turn.dia_id, muid)
            out.turn_ts[muid] = ts
            out.session_turns.setdefault(session.number, []).append(muid)
            out.session_end[session.number] = ts
            out.records.append(_turn_unit(user, muid, turn, session, ts, opts))
            out.texts.append((muid, turn_content(turn, "bare")))
            if opts.with_rule_notes:
                bare = turn_content(turn, "bare")
                note = rule_note(user, muid, turn.speaker, bare, ts, speakers, previous)
                if note is not None:
                    out.notes.append(note)
                    out.relations.append(
                        Relation(
                            user_id=user,
                            type=EdgeType.DERIVED_FROM,
                            source=note.id,
                            target=muid,
                            weight=opts.note_weight,
                        )
                    )
                previous = (turn.speaker, bare)
            if previous_muid is not None and opts.follows_weight > 0:
                out.relations.append(
                    Relation(
                        user_id=user,
                        type=EdgeType.FOLLOWS,
                        source=muid,
                        target=previous_muid,
                        weight=opts.follows_weight,
                    )
                )
            previous_muid = muid
    return out


def _import_summaries(
    user: str,
    summaries: Mapping[str, Any],
    turns: _Turns,
    opts: ImportOptions,
    artifacts: list[Artifact],
    derived: dict[str, frozenset[str]],
) -> None:
    """Each session summary as an artifact DERIVED_FROM every turn of its session."""
    for key in sorted(summaries, key=_session_number):
        n = _session_number(key)
        text = str(summaries[key] or "").strip()
        if not text or n not in turns.session_turns:
            continue
        aid = f"summary:session-{n}"
        artifacts.append(
            Artifact(
                user_id=user,
                id=aid,
                artifact_type="session_summary",
                title=f"Summary of session {n}",
                content=text[:100_000],
                created_at=turns.session_end[n] + timedelta(seconds=1),
                confidence=0.5,
            )
        )
        derived[aid] = frozenset(turns.session_turns[n])
        turns.relations.extend(
            Relation(user_id=user, type=EdgeType.DERIVED_FROM, source=aid, target=m, weight=opts.summary_weight)
            for m in turns.session_turns[n]
        )


def _import_observations(
    user: str,
    observations: Mapping[str, Any],
    turns: _Turns,
    opts: ImportOptions,
    artifacts: list[Artifact],
    derived: dict[str, frozenset[str]],
) -> None:
    """Each observation that cites a known turn as an artifact DERIVED_FROM the turns it cites."""
    for key in sorted(observations, key=_session_number):
        n = _session_number(key)
        per_speaker = observations[key] or {}
        if not isinstance(per_speaker, Mapping):
            continue
        for speaker in sorted(per_speaker):
            items = per_speaker[speaker] or []
            for j, item in enumerate(items, start=1):
                if not isinstance(item, list | tuple) or not item:
                    continue
                text = str(item[0] or "").strip()
                cited = [turns.turn_ids[d] for d in evidence_ids(list(item[1:])) if d in turns.turn_ids]
                if not text or not cited:
                    continue
                aid = f"obs:s{n}:{slug(speaker, 30)}:{j}"
                created = max(turns.turn_ts[m] for m in cited) + timedelta(seconds=1)
                if n in turns.session_end:
                    created = max(created, turns.session_end[n] + timedelta(seconds=1))
                artifacts.append(
                    Artifact(
                        user_id=user,
                        id=aid,
                        artifact_type="observation",
                        title=f"Observation about {speaker}"[:500],
                        content=text[:100_000],
                        created_at=created,
                        confidence=0.5,
                    )
                )
                derived[aid] = frozenset(cited)
                turns.relations.extend(
                    Relation(
                        user_id=user, type=EdgeType.DERIVED_FROM, source=aid, target=m, weight=opts.observation_weight
                    )
                    for m in dict.fromkeys(cited)
                )


def surface_aliases(name: str, forms: Sequence[str]) -> list[str]:
    """A concept's other surface forms as aliases, most frequent first: none that differs from the
    name or an earlier one only in case or white space, none longer than an alias may be."""
    seen = {alias_key(name)}
    out: list[str] = []
    for form in forms:
        key = alias_key(form)
        if key in seen or len(form) > MAX_ALIAS_CHARS:
            continue
        seen.add(key)
        out.append(form)
    return out[:MAX_ALIASES]


def _session_number(key: str) -> int:
    m = re.search(r"(\d+)", key)
    return int(m.group(1)) if m else 0


@dataclass(slots=True)
class _Concepts:
    concepts: list[Concept]
    mentions: list[Relation]
    related: list[Relation]
    observed: list[Relation]  # observation DERIVED_FROM a concept its text names
    too_common: dict[str, tuple[str, ...]]  # as ImportedConversation.too_common


@dataclass(slots=True)
class _Named:
    """What each text names, with the turns' document frequencies."""

    per_turn: dict[str, list[str]]  # muid -> concept keys ("entity:..." / "topic:...") it mentions
    surfaces: dict[str, Counter[str]]  # key -> its surface forms
    df: Counter[str]
    n_turns: int
    max_df: int


def _named(
    turn_texts: Sequence[tuple[str, str]], names: ProperNouns, speaker_keys: Mapping[str, str], opts: ImportOptions
) -> _Named:
    per_turn: dict[str, list[str]] = {}
    surfaces: dict[str, Counter[str]] = defaultdict(Counter)
    for muid, text in turn_texts:
        named = concept_keys(text, names, speaker_keys)
        for key, surface in named:
            if not key.startswith("person:"):
                surfaces[key][surface] += 1
        per_turn[muid] = list(dict.fromkeys(key for key, _ in named))
    df: Counter[str] = Counter(k for keys in per_turn.values() for k in keys)
    n_turns = max(1, len(per_turn))
    max_df = allowance(n_turns, opts.max_topic_df_ratio, opts.min_topic_df, opts.common_topic_floor)
    return _Named(per_turn, surfaces, df, n_turns, max_df)


def _concepts(
    user: str,
    sample_id: str,
    speakers: Sequence[str],
    turn_texts: Sequence[tuple[str, str]],
    records: Sequence[Record],
    names: ProperNouns,
    opts: ImportOptions,
    observations: Sequence[tuple[str, str]] = (),
) -> _Concepts:
    speaker_of = {r.muid: r.source_agent_id or "" for r in records if isinstance(r, MemoryUnit)}
    speaker_keys = {s.lower(): s for s in speakers}
    speaker_ids = {s: speaker_concept_id(s) for s in speakers}
    named = _named(turn_texts, names, speaker_keys, opts)
    df, max_df = named.df, named.max_df

    # what each observation names, by the turns' statistics (an observation restates turns: it
    # counts towards no concept's document frequency)
    per_observation = {
        aid: list(dict.fromkeys(k for k, _ in concept_keys(text, names, speaker_keys) if not k.startswith("person:")))
        for aid, text in observations
    }
    named_by = {**named.per_turn, **per_observation}
    common = {m: tuple(k for k in keys if too_common(k, df[k], max_df)) for m, keys in named_by.items()}

    ids, concepts = _concept_records(user, sample_id, speakers, speaker_ids, named, opts)
    mentions, cooccur = _mentions(user, named, ids, speaker_of, speaker_ids, opts)
    observed = [
        Relation(
            user_id=user, type=EdgeType.DERIVED_FROM, source=aid, target=cid, weight=opts.observation_concept_weight
        )
        for aid, keys in per_observation.items()
        for cid in sorted({ids[k] for k in keys if k in ids})
        if opts.observation_concept_weight > 0
    ]
    related = _related(user, cooccur, {ids[k]: df[k] for k in ids if k in df}, opts)
    return _Concepts(concepts, mentions, related, observed, {m: keys for m, keys in common.items() if keys})


def _concept_records(
    user: str,
    sample_id: str,
    speakers: Sequence[str],
    speaker_ids: Mapping[str, str],
    named: _Named,
    opts: ImportOptions,
) -> tuple[dict[str, str], list[Concept]]:
    """The concepts (each speaker, then each kept entity and topic) and their ids by key."""
    df, max_df = named.df, named.max_df

    def kept(key: str) -> bool:
        if key.startswith("person:"):
            return True
        return not too_common(key, df[key], max_df) and (key.startswith("entity:") or df[key] >= opts.min_topic_df)

    ids: dict[str, str] = {}
    concepts: list[Concept] = []
    for s in speakers:
        ids["person:" + s] = speaker_ids[s]
        concepts.append(
            Concept(
                user_id=user,
                id=speaker_ids[s],
                name=s[:500],
                type="person",
                description=f"A speaker of the conversation {sample_id}.",
                salience=1.0,
            )
        )
    for key in sorted(k for k in df if kept(k) and not k.startswith("person:")):
        kind, _, raw = key.partition(":")
        forms = [text for text, _ in sorted(named.surfaces[key].items(), key=lambda kv: (-kv[1], kv[0]))]
        name = forms[0]
        aliases = surface_aliases(name[:500], forms[1:]) if opts.surface_aliases else []
        cid = entity_id(kind, raw)
        if cid in ids.values():
            cid = f"{cid}-{hashlib.sha1(key.encode()).hexdigest()[:6]}"
        ids[key] = cid
        concepts.append(
            Concept(
                user_id=user,
                id=cid,
                name=name[:500],
                type="entity" if kind == "entity" else "topic",
                description="",
                salience=round(min(1.0, 0.3 + 0.7 * max(0.0, 1.0 - df[key] / (2 * max_df + 1))), 4),
                properties={"turns": df[key]},
                aliases=aliases,
            )
        )
    return ids, concepts


def _mentions(
    user: str,
    named: _Named,
    ids: Mapping[str, str],
    speaker_of: Mapping[str, str],
    speaker_ids: dict[str, str],
    opts: ImportOptions,
) -> tuple[list[Relation], Counter[tuple[str, str]]]:
    """Each turn MENTIONS its speaker and the kept concepts it names; the co-occurrence counts of those."""
    mentions: list[Relation] = []
    cooccur: Counter[tuple[str, str]] = Counter()
    n_turns, df = named.n_turns, named.df
    log_n = math.log(n_turns + 1)
    for muid, keys in named.per_turn.items():
        targets: dict[str, float] = {}
        speaker = speaker_of.get(muid)
        if speaker in speaker_ids and opts.speaker_mentions_weight > 0:
            targets[speaker_ids[speaker]] = opts.speaker_mentions_weight
        present = [k for k in keys if k in ids]
        for k in present:
            weight = 1.0 if not k.startswith("topic:") else max(0.2, math.log((n_turns + 1) / df[k]) / log_n)
            targets[ids[k]] = max(targets.get(ids[k], 0.0), round(weight, 4))
        for cid, weight in sorted(targets.items()):
            mentions.append(Relation(user_id=user, type=EdgeType.MENTIONS, source=muid, target=cid, weight=weight))
        linked = sorted({ids[k] for k in present if not k.startswith("person:")})
        for a_i, a in enumerate(linked):
            for b in linked[a_i + 1 :]:
                cooccur[(a, b)] += 1
    return mentions, cooccur


def _related(
    user: str, cooccur: Counter[tuple[str, str]], df_by_id: Mapping[str, int], opts: ImportOptions
) -> list[Relation]:
    """RELATED_TO between concepts named together often enough: each concept's strongest few."""
    scored: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
    for (a, b), c in cooccur.items():
        if c < opts.min_cooccurrence:
            continue
        weight = c / math.sqrt(df_by_id[a] * df_by_id[b])
        scored[a].append((weight, a, b))
        scored[b].append((weight, a, b))
    chosen: dict[tuple[str, str], float] = {}
    for cid in sorted(scored):
        for weight, a, b in sorted(scored[cid], key=lambda x: (-x[0], x[1], x[2]))[: opts.related_per_concept]:
            chosen[(a, b)] = weight
    return [
        Relation(
            user_id=user,
            type=EdgeType.RELATED_TO,
            source=a,
            target=b,
            weight=round(min(1.0, w), 4),
            relation_type="co_occurs",
        )
        for (a, b), w in sorted(chosen.items())
    ]


def concept_keys(text: str, names: ProperNouns, speaker_keys: Mapping[str, str]) -> list[tuple[str, str]]:
    """The concept keys :func:`extract` finds in ``text``, each with its surface form, in order:
    ``person:<speaker>`` for a speaker's name (``speaker_keys``: lower case -> name; a one-word
    entity that is a speaker's first name counts too), ``entity:<lower case>``, ``topic:<stems>``."""
    found = extract(text, names)
    keys: list[tuple[str, str]] = []
    for e in found.entities:
        lowered = e.lower()
        first = lowered.split()[0]
        if lowered in speaker_keys or (first in speaker_keys and len(lowered.split()) == 1):
            keys.append(("person:" + speaker_keys.get(lowered, speaker_keys.get(first, e)), e))
        else:
            keys.append(("entity:" + lowered, e))
    keys.extend(("topic:" + topic_key(t), t) for t in found.topics)
    return keys
