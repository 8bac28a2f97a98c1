"""The per-user statistics the conversation rules keep (:mod:`hrt.extraction.conversation` lists
the rows): the rules' constants (:class:`ExtractionOptions`) and the rows as read from the store
with one call's writes on top (:class:`State`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hrt.extraction.rules import allowance
from hrt.records import Entity, Kind

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
