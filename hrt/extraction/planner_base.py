"""What one conversation call plans (:class:`Plan`), the message helpers every rule shares, and
the planner's state (:class:`PlannerBase`): the request, the statistics, and what the call has
written so far. The rules build on it: the reads ahead (:mod:`hrt.extraction.read_ahead`),
concepts and links (:mod:`hrt.extraction.linking`), then messages
(:mod:`hrt.extraction.conversation`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from hrt.extraction.llm_call import LLMCall
from hrt.extraction.messages import ConversationRequest, Message, MessageResult
from hrt.extraction.statistics import ExtractionOptions, State, StateStore, _dump
from hrt.extraction.superseding import ChangeFinder
from hrt.ingest import Record
from hrt.records import Concept, Relation, iso, utc


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


class PlannerBase:
    """One call's plan under way: its request, the statistics as committed, what it wrote."""

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
