"""The questions: a sample's qa entries with their evidence turns, and the key phrases of each
question's request (:func:`question_phrases`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hrt.contract import MAX_KEY_PHRASES, MAX_PHRASE_CHARS
from hrt.eval.locomo.importer import ImportedConversation
from hrt.extraction.locomo import evidence_ids
from hrt.extraction.rules import Extraction, extract


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
