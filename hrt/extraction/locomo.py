"""LoCoMo's JSON format: sessions, turns, their dates and the evidence's dialog ids.

The data is read at run time only (:func:`load_samples`); nothing of it is stored in this repository.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hrt.extraction.ids import slug
from hrt.records import valid_id

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


def load_samples(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    samples = data if isinstance(data, list) else [data]
    return [s for s in samples if isinstance(s, dict) and isinstance(s.get("conversation"), dict)]


def user_id_for(sample_id: str) -> str:
    uid = f"locomo-{slug(sample_id, 100)}"
    return uid if valid_id(uid) else "locomo-" + hashlib.sha1(sample_id.encode()).hexdigest()[:16]
