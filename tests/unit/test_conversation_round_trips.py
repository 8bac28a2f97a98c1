"""A conversation call reads the user's statistics and records in a bounded number of round trips
to the store, however many keys its messages touch (hrt.extraction.read_ahead): counted on the
real embedded store, each of its read methods wrapped."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hrt.extraction.ids import message_id
from hrt.extraction.messages import ConversationRequest
from hrt.service import HRTService
from tests.unit.test_conversations import calls, service

READS = ("state_get", "state_scan", "state_read", "get_many")
# what one call of 4 messages may take, whatever it touches (13 and 12 here; one read a key made
# 103 and 998)
BOUND = 20

FIRST = "Alba Bruno Cora Dario Elsa Fabio Greta Hugo Irene Jonas Kira Luca Mara Nico Olga Pablo Rita Sergio Tea Ugo"
LAST = "Vance Walsh Xu Young Zed Abbot Baker Carver Dunn Ellis Frost Grant Hale Irwin Joyce Keane Lowe Marsh Nash Orr"


def counting(svc: HRTService, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The record store's reads, counted as they reach it."""
    counts: Counter[str] = Counter()
    store = svc.records
    for name in READS:
        real = getattr(store, name)

        def wrapper(*args: Any, _real: Any = real, _name: str = name) -> Any:
            counts[_name] += 1
            return _real(*args)

        monkeypatch.setattr(store, name, wrapper)
    return counts


def crowded(n: int, session: str, first: int) -> ConversationRequest:
    """4 messages naming ``n`` people each (first and last names, and topics beside them)."""
    names = [f"{a} {b}" for a in FIRST.split() for b in LAST.split()]
    messages = []
    for i in range(4):
        said = " and ".join(names[(first + i) * n : (first + i + 1) * n])
        messages.append(
            {
                "name": "Maya" if i % 2 == 0 else "Tom",
                "content": f"At the pottery fair we met {said}. The kiln workshop and glazing class were lovely.",
                "timestamp": f"2026-05-01T10:{first + i:02d}:00Z",
            }
        )
    return ConversationRequest.model_validate({"user_id": "u1", "session_id": session, "messages": messages})


async def keys_of(svc: HRTService, request: ConversationRequest, positions: list[int]) -> int:
    rows = await svc.records.state_get("u1", "msg", [message_id(request.session_id, p) for p in positions])
    return len({k for raw in rows.values() for k in json.loads(raw)["keys"]})


async def test_a_call_reads_in_a_bounded_number_of_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    svc = await service(tmp_path / "e.db")
    try:
        for c in calls():
            await svc.add_messages(c)
        counts = counting(svc, monkeypatch)
        taken = []
        for n, first in ((1, 0), (40, 4)):
            counts.clear()
            request = crowded(n, "crowd", first)
            result = await svc.add_messages(request)
            assert {m.status for m in result.messages} == {"added"}
            taken.append((sum(counts.values()), await keys_of(svc, request, [m.index for m in result.messages])))
        (few_reads, few_keys), (many_reads, many_keys) = taken
        assert many_keys >= 10 * few_keys and many_keys > 150  # the second call touches far more keys
        assert few_reads <= BOUND and many_reads <= BOUND, taken
    finally:
        await svc.close()
