"""Stable, valid ids for what extraction makes: concepts by key, messages by session and position."""

from __future__ import annotations

import hashlib
import re

from hrt.records import valid_id


def slug(text: str, max_len: int = 60) -> str:
    s = re.sub(r"[^A-Za-z0-9_.:@-]+", "-", text.strip().lower()).strip("-._:@")
    return s[:max_len].rstrip("-._:@") or "x"


def entity_id(prefix: str, key: str) -> str:
    """A valid, stable id for a concept key (hashed when the key does not fit the id pattern)."""
    candidate = f"{prefix}:{slug(key)}"
    if slug(key) == key.replace(" ", "-") and valid_id(candidate):
        return candidate
    return f"{prefix}:{slug(key, 40)}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def message_id(session_id: str, position: int) -> str:
    """A message's memory unit id: its session (readable part and a hash, so two sessions never
    share one) and its position in the session."""
    digest = hashlib.sha256(session_id.encode()).hexdigest()[:10]
    return f"msg:{slug(session_id, 40)}-{digest}:{position}"
