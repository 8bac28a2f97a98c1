"""The per-user statistics the conversation rules keep (:mod:`hrt.extraction.conversation` lists
the rows): the rules' constants (:class:`ExtractionOptions`) and the rows as read from the store
with one call's writes on top (:class:`State`)."""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
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

    async def state_read(
        self, user_id: str, keys: Mapping[str, Sequence[str]], prefixes: Mapping[str, Sequence[str]]
    ) -> dict[str, dict[str, str]]: ...


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class State:
    """The user's statistics as read from the store, with this call's writes on top, and the
    user's records as read this call. Rows and records are read once a call: a planner reads what
    it will need ahead, in one round trip each time (:meth:`prefetch`, :meth:`prefetch_entities`),
    and every later read of them is answered here."""

    def __init__(self, store: StateStore, user_id: str) -> None:
        self.store = store
        self.user_id = user_id
        self.read: dict[tuple[str, str], str | None] = {}
        self.writes: dict[str, dict[str, Any]] = {}  # ns -> key -> value (None: deleted)
        self._scans: dict[tuple[str, str], dict[str, str]] = {}  # (ns, prefix) -> rows, in key order
        self._decoded: dict[tuple[str, str], dict[str, Any]] = {}  # the same, decoded once
        self._written: dict[str, list[str]] = {}  # ns -> its written keys in order (made when scanned)
        self._entities: dict[tuple[Kind, str], Entity | None] = {}

    async def prefetch(
        self, keys: Mapping[str, Iterable[str]], prefixes: Mapping[str, Iterable[str]] | None = None
    ) -> None:
        """Read ahead, in one round trip, the rows of ``keys`` and the scans of ``prefixes`` (by
        namespace) not read yet; a key under a prefix read is known (stored or absent) too."""
        wanted = {ns: sorted({k for k in ks if (ns, k) not in self.read}) for ns, ks in keys.items()}
        wanted = {ns: ks for ns, ks in wanted.items() if ks}
        scans = {ns: sorted({p for p in ps if (ns, p) not in self._scans}) for ns, ps in (prefixes or {}).items()}
        scans = {ns: ps for ns, ps in scans.items() if ps}
        if not wanted and not scans:
            return
        found = await self.store.state_read(self.user_id, wanted, scans)
        for ns, ks in wanted.items():
            rows = found.get(ns, {})
            for k in ks:
                self.read[(ns, k)] = rows.get(k)
        for ns, ps in scans.items():
            rows = found.get(ns, {})
            ordered = sorted(rows)
            for prefix in ps:
                # the store's range: from the prefix up to the prefix and the last code point
                at, end = bisect_left(ordered, prefix), prefix + "\U0010ffff"
                under: dict[str, str] = {}
                while at < len(ordered) and ordered[at] < end:
                    under[ordered[at]] = rows[ordered[at]]
                    at += 1
                self._scans[(ns, prefix)] = under
                for k, v in under.items():
                    self.read.setdefault((ns, k), v)

    async def prefetch_entities(self, kind: Kind, ids: Iterable[str]) -> None:
        """Read ahead the user's records of ``kind`` among ``ids`` not read yet, in one round trip."""
        missing = sorted({i for i in ids if (kind, i) not in self._entities})
        if missing:
            found = await self.store.get_many(self.user_id, kind, missing)
            for i in missing:
                self._entities[(kind, i)] = found.get(i)

    async def entities(self, kind: Kind, ids: Sequence[str]) -> dict[str, Entity]:
        """The user's records of ``kind`` among ``ids``, as stored when first read this call."""
        await self.prefetch_entities(kind, ids)
        return {i: e for i in ids if (e := self._entities[(kind, i)]) is not None}

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
        """The rows of ``ns`` whose key starts with ``prefix``, in key order, this call's writes on
        top. Read once a call and decoded once: the namespaces scanned hold scalars (counts,
        names, marks), which no caller changes in place."""
        if (ns, prefix) not in self._scans:
            self._scans[(ns, prefix)] = await self.store.state_scan(self.user_id, ns, prefix)
        decoded = self._decoded.get((ns, prefix))
        if decoded is None:
            rows = self._scans[(ns, prefix)]
            decoded = self._decoded[(ns, prefix)] = {k: json.loads(rows[k]) for k in sorted(rows)}
        written = self.writes.get(ns, {})
        ordered = self._written.get(ns)
        if ordered is None:
            ordered = self._written[ns] = sorted(written)
        at = bisect_left(ordered, prefix)
        if at == len(ordered) or not ordered[at].startswith(prefix):
            return dict(decoded)
        out = dict(decoded)
        while at < len(ordered) and ordered[at].startswith(prefix):
            k = ordered[at]
            if written[k] is None:
                out.pop(k, None)
            else:
                out[k] = written[k]
            at += 1
        return dict(sorted(out.items()))

    def put(self, ns: str, key: str, value: Any) -> None:
        written = self.writes.setdefault(ns, {})
        if key not in written:
            self._written.pop(ns, None)
        written[key] = value

    async def row_delta(self) -> int:
        """Rows this call's writes add to the user's statistics, less those they delete (the
        ``meta`` row aside): one read for every row written without being read."""
        await self.prefetch({ns: list(values) for ns, values in self.writes.items() if ns != "meta"})
        delta = 0
        for ns, values in self.writes.items():
            if ns == "meta":
                continue
            for k, v in values.items():
                existed = self.read[(ns, k)] is not None
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
