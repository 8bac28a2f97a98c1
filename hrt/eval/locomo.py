"""``hrt eval locomo``: evidence retrieval on LoCoMo conversations, HRT against its own baselines.

LoCoMo (Maharana et al., ACL 2024, arXiv:2402.17753; CC BY-NC 4.0) holds very long two-person
conversations with questions whose answers cite the turns ("dialog ids") that hold the evidence.
The data is read at run time only; nothing of it is stored in this repository.

1. **Import** (:func:`import_conversation`, no LLM, deterministic). Each conversation becomes one
   user's graph:

   - every turn a MemoryUnit (content: ``Speaker said, "text"``, plus ``[image: caption]`` when
     the turn shared an image), ``creation_ts`` = its session's date + its order (one second per
     turn, strictly increasing over the conversation);
   - session summaries (``session_summary``) and observations (``observation``) as artifacts,
     DERIVED_FROM the turns they cite: an observation the dialog ids it names, a summary every turn
     of its session (it cites none, it summarises the session);
   - concepts: the speakers (``person``), and the entities and topics :func:`extract` finds in the
     turns, with MENTIONS edges from the turns, RELATED_TO edges weighted by co-occurrence in a turn,
     and FOLLOWS edges between consecutive turns of a session (later -> earlier).

2. **Questions** become RetrieveRequests: the question itself plus the key phrases :func:`extract`
   finds in it (by default joined into one keyword phrase, :func:`question_phrases`), ``as_of`` a
   day after the last session, the semantic weight alone.

3. **Systems**, one store, one embedder, one run: BM25 only, dense only, hybrid RRF (both legs of
   the store's search, fused, no graph), and HRT (:data:`HRT_SYSTEMS`): the headline row with the
   product's defaults and the semantic weight alone (``hrt``), the same with nothing overridden,
   the default weights too (``hrt-unweighted``), the defaults at depth 0, 1, 2 and 3, and the
   eval's tuned configuration from before issue #23 (``hrt-before``). ``--setting`` overrides
   apply to every HRT system; ``--experimental-path-sum`` swaps in :func:`path_sum_expansion`, a
   prototype of summing every seed's path instead of keeping the best one.

4. **Metrics** per category and overall: evidence recall@k (k = 5, 10, 25), nDCG@10, MRR, a
   recall that credits an artifact whose DERIVED_FROM turns include the evidence, and candidate
   recall (evidence turns the system considered at any rank). ``--compare BEFORE AFTER`` runs
   nothing and prints the paired bootstrap of two runs' per-question output.

The extractor (:func:`extract`) is rules only: capitalised-word runs for entities (a sentence's
first word only when the conversation also capitalises it mid-sentence), RAKE-style runs of content
words for topics, a light suffix stemmer to group spellings. No network and no model.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import math
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hrt.config import Settings, Weights
from hrt.contract import MAX_KEY_PHRASES, MAX_PHRASE_CHARS, Limits, RetrieveRequest
from hrt.embedder import CachedEmbedder, Embedder
from hrt.ingest import Record
from hrt.pipeline.grounding import Grounding
from hrt.pipeline.intake import Intake
from hrt.records import Artifact, Concept, EdgeType, Kind, MemoryUnit, Relation, valid_id
from hrt.stores.base import ExpansionCaps, GraphCandidate, GraphStore, VectorHit
from hrt.text import STOPWORDS

log = logging.getLogger(__name__)

DEFAULT_DATA = Path("../shared/data/locomo-dev.json")
KS = (5, 10, 25)
NDCG_K = 10
RRF_K = 60

CATEGORY_NAMES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
OVERALL = "overall"  # categories 1-4
ALL = "all"  # categories 1-5

# The LoCoMo paper (Table 3), DRAGON retriever, dialogs as database, all ten conversations.
PAPER_DRAGON: dict[str, float] = {"recall@5": 56.7, "recall@10": 66.2, "recall@25": 76.7}

# ---------------------------------------------------------------------------------------------
# LoCoMo's format
# ---------------------------------------------------------------------------------------------

SESSION_KEY = re.compile(r"^session_(\d+)$")
DIA_ID = re.compile(r"D\d+:\d+")
DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y", "%d %B, %Y", "%d %B %Y")
FALLBACK_START = datetime(2000, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    session: int
    index: int  # 1-based order in its session
    speaker: str
    text: str
    caption: str | None


@dataclass(frozen=True, slots=True)
class Session:
    number: int
    date_text: str
    start: datetime
    turns: tuple[Turn, ...]


def parse_session_date(text: str | None) -> datetime | None:
    """LoCoMo writes ``1:56 pm on 8 May, 2023``; a few variants are accepted; None if none fits."""
    if not text:
        return None
    cleaned = " ".join(str(text).replace("\u202f", " ").split())
    for fmt in DATE_FORMATS:
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def parse_sessions(conversation: Mapping[str, Any]) -> list[Session]:
    """The sessions that hold turns, in session-number order. A session without a readable date
    starts a day after the previous one (or on 2000-01-01 when it is the first)."""
    numbers = sorted(int(m.group(1)) for key in conversation if (m := SESSION_KEY.match(key)))
    sessions: list[Session] = []
    previous: datetime | None = None
    for n in numbers:
        raw = conversation.get(f"session_{n}")
        if not isinstance(raw, list) or not raw:
            continue
        date_text = str(conversation.get(f"session_{n}_date_time") or "")
        start = parse_session_date(date_text)
        if start is None:
            start = previous + timedelta(days=1) if previous is not None else FALLBACK_START
        turns: list[Turn] = []
        for i, item in enumerate(raw, start=1):
            if not isinstance(item, Mapping):
                continue
            text = str(item.get("text") or "").strip()
            caption = item.get("blip_caption")
            caption_text = str(caption).strip() if caption else None
            if not text and not caption_text:
                continue
            dia_id = str(item.get("dia_id") or f"D{n}:{i}")
            turns.append(Turn(dia_id, n, i, str(item.get("speaker") or "unknown"), text, caption_text or None))
        sessions.append(Session(n, date_text, start, tuple(turns)))
        previous = start
    return sessions


def evidence_ids(raw: Any) -> list[str]:
    """Dialog ids in an evidence field: a string (``"D8:6; D9:17"`` occurs) or a list of them."""
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    for item in items:
        if isinstance(item, str):
            out.extend(DIA_ID.findall(item))
        elif isinstance(item, list):
            out.extend(evidence_ids(item))
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------------
# The extractor
# ---------------------------------------------------------------------------------------------


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
    """
)
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


@dataclass(slots=True)
class ProperNouns:
    """Which capitalised words a text collection treats as names: those it capitalises in the
    middle of a sentence at least as often as it writes them in lower case."""

    capitalised: Counter[str] = field(default_factory=Counter)
    lower: Counter[str] = field(default_factory=Counter)

    def learn(self, text: str) -> None:
        for sentence in SENTENCE_SPLIT.split(text):
            for i, token in enumerate(TOKEN.findall(sentence)):
                bare = _bare(token)
                if not bare:
                    continue
                if token[0].isupper():
                    if i > 0:
                        self.capitalised[bare] += 1
                else:
                    self.lower[bare] += 1

    def is_name(self, bare: str) -> bool:
        return self.capitalised[bare] > 0 and self.capitalised[bare] >= self.lower[bare]


@dataclass(frozen=True, slots=True)
class Extraction:
    entities: tuple[str, ...]  # surface forms, in order of appearance
    topics: tuple[str, ...]  # lower-case phrases: multi-word runs, then their single words


def _capitalised(token: str) -> bool:
    bare = _bare(token)
    return token[0].isupper() and len(bare) > 1 and not _stop(bare) and not bare.startswith("i'")


def _entity_runs(tokens: Sequence[str], names: ProperNouns | None) -> tuple[list[str], set[int]]:
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
        while j < len(tokens):
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


def extract(text: str, names: ProperNouns | None = None, max_words: int = 3) -> Extraction:
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


# ---------------------------------------------------------------------------------------------
# The importer
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportOptions:
    """Edge weights and concept filters of the import (all data, none of it HRT's code)."""

    follows_weight: float = 0.5
    speaker_mentions_weight: float = 0.1  # a turn MENTIONS its own speaker
    observation_weight: float = 1.0  # observation DERIVED_FROM a cited turn
    summary_weight: float = 0.3  # session summary DERIVED_FROM each turn of its session
    max_topic_df_ratio: float = 0.05  # topics in more turns than this share are too common
    min_topic_df: int = 2  # topics in fewer turns connect nothing
    related_per_concept: int = 10
    min_cooccurrence: int = 2
    with_concepts: bool = True  # False: no concepts, MENTIONS or RELATED_TO (an ablation)
    with_summaries: bool = True
    with_observations: bool = True
    turn_format: str = "said"  # said: `Speaker said, "text"` (LoCoMo's RAG format); title; colon; bare


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


def slug(text: str, max_len: int = 60) -> str:
    s = re.sub(r"[^A-Za-z0-9_.:@-]+", "-", text.strip().lower()).strip("-._:@")
    return s[:max_len].rstrip("-._:@") or "x"


def entity_id(prefix: str, key: str) -> str:
    """A valid, stable id for a concept key (hashed when the key does not fit the id pattern)."""
    candidate = f"{prefix}:{slug(key)}"
    if slug(key) == key.replace(" ", "-") and valid_id(candidate):
        return candidate
    return f"{prefix}:{slug(key, 40)}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def user_id_for(sample_id: str) -> str:
    uid = f"locomo-{slug(sample_id, 100)}"
    return uid if valid_id(uid) else "locomo-" + hashlib.sha1(sample_id.encode()).hexdigest()[:16]


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


def import_conversation(sample: Mapping[str, Any], options: ImportOptions | None = None) -> ImportedConversation:
    """One LoCoMo sample (``{"sample_id", "conversation", "observation", "session_summary", ...}``)
    as one user's records: turns, artifacts, concepts and relations. Deterministic."""
    opts = options or ImportOptions()
    sample_id = str(sample.get("sample_id") or "conversation")
    user = user_id_for(sample_id)
    conversation = sample.get("conversation") or {}
    sessions = parse_sessions(conversation)
    speakers = tuple(
        dict.fromkeys(
            [str(conversation[k]) for k in ("speaker_a", "speaker_b") if conversation.get(k)]
            + [t.speaker for s in sessions for t in s.turns]
        )
    )

    records: list[Record] = []
    relations: list[Relation] = []
    turn_ids: dict[str, str] = {}
    turn_ts: dict[str, datetime] = {}
    session_turns: dict[int, list[str]] = {}
    session_end: dict[int, datetime] = {}
    last_ts: datetime | None = None
    turn_texts: list[tuple[str, str]] = []  # (muid, text) for extraction
    for session in sessions:
        previous_muid: str | None = None
        for turn in session.turns:
            muid = f"turn:{turn.dia_id}" if valid_id(f"turn:{turn.dia_id}") else f"turn:s{turn.session}-{turn.index}"
            if muid in turn_ts:  # a repeated dialog id: keep both turns apart
                muid = f"turn:s{turn.session}-{turn.index}"
            ts = session.start + timedelta(seconds=turn.index - 1)
            if last_ts is not None and ts <= last_ts:
                ts = last_ts + timedelta(seconds=1)
            last_ts = ts
            turn_ids.setdefault(turn.dia_id, muid)
            turn_ts[muid] = ts
            session_turns.setdefault(session.number, []).append(muid)
            session_end[session.number] = ts
            records.append(
                MemoryUnit(
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
            )
            turn_texts.append((muid, turn_content(turn, "bare")))
            if previous_muid is not None and opts.follows_weight > 0:
                relations.append(
                    Relation(
                        user_id=user,
                        type=EdgeType.FOLLOWS,
                        source=muid,
                        target=previous_muid,
                        weight=opts.follows_weight,
                    )
                )
            previous_muid = muid
    end_ts = last_ts or FALLBACK_START

    # --- artifacts ----------------------------------------------------------------------------
    derived: dict[str, frozenset[str]] = {}
    artifacts: list[Artifact] = []
    if opts.with_summaries:
        summaries = sample.get("session_summary") or {}
        for key in sorted(summaries, key=_session_number):
            n = _session_number(key)
            text = str(summaries[key] or "").strip()
            if not text or n not in session_turns:
                continue
            aid = f"summary:session-{n}"
            artifacts.append(
                Artifact(
                    user_id=user,
                    id=aid,
                    artifact_type="session_summary",
                    title=f"Summary of session {n}",
                    content=text[:100_000],
                    created_at=session_end[n] + timedelta(seconds=1),
                    confidence=0.5,
                )
            )
            derived[aid] = frozenset(session_turns[n])
            relations.extend(
                Relation(user_id=user, type=EdgeType.DERIVED_FROM, source=aid, target=m, weight=opts.summary_weight)
                for m in session_turns[n]
            )
    if opts.with_observations:
        observations = sample.get("observation") or {}
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
                    cited = [turn_ids[d] for d in evidence_ids(list(item[1:])) if d in turn_ids]
                    if not text or not cited:
                        continue
                    aid = f"obs:s{n}:{slug(speaker, 30)}:{j}"
                    created = max(turn_ts[m] for m in cited) + timedelta(seconds=1)
                    if n in session_end:
                        created = max(created, session_end[n] + timedelta(seconds=1))
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
                    relations.extend(
                        Relation(
                            user_id=user,
                            type=EdgeType.DERIVED_FROM,
                            source=aid,
                            target=m,
                            weight=opts.observation_weight,
                        )
                        for m in dict.fromkeys(cited)
                    )

    # --- concepts -----------------------------------------------------------------------------
    names = ProperNouns()
    for _, text in turn_texts:
        names.learn(text)
    concepts, mention_edges, related_edges = (
        _concepts(user, sample_id, speakers, turn_texts, records, names, opts) if opts.with_concepts else ([], [], [])
    )
    relations.extend(mention_edges)
    relations.extend(related_edges)

    records.extend(artifacts)
    records.extend(concepts)
    records.extend(relations)
    counts = {
        "memory_units": len(turn_ts),
        "artifacts": len(artifacts),
        "concepts": len(concepts),
        "mentions": len(mention_edges),
        "related_to": len(related_edges),
        "follows": sum(1 for r in relations if r.type is EdgeType.FOLLOWS),
        "derived_from": sum(1 for r in relations if r.type is EdgeType.DERIVED_FROM),
    }
    return ImportedConversation(
        sample_id=sample_id,
        user_id=user,
        records=records,
        turn_ids=turn_ids,
        derived_from=derived,
        names=names,
        speakers=speakers,
        as_of=end_ts + timedelta(days=1),
        counts=counts,
    )


def _session_number(key: str) -> int:
    m = re.search(r"(\d+)", key)
    return int(m.group(1)) if m else 0


def _concepts(
    user: str,
    sample_id: str,
    speakers: Sequence[str],
    turn_texts: Sequence[tuple[str, str]],
    records: Sequence[Record],
    names: ProperNouns,
    opts: ImportOptions,
) -> tuple[list[Concept], list[Relation], list[Relation]]:
    speaker_of = {r.muid: r.source_agent_id or "" for r in records if isinstance(r, MemoryUnit)}
    speaker_keys = {s.lower(): s for s in speakers}
    speaker_ids = {s: entity_id("person", s.lower()) for s in speakers}

    # per turn: concept keys mentioned ("entity:..." / "topic:..."), with their surface forms
    per_turn: dict[str, list[str]] = {}
    surfaces: dict[str, Counter[str]] = defaultdict(Counter)
    for muid, text in turn_texts:
        found = extract(text, names)
        keys: list[str] = []
        for e in found.entities:
            lowered = e.lower()
            first = lowered.split()[0]
            if lowered in speaker_keys or (first in speaker_keys and len(lowered.split()) == 1):
                keys.append("person:" + speaker_keys.get(lowered, speaker_keys.get(first, e)))
                continue
            key = "entity:" + lowered
            keys.append(key)
            surfaces[key][e] += 1
        for t in found.topics:
            key = "topic:" + topic_key(t)
            keys.append(key)
            surfaces[key][t] += 1
        per_turn[muid] = list(dict.fromkeys(keys))

    df: Counter[str] = Counter(k for keys in per_turn.values() for k in keys)
    n_turns = max(1, len(per_turn))
    max_df = max(opts.min_topic_df, math.floor(opts.max_topic_df_ratio * n_turns))

    def kept(key: str) -> bool:
        if key.startswith("person:"):
            return True
        if key.startswith("entity:"):
            return df[key] <= max_df * 2
        return opts.min_topic_df <= df[key] <= max_df

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
        name = sorted(surfaces[key].items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
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
                salience=round(min(1.0, 0.3 + 0.7 * (1.0 - df[key] / (2 * max_df + 1))), 4),
                properties={"turns": df[key]},
            )
        )

    mentions: list[Relation] = []
    cooccur: Counter[tuple[str, str]] = Counter()
    log_n = math.log(n_turns + 1)
    for muid, keys in per_turn.items():
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

    df_by_id = {ids[k]: df[k] for k in ids if k in df}
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
    related = [
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
    return concepts, mentions, related


# ---------------------------------------------------------------------------------------------
# Questions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Question:
    sample_id: str
    user_id: str
    index: int  # position in the sample's qa list
    text: str
    category: int
    evidence: frozenset[str]  # muids
    extraction: Extraction  # what :func:`extract` finds in the question
    as_of: datetime

    def key_phrases(self, mode: str = "anchored") -> tuple[str, ...]:
        return question_phrases(self.text, self.extraction, mode)


PHRASE_MODES = ("question", "extracted", "anchored", "keywords")


def _unique(phrases: Iterable[str], cap: int = MAX_KEY_PHRASES) -> tuple[str, ...]:
    out: list[str] = []
    seen: set[str] = set()
    for p in phrases:
        p = " ".join(p.split())[:MAX_PHRASE_CHARS].strip()
        if p and p.casefold() not in seen:
            seen.add(p.casefold())
            out.append(p)
    return tuple(out[:cap])


def question_phrases(question: str, found: Extraction, mode: str = "anchored") -> tuple[str, ...]:
    """The key phrases of a question's request, the question itself always first:

    - ``question``: the question alone;
    - ``extracted``: then every entity and topic :func:`extract` finds, each on its own;
    - ``anchored``: then each topic prefixed with the question's entities ("Caroline adoption
      agencies"), or the entities alone when there is no topic: what a DialogueAgent's first call
      would name, a topic in its context;
    - ``keywords``: then one phrase of all entities and topics' words.
    """
    q = question[:MAX_PHRASE_CHARS]
    if mode == "question":
        return _unique([q])
    if mode == "extracted":
        return _unique([q, *found.entities, *found.topics])
    if mode == "keywords":
        words = [*found.entities, *(t for t in found.topics if " " not in t)]
        return _unique([q, " ".join(dict.fromkeys(words))])
    if mode == "anchored":
        anchor = " ".join(found.entities)
        multi = [t for t in found.topics if " " in t]
        inside = {w for t in multi for w in t.split()}
        topics = [*multi, *(t for t in found.topics if " " not in t and t not in inside)]
        if not topics:
            return _unique([q, anchor] if anchor else [q])
        return _unique([q, *(f"{anchor} {t}".strip() for t in topics)])
    raise ValueError(f"unknown phrase mode {mode!r}; one of {', '.join(PHRASE_MODES)}")


def build_questions(sample: Mapping[str, Any], imported: ImportedConversation) -> tuple[list[Question], int]:
    """The sample's questions with at least one evidence turn present; and how many were skipped."""
    out: list[Question] = []
    skipped = 0
    for i, qa in enumerate(sample.get("qa") or []):
        if not isinstance(qa, Mapping):
            skipped += 1
            continue
        text = " ".join(str(qa.get("question") or "").split())
        evidence = frozenset(imported.turn_ids[d] for d in evidence_ids(qa.get("evidence")) if d in imported.turn_ids)
        try:
            category = int(qa.get("category") or 0)
        except (TypeError, ValueError):
            category = 0
        if not text or not evidence:
            skipped += 1
            continue
        out.append(
            Question(
                sample_id=imported.sample_id,
                user_id=imported.user_id,
                index=i,
                text=text,
                category=category,
                evidence=evidence,
                extraction=extract(text, imported.names),
                as_of=imported.as_of,
            )
        )
    return out, skipped


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def recall_at(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Share of the relevant ids among the first ``k`` ranked ones (LoCoMo's evidence recall)."""
    rel = set(relevant)
    if not rel:
        return 0.0
    return len(rel.intersection(ranked[:k])) / len(rel)


def covered_recall_at(ranked: Sequence[Iterable[str]], relevant: Iterable[str], k: int) -> float:
    """Recall where each ranked item covers a set of ids (a turn itself, an artifact the turns it
    is DERIVED_FROM): share of the relevant ids covered by the first ``k`` items."""
    rel = set(relevant)
    if not rel:
        return 0.0
    covered: set[str] = set()
    for item in ranked[:k]:
        covered.update(item)
    return len(rel & covered) / len(rel)


def ndcg_at(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Binary-relevance nDCG@k: sum of 1/log2(rank + 1) over relevant hits, over the ideal sum."""
    rel = set(relevant)
    if not rel:
        return 0.0
    dcg = sum(1.0 / math.log2(r + 1) for r, item in enumerate(ranked[:k], start=1) if item in rel)
    ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(k, len(rel)) + 1))
    return dcg / ideal


def reciprocal_rank(ranked: Sequence[str], relevant: Iterable[str]) -> float:
    rel = set(relevant)
    for r, item in enumerate(ranked, start=1):
        if item in rel:
            return 1.0 / r
    return 0.0


METRICS = (
    *(f"recall@{k}" for k in KS),
    f"ndcg@{NDCG_K}",
    "mrr",
    *(f"recall@{k}+artifacts" for k in KS),
    "candidates",
)


def question_metrics(ranking: Ranking, evidence: frozenset[str]) -> dict[str, float]:
    """Recall@k, nDCG@10, reciprocal rank, the artifact-credited recall@k and candidate recall:
    the share of evidence turns the system considered at all, at any rank (an HRT system's scored
    memory units; a baseline's search hits), the ceiling of any ranking of them."""
    out = {f"recall@{k}": recall_at(ranking.memory_units, evidence, k) for k in KS}
    out[f"ndcg@{NDCG_K}"] = ndcg_at(ranking.memory_units, evidence, NDCG_K)
    out["mrr"] = reciprocal_rank(ranking.memory_units, evidence)
    for k in KS:
        out[f"recall@{k}+artifacts"] = covered_recall_at(ranking.mixed, evidence, k)
    pool = ranking.candidates if ranking.candidates is not None else frozenset(ranking.memory_units)
    out["candidates"] = len(evidence & pool) / len(evidence) if evidence else 0.0
    return out


def aggregate(rows: Sequence[tuple[int, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """Mean of each metric (as a percentage) per category, ``overall`` (1-4) and ``all`` (1-5)."""
    groups: dict[str, list[Mapping[str, float]]] = defaultdict(list)
    for category, metrics in rows:
        groups[str(category)].append(metrics)
        groups[ALL].append(metrics)
        if category != 5:
            groups[OVERALL].append(metrics)
    out: dict[str, dict[str, float]] = {}
    for name in sorted(groups, key=_group_order):
        items = groups[name]
        summary = {m: round(100.0 * sum(x[m] for x in items) / len(items), 2) for m in METRICS}
        summary["n"] = len(items)
        out[name] = summary
    return out


def _group_order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (100 if name == OVERALL else 101, name)


# ---------------------------------------------------------------------------------------------
# Systems
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ranking:
    memory_units: list[str]  # muids, best first
    mixed: list[frozenset[str]]  # memory units and artifacts best first, each as the turns it covers
    candidates: frozenset[str] | None = None  # every memory unit the system considered, at any rank


System = Callable[[Question], Awaitable[Ranking]]

SYSTEMS = (
    "bm25",
    "dense",
    "hybrid-rrf",
    "hrt-depth0",
    "hrt",
    "hrt-unweighted",
    "hrt-depth1",
    "hrt-depth2",
    "hrt-depth3",
    "hrt-before",
)
# run unless --systems names others: the headline rows, the baselines and the depth sweep
DEFAULT_SYSTEMS = SYSTEMS
SYSTEM_LABELS: dict[str, str] = {
    "bm25": "BM25 only",
    "dense": "dense only",
    "hybrid-rrf": "hybrid RRF, no graph",
    "hrt-depth0": "HRT, no expansion (depth 0)",
    "hrt": "HRT, product defaults (semantic weights)",
    "hrt-unweighted": "HRT, nothing overridden (default weights too)",
    "hrt-depth1": "HRT defaults at depth 1",
    "hrt-depth2": "HRT defaults at depth 2",
    "hrt-depth3": "HRT defaults at depth 3",
    "hrt-before": "HRT before issue #23 (tuned, depth 1)",
}
# HRT systems: (max_depth, None = the request leaves it to HRT_DEFAULT_DEPTH; semantic weights or
# the defaults; Settings overrides of that system alone)
HRT_SYSTEMS: dict[str, tuple[int | None, bool, Mapping[str, Any]]] = {
    "hrt-depth0": (0, True, {}),
    "hrt": (None, True, {}),
    "hrt-unweighted": (None, False, {}),
    "hrt-depth1": (1, True, {}),
    "hrt-depth2": (2, True, {}),
    "hrt-depth3": (3, True, {}),
    # the eval's tuned configuration before the defaults became the best measured one (issue #23):
    # search_k 25, fused evidence over the best phrase, reached candidates path x cosine, no date
    # match, no relevance gate, depth 1
    "hrt-before": (
        1,
        True,
        {
            "search_k": 25,
            "semantic_evidence": "fused",
            "phrase_evidence": "max",
            "reached_evidence": "path_x_cosine",
            "temporal_match": "off",
            "relevance_gate": 0.0,
        },
    ),
}
# The one thing the headline row overrides: the weights. "Which turn holds the evidence" is a question
# of relevance alone here: every question is asked a day after the last session (recency would rank
# the last sessions first whatever they say), and the import gives every turn the same importance and
# the user no preferences (salience and preference are flat). The row "nothing overridden" runs the
# default weights too.
EVAL_WEIGHTS = Weights(alpha_semantic_similarity=1.0, beta_recency=0.0, gamma_salience=0.0, delta_user_preference=0.0)
# No Settings override: the HRT systems run with the product's defaults (hrt/config.py), plus any
# --setting given (which then applies to every HRT system and is echoed in the results).
EVAL_SETTINGS: dict[str, Any] = {}


@dataclass(frozen=True, slots=True)
class EvalConfig:
    """What the HRT systems are asked: the request parameters and Settings overrides of the run."""

    depth: int | None = None  # the headline rows' max_depth: None leaves it to HRT_DEFAULT_DEPTH
    top_k: int = max(KS)
    artifacts: int = max(KS)
    weights: Weights = field(default_factory=lambda: EVAL_WEIGHTS)
    settings: Mapping[str, Any] = field(default_factory=lambda: dict(EVAL_SETTINGS))
    phrases: str = "keywords"  # see question_phrases
    # EXPERIMENTAL, eval only: Proposal B's path part (path_sum_expansion), not in the pipeline yet
    experimental_path_sum: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "depth": self.depth,
            "top_k": self.top_k,
            "artifacts": self.artifacts,
            "weights": self.weights.model_dump(),
            "settings": {k: _jsonable(v) for k, v in sorted(self.settings.items())},
            "phrases": self.phrases,
            "experimental_path_sum": self.experimental_path_sum,
        }


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | type(None)) else str(value)


def _by_rank(hits: Iterable[tuple[str, int | None]]) -> list[str]:
    ranked = [(r, i) for i, r in hits if r is not None]
    return [i for _, i in sorted(ranked)]


def _rrf(hits: Iterable[tuple[str, int | None, int | None]], k: int = RRF_K) -> list[str]:
    scored = []
    for ident, a, b in hits:
        s = sum(1.0 / (k + r) for r in (a, b) if r is not None)
        if s > 0:
            scored.append((-s, ident))
    return [i for _, i in sorted(scored)]


def baseline_systems(
    service: Any, derived: Mapping[str, Mapping[str, frozenset[str]]], top_k: int
) -> dict[str, System]:
    """BM25, dense and hybrid RRF over the store's own search (``service.vectors.search``) with the
    question as the one phrase: memory units for recall, memory units and artifacts for the
    artifact-credited recall. No graph, no scoring."""

    async def search(q: Question, kinds: list[Kind]) -> list[VectorHit]:
        vectors = service.embedder.embed([q.text])
        hits: list[list[VectorHit]] = await service.vectors.search(
            q.user_id, [q.text], vectors, kinds=kinds, k=top_k, not_after=q.as_of.timestamp()
        )
        return hits[0]

    def covers(q: Question, ids: Sequence[str]) -> list[frozenset[str]]:
        table = derived.get(q.user_id, {})
        return [table.get(i, frozenset([i])) for i in ids]

    def make(order: Callable[[list[VectorHit]], list[str]]) -> System:
        async def run(q: Question) -> Ranking:
            ranked = order(await search(q, [Kind.MEMORY_UNIT]))
            mixed = order(await search(q, [Kind.MEMORY_UNIT, Kind.ARTIFACT]))[:top_k]
            return Ranking(ranked[:top_k], covers(q, mixed), frozenset(ranked))

        return run

    return {
        "bm25": make(lambda hits: _by_rank((h.id, h.lexical_rank) for h in hits)),
        "dense": make(lambda hits: _by_rank((h.id, h.vector_rank) for h in hits)),
        "hybrid-rrf": make(lambda hits: _rrf((h.id, h.vector_rank, h.lexical_rank) for h in hits)),
    }


def request_for(q: Question, config: EvalConfig, depth: int | None, weights: Weights | None = None) -> RetrieveRequest:
    """The question as a request: its key phrases, 25 memory units and 25 artifacts (no concepts),
    ``as_of`` a day after the last session; ``depth`` and ``weights`` None leave them to HRT's
    defaults (``HRT_DEFAULT_DEPTH``, ``HRT_WEIGHTS``)."""
    phrases = list(q.key_phrases(config.phrases))
    return RetrieveRequest(
        user_id=q.user_id,
        key_phrases=phrases,
        limits=Limits(memory_units=config.top_k, concepts=0, artifacts=config.artifacts),
        max_depth=depth,
        weights=weights,
        as_of=q.as_of,
    )


class Traced:
    """The ids of the memory units each request scored (the pipeline's trace hook): which evidence
    turns became candidates at all, at any rank. Read once per request, right after it."""

    def __init__(self) -> None:
        self.last: frozenset[str] = frozenset()

    def __call__(self, intake: Intake, scored: Sequence[Any]) -> None:
        self.last = frozenset(x.id for x in scored if x.kind is Kind.MEMORY_UNIT)


def _tool(service: Any, settings: Settings) -> Any:
    """A pipeline over the service's stores with other Settings (one system's overrides)."""
    from hrt.pipeline import HybridRetrievalTool

    return HybridRetrievalTool(
        settings, service.embedder, vectors=service.vectors, graph=service.graph, records=service.records
    )


def hrt_system(
    tool: Any,
    derived: Mapping[str, Mapping[str, frozenset[str]]],
    config: EvalConfig,
    depth: int | None,
    weights: Weights | None,
    traced: Traced | None = None,
) -> System:
    """HRT's own retrieval: memory units for recall, memory units and artifacts merged by score for
    the artifact-credited recall; with ``traced``, the memory units it scored (candidate recall)."""

    async def run(q: Question) -> Ranking:
        if traced is not None:
            tool.trace = traced
        try:
            ctx = await tool.retrieve(request_for(q, config, depth, weights))
        finally:
            tool.trace = None
        mus = [m.muid for m in ctx.retrieved_memory_units]
        items = [(-m.final_retrieval_score, m.muid) for m in ctx.retrieved_memory_units]
        items += [(-a.final_retrieval_score, a.id) for a in ctx.retrieved_artifacts]
        table = derived.get(q.user_id, {})
        mixed = [table.get(i, frozenset([i])) for _, i in sorted(items)]
        return Ranking(mus, mixed, traced.last if traced is not None else None)

    return run


_EXPANSION = "run_expansion"  # the stage function hrt.pipeline calls, swapped by the prototype below


async def path_sum_expansion(
    intake: Intake, grounding: Grounding, graph: GraphStore, settings: Settings
) -> list[GraphCandidate]:
    """EXPERIMENTAL, eval only (``--experimental-path-sum``): Proposal B's path part, in place of
    :func:`hrt.pipeline.expansion.run_expansion` for one run.

    The candidates are those of the pipeline's own expansion; each one's ``path_score`` becomes the
    noisy-or ``1 - (1 - direct) x prod over seeds (1 - best path from that seed)`` of its direct
    evidence (grounding) and the best path from every seed that reaches it over at least one hop, so
    a turn that two matching observations cite, or that matches itself and is cited, outranks one
    with a single piece of evidence. Scoring's ``max(direct, path)`` then reads that sum. The
    pipeline cannot do this yet: ``GraphStore.expand`` returns each node's best path only, and this
    prototype asks the graph once per seed (the architecture wants one call): the walk in
    ``hrt/stores/graph_walk.py`` would have to accumulate the sum itself.
    """
    from hrt.pipeline.expansion import run_expansion

    candidates = await run_expansion(intake, grounding, graph, settings)
    if intake.depth == 0 or not candidates:
        return candidates
    caps = ExpansionCaps(
        depth=intake.depth,
        fanout_per_node=settings.fanout_per_node,
        max_per_kind=settings.max_candidates_per_kind,
        hop_decay=settings.hop_decay,
    )
    not_after = intake.as_of.timestamp()
    reached: dict[str, list[float]] = defaultdict(list)
    for seed_id, score in sorted(grounding.seeds.items()):
        for c in await graph.expand(intake.user_id, {seed_id: score}, caps, not_after=not_after):
            if c.hops > 0:
                reached[c.node.id].append(c.path_score)
    out: list[GraphCandidate] = []
    for c in candidates:
        evidence = [grounding.similarity.get(c.node.id, 0.0), *reached.get(c.node.id, ())]
        miss = math.prod(1.0 - min(1.0, max(0.0, e)) for e in evidence)
        out.append(replace(c, path_score=max(c.path_score, 1.0 - miss)))
    return out


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class EvalResult:
    systems: dict[str, dict[str, dict[str, float]]]  # system -> group -> metric -> value
    per_question: list[dict[str, Any]]
    meta: dict[str, Any]


def load_samples(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    samples = data if isinstance(data, list) else [data]
    return [s for s in samples if isinstance(s, dict) and isinstance(s.get("conversation"), dict)]


async def evaluate(
    samples: Sequence[Mapping[str, Any]],
    embedder: Embedder,
    db_path: Path,
    *,
    config: EvalConfig | None = None,
    import_options: ImportOptions | None = None,
    systems: Sequence[str] = SYSTEMS,
    limit_questions: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> EvalResult:
    """Import every sample into a fresh embedded store at ``db_path``, ask every question of every
    system (all on that one store and ``embedder``), and aggregate the metrics."""
    from hrt.service import HRTService

    cfg = config or EvalConfig()
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    imported = [import_conversation(s, import_options) for s in samples]
    questions: list[Question] = []
    skipped = 0
    for sample, conv in zip(samples, imported, strict=True):
        qs, n_skipped = build_questions(sample, conv)
        questions.extend(qs)
        skipped += n_skipped
    if limit_questions is not None:
        questions = questions[:limit_questions]
    phrases = sorted({p for q in questions for p in (q.text, *q.key_phrases(cfg.phrases))})
    overrides: dict[str, Any] = {"db_path": db_path, "embedding_cache_size": max(4096, len(phrases) + 1024)}
    overrides.update(cfg.settings)
    settings = Settings(**overrides)
    service = HRTService(settings, embedder=_cached(embedder, settings))
    await service.start()
    import hrt.pipeline as pipeline

    original_expansion = getattr(pipeline, _EXPANSION)
    if cfg.experimental_path_sum:  # swapped for this run only, restored below
        setattr(pipeline, _EXPANSION, path_sum_expansion)
    try:
        t_import = time.perf_counter()
        for conv in imported:
            say(f"import {conv.sample_id}: {conv.counts}")
            await service.ingest(conv.records)
        import_seconds = time.perf_counter() - t_import
        service.embedder.embed(phrases)  # one batch; every request below hits the cache
        derived = {c.user_id: c.derived_from for c in imported}
        baselines = baseline_systems(service, derived, cfg.top_k)
        traced = Traced()
        runners: dict[str, System] = {}
        for name in systems:
            if name in baselines:
                runners[name] = baselines[name]
            elif name in HRT_SYSTEMS:
                depth, semantic_weights, own_settings = HRT_SYSTEMS[name]
                if name in ("hrt", "hrt-unweighted") and cfg.depth is not None:
                    depth = cfg.depth
                tool = service.tool if not own_settings else _tool(service, settings.model_copy(update=own_settings))
                weights = cfg.weights if semantic_weights else None
                runners[name] = hrt_system(tool, derived, cfg, depth, weights, traced)
            else:
                raise ValueError(f"unknown system {name!r}; one of {', '.join(SYSTEMS)}")
        rows: dict[str, list[tuple[int, dict[str, float]]]] = {n: [] for n in runners}
        seconds: dict[str, float] = dict.fromkeys(runners, 0.0)
        per_question: list[dict[str, Any]] = []
        for qi, q in enumerate(questions):
            entry: dict[str, Any] = {
                "sample_id": q.sample_id,
                "qa_index": q.index,
                "category": q.category,
                "evidence": sorted(q.evidence),
                "systems": {},
            }
            for name, runner in runners.items():
                start = time.perf_counter()
                ranking = await runner(q)
                seconds[name] += time.perf_counter() - start
                metrics = question_metrics(ranking, q.evidence)
                rows[name].append((q.category, metrics))
                entry["systems"][name] = {
                    "evidence_ranks": [r for r, m in enumerate(ranking.memory_units, start=1) if m in q.evidence],
                    **{m: round(metrics[m], 4) for m in PER_QUESTION_METRICS},
                }
            per_question.append(entry)
            if (qi + 1) % 100 == 0:
                say(f"{qi + 1}/{len(questions)} questions")
        meta = {
            "conversations": [c.sample_id for c in imported],
            "import_counts": {c.sample_id: c.counts for c in imported},
            "questions": len(questions),
            "questions_skipped_without_evidence": skipped,
            "embedder": getattr(embedder, "name", type(embedder).__name__),
            "config": cfg.as_json(),
            "hrt_systems": {n: _system_json(n, cfg, settings) for n in runners if n in HRT_SYSTEMS},
            "config_hash": settings.fingerprint(),
            "import_options": _options_json(import_options or ImportOptions()),
            "seconds": {
                "import": round(import_seconds, 2),
                "total": round(time.perf_counter() - t0, 2),
                **{f"queries:{n}": round(s, 2) for n, s in seconds.items()},
            },
            "ms_per_question": {n: round(1000 * s / max(1, len(questions)), 2) for n, s in seconds.items()},
        }
        return EvalResult({name: aggregate(rows[name]) for name in runners}, per_question, meta)
    finally:
        setattr(pipeline, _EXPANSION, original_expansion)
        await service.close()


def _system_json(name: str, cfg: EvalConfig, settings: Settings) -> dict[str, Any]:
    """What an HRT system of the run was asked with: depth, weights, Settings overrides, hash."""
    depth, semantic_weights, own = HRT_SYSTEMS[name]
    if name in ("hrt", "hrt-unweighted") and cfg.depth is not None:
        depth = cfg.depth
    overrides = {**cfg.settings, **own}
    return {
        "max_depth": depth if depth is not None else f"HRT_DEFAULT_DEPTH ({settings.default_depth})",
        "weights": "semantic only (EVAL_WEIGHTS)" if semantic_weights else "HRT_WEIGHTS (the default weights)",
        "settings_overrides": {k: _jsonable(v) for k, v in sorted(overrides.items())},
        "config_hash": settings.model_copy(update=dict(own)).fingerprint(),
    }


PER_QUESTION_METRICS = ("recall@5", "recall@10", "recall@25", "ndcg@10", "mrr", "recall@10+artifacts", "candidates")


def _cached(embedder: Embedder, settings: Settings) -> Embedder:
    if isinstance(embedder, CachedEmbedder):
        return embedder
    return CachedEmbedder(embedder, settings.embedding_cache_size)


def _options_json(options: ImportOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in ImportOptions.__dataclass_fields__}


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------


def _groups(result: EvalResult) -> list[str]:
    first = next(iter(result.systems.values()), {})
    return list(first)


def _group_label(group: str) -> str:
    if group.isdigit():
        return CATEGORY_NAMES.get(int(group), f"category {group}")
    return "overall (1-4)" if group == OVERALL else "all (1-5)"


def _cell(summary: Mapping[str, float] | None, metric: str) -> str:
    return f"{summary[metric]:.1f}" if summary else "–"


def markdown_report(result: EvalResult) -> str:
    """Every metric over categories 1-4 (adversarial beside it), then recall@10 per category."""
    lines = [
        "| system | R@5 | R@10 | R@25 | nDCG@10 | MRR | R@10 +artifacts | candidates | adversarial R@10 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, per_group in result.systems.items():
        o = per_group.get(OVERALL)
        metrics = ("recall@5", "recall@10", "recall@25", "ndcg@10", "mrr", "recall@10+artifacts", "candidates")
        cells = [_cell(o, m) for m in metrics]
        cells.append(_cell(per_group.get("5"), "recall@10"))
        label = SYSTEM_LABELS.get(name, name)
        lines.append(f"| {'**' + label + '**' if name == 'hrt' else label} | " + " | ".join(cells) + " |")
    d = PAPER_DRAGON
    lines.append(
        f"| *LoCoMo paper, DRAGON, dialogs as database (all ten conversations)* | *{d['recall@5']}* | "
        f"*{d['recall@10']}* | *{d['recall@25']}* | | | | | |"
    )
    groups = _groups(result)
    first = next(iter(result.systems.values()), {})
    lines += ["", "Recall@10 per category (questions in brackets):", ""]
    lines.append("| system | " + " | ".join(f"{_group_label(g)} ({int(first[g]['n'])})" for g in groups) + " |")
    lines.append("|---|" + "---:|" * len(groups))
    for name, per_group in result.systems.items():
        lines.append(
            f"| {SYSTEM_LABELS.get(name, name)} | "
            + " | ".join(_cell(per_group.get(g), "recall@10") for g in groups)
            + " |"
        )
    lines += [
        "",
        "Candidate recall per category: evidence turns the system considered at all, at any rank "
        "(HRT: the memory units it scored; a baseline: its search hits):",
        "",
    ]
    lines.append("| system | " + " | ".join(_group_label(g) for g in groups) + " |")
    lines.append("|---|" + "---:|" * len(groups))
    for name, per_group in result.systems.items():
        lines.append(
            f"| {SYSTEM_LABELS.get(name, name)} | "
            + " | ".join(_cell(per_group.get(g), "candidates") for g in groups)
            + " |"
        )
    return "\n".join(lines) + "\n"


def write_chart(result: EvalResult, path: Path) -> bool:
    """Recall@10 per category and system as grouped bars, the paper's DRAGON overall as a line.
    Needs matplotlib (optional); returns False when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no chart (pip install matplotlib)")
        return False
    groups = _groups(result)
    names = list(result.systems)
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(12, 5))
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(groups))]
        ys = [result.systems[name][g]["recall@10"] for g in groups]
        ax.bar(xs, ys, width, label=SYSTEM_LABELS.get(name, name))
    ax.axhline(PAPER_DRAGON["recall@10"], color="black", linestyle="--", linewidth=1, label="paper: DRAGON overall")
    ax.set_xticks(range(len(groups)), [_group_label(g) for g in groups])
    ax.set_ylabel("evidence recall@10 (%)")
    ax.set_ylim(0, 100)
    ax.set_title("LoCoMo evidence retrieval, recall@10 (dev conversations)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=4, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)
    return True


def write_outputs(result: EvalResult, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out / "locomo-results.md",
        "json": out / "locomo-results.json",
        "questions": out / "locomo-questions.jsonl",
        "chart": out / "locomo-recall.png",
    }
    paths["markdown"].write_text(markdown_report(result), encoding="utf-8")
    body = {"meta": result.meta, "systems": result.systems, "paper_dragon": PAPER_DRAGON}
    paths["json"].write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    with paths["questions"].open("w", encoding="utf-8") as fh:
        for entry in result.per_question:
            fh.write(json.dumps(entry, sort_keys=True) + "\n")
    if not write_chart(result, paths["chart"]):
        paths.pop("chart")
    return paths


# ---------------------------------------------------------------------------------------------
# Paired bootstrap (how two runs, or two systems of one run, differ beyond noise)
# ---------------------------------------------------------------------------------------------

BOOTSTRAP_SEED = 20261125


def paired_bootstrap(
    before: Sequence[float], after: Sequence[float], resamples: int = 2000, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float, float, int, int]:
    """Mean of ``after - before`` over paired questions, its 95% percentile interval over
    ``resamples`` resamples of the questions (seeded: the same inputs give the same interval),
    and how many questions got better and worse. As percentages."""
    import random

    diffs = [b - a for a, b in zip(before, after, strict=True)]
    if not diffs:
        return 0.0, 0.0, 0.0, 0, 0
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    lo, hi = means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples) - 1)]
    better = sum(1 for d in diffs if d > 1e-12)
    worse = sum(1 for d in diffs if d < -1e-12)
    return 100.0 * sum(diffs) / n, 100.0 * lo, 100.0 * hi, better, worse


def _per_question(spec: str) -> tuple[dict[str, dict[str, Any]], str | None]:
    """``DIR``, ``DIR:SYSTEM``, ``FILE`` or ``FILE:SYSTEM`` -> (question key -> entry, system)."""
    path, system = Path(spec), None
    if not path.exists() and ":" in spec:
        head, _, system = spec.rpartition(":")
        path = Path(head)
    if path.is_dir():
        path = path / "locomo-questions.jsonl"
    entries: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            e = json.loads(line)
            entries[f"{e['sample_id']}/{e['qa_index']}"] = e
    return entries, system


COMPARED = ("recall@10", "recall@5", "ndcg@10", "recall@10+artifacts", "candidates")


def compare_report(before_spec: str, after_spec: str, metrics: Sequence[str] = COMPARED) -> str:
    """A markdown table: per system pair, per metric, after minus before over categories 1-4
    (adversarial apart), with the paired bootstrap's 95% interval and the questions better / worse."""
    before, sys_a = _per_question(before_spec)
    after, sys_b = _per_question(after_spec)
    keys = sorted(set(before) & set(after))
    if sys_a or sys_b:
        pairs = [(sys_a or sys_b or "", sys_b or sys_a or "")]
    else:
        first: dict[str, Any] = next(iter(before.values()), {"systems": {}})["systems"]
        second: dict[str, Any] = next(iter(after.values()), {"systems": {}})["systems"]
        pairs = [(n, n) for n in first if n in second]
    lines = [
        f"Paired bootstrap, {len(keys)} questions in both; after ({after_spec}) minus before ({before_spec}), "
        "95% intervals over 2,000 resamples:",
        "",
        "| systems | metric | questions | difference | 95% interval | better / worse |",
        "|---|---|---:|---:|---|---|",
    ]
    for a, b in pairs:
        for group, cats in (("overall (1-4)", {1, 2, 3, 4}), ("multi-hop", {1}), ("adversarial", {5})):
            ks = [k for k in keys if before[k]["category"] in cats and a in before[k]["systems"]]
            ks = [k for k in ks if b in after[k]["systems"]]
            for m in metrics if group == "overall (1-4)" else ("recall@10",):
                if not ks or m not in before[ks[0]]["systems"][a] or m not in after[ks[0]]["systems"][b]:
                    continue
                mean, lo, hi, better, worse = paired_bootstrap(
                    [before[k]["systems"][a][m] for k in ks], [after[k]["systems"][b][m] for k in ks]
                )
                label = a if a == b else f"{a} -> {b}"
                lines.append(
                    f"| {label} | {m} {group} | {len(ks)} | {mean:+.2f} | [{lo:+.2f}, {hi:+.2f}] | {better} / {worse} |"
                )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def _setting(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or key not in Settings.model_fields:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME a Settings field, got {text!r}")
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a LoCoMo JSON file (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("eval-results/locomo"), help="output directory")
    parser.add_argument("--db", type=Path, default=None, help="the embedded store to build (default: a temp file)")
    parser.add_argument("--limit-questions", type=int, default=None, help="only the first N questions (quick runs)")
    parser.add_argument("--conversations", nargs="*", default=None, help="only these sample_ids")
    parser.add_argument("--systems", nargs="*", default=list(DEFAULT_SYSTEMS), choices=SYSTEMS, help="systems to run")
    parser.add_argument(
        "--depth",
        type=int,
        default=None,
        help="max_depth of the two headline rows (default: none, HRT_DEFAULT_DEPTH decides)",
    )
    parser.add_argument(
        "--phrases", default=EvalConfig().phrases, choices=PHRASE_MODES, help="key phrases per question (%(default)s)"
    )
    parser.add_argument(
        "--setting",
        type=_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Settings override for every HRT system, repeatable (default: none, the product's defaults)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("BEFORE", "AFTER"),
        default=None,
        help="no run: paired bootstrap of two runs' locomo-questions.jsonl (DIR or DIR:SYSTEM, or FILE:SYSTEM), "
        "after minus before, for every system both hold (or the two named)",
    )
    parser.add_argument(
        "--experimental-path-sum",
        action="store_true",
        help="EXPERIMENTAL: a candidate's path evidence is the noisy-or of its direct evidence and every seed's "
        "best path to it, instead of the best path (Proposal B, prototyped here with one graph call per seed)",
    )


def run(args: argparse.Namespace, embedder: Embedder | None = None) -> int:
    """Run the evaluation the parsed arguments describe; ``embedder`` defaults to the configured
    model (``HRT_EMBEDDING_MODEL``, the bundled all-MiniLM-L6-v2)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.compare:
        sys.stdout.write(compare_report(*args.compare))
        return 0
    if not args.data.exists():
        log.error("%s not found (LoCoMo data is read at run time; see LOCOMO-NOTICE.md)", args.data)
        return 2
    samples = load_samples(args.data)
    if args.conversations:
        samples = [s for s in samples if str(s.get("sample_id")) in set(args.conversations)]
    if not samples:
        log.error("no conversation to evaluate in %s", args.data)
        return 2
    if embedder is None:
        from hrt.service import load_embedder

        embedder = load_embedder(Settings())
    config = EvalConfig(
        depth=args.depth,
        phrases=args.phrases,
        settings={**EVAL_SETTINGS, **dict(args.setting)},
        experimental_path_sum=args.experimental_path_sum,
    )
    with tempfile.TemporaryDirectory(prefix="hrt-locomo-") as tmp:
        db = args.db or Path(tmp) / "locomo.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        result = asyncio.run(
            evaluate(
                samples,
                embedder,
                db,
                config=config,
                systems=args.systems,
                limit_questions=args.limit_questions,
                progress=log.info,
            )
        )
    result.meta["data"] = {"file": args.data.name, "sha256": hashlib.sha256(args.data.read_bytes()).hexdigest()}
    paths = write_outputs(result, args.out)
    sys.stdout.write(markdown_report(result))
    log.info("wrote %s", ", ".join(str(p) for p in paths.values()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hrt eval locomo", description="Evidence retrieval on LoCoMo: HRT against BM25, dense and hybrid RRF."
    )
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hrt eval locomo``: ``main(["--data", PATH, "--out", DIR, ...])``."""
    return run(build_parser().parse_args(argv))
