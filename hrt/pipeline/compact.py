"""The compact rendering (``render: {"format": "compact"}``): the context as an LLM's prompt needs it.

What the agent's second LLM call reads, and nothing else: no ids, no scores, no provenance. A
header line (the ``as_of`` date, the ``valid_at`` one when it differs, the key phrases nothing
matched), then one line per returned item in score order (ties: memory units, concepts,
artifacts, then id):

- a memory unit: ``- [2025-07-16] text``, with the time (``14:05``, or ``14:05:09`` when two of
  the day share the minute) when several returned memory units share the day, its title before
  the text when it has one the text does not start with;
- a concept: ``- Name (type): description Properties: key: value; ...`` (its status when not
  ``active``). A concept with no description and no properties whose name an included memory
  unit's text already holds adds nothing: it is left out and counted (``redundant``);
- an artifact: ``- [2025-12-04, retrospective] title: text``. A message's note (``note``, the
  rules' restatement of it: hrt/extraction/notes.py) whose message is shown adds nothing either:
  left out and counted the same way;
- an item not true at ``valid_at`` (returned with ``include_invalidated``): ``(no longer true
  since DATE)`` (or ``(not true until DATE)``) before its text; one whose end is known,
  ``(true until DATE)``.

Each item's text is at most ``max_item_chars`` characters (600 by default), else cut at a word
and ended with `` …`` (``shortened``). Packing is greedy in score order as for the other formats:
the first item that does not fit is cut to the room left (ending in `` …``), later ones are left
out. A last line counts what is not shown: items over the budget, the rest of the shortened
items, concepts already named. A pure function of the response and its entities: byte-identical
for the same request.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from hrt.contract import AugmentedMemoryContext, RetrievedMemoryUnit
from hrt.records import NOTE_ARTIFACT_TYPE, Artifact, Concept, Entity, MemoryUnit, note_id

ELLIPSIS = " …"
KIND_ORDER = {"memory_unit": 0, "concept": 1, "artifact": 2}
MIN_CUT_CHARS = 20  # an item cut to fit the budget keeps at least this much of its text


@dataclass(frozen=True, slots=True)
class Line:
    item_id: str
    kind: str
    score: float
    prefix: str  # "- [2025-07-16] ", a concept's name and type, ...: never cut
    text: str  # the item's text, already within the item cap
    shortened: bool  # the item cap cut it
    name: str | None = None  # a concept with nothing but its name (and type): its name
    source: str | None = None  # a message's note (artifact_type note): the message's id

    def covered(self, texts: Sequence[str], ids: set[str]) -> bool:
        """Whether what is shown says this item already: a bare concept whose name ``texts``
        hold, or a note whose message is among ``ids``."""
        if self.name is not None:
            return names_in(self.name, texts)
        return self.source is not None and self.source in ids

    def render(self) -> str:
        return f"{self.prefix}{self.text}\n"


def one_line(text: str) -> str:
    return " ".join(text.split())


def cap_text(text: str, limit: int) -> tuple[str, bool]:
    """``text`` on one line, at most ``limit`` characters: cut at a word and ended with the
    ellipsis when longer (True: it was cut)."""
    text = one_line(text)
    if len(text) <= limit:
        return text, False
    room = limit - len(ELLIPSIS)
    cut = text[:room]
    space = cut.rfind(" ")
    if space > room // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + ELLIPSIS, True


def day_stamps(mus: Sequence[RetrievedMemoryUnit]) -> dict[str, str]:
    """Each memory unit's stamp: its date, with the time when another returned memory unit shares
    the day (to the second when two of the day share the minute)."""
    by_day: dict[str, list[RetrievedMemoryUnit]] = defaultdict(list)
    for mu in mus:
        by_day[mu.creation_ts[:10]].append(mu)
    stamps: dict[str, str] = {}
    for day, group in by_day.items():
        minutes = [mu.creation_ts[11:16] for mu in group]
        end = 16 if len(set(minutes)) == len(minutes) else 19
        for mu in group:
            stamps[mu.muid] = day if len(group) == 1 else f"{day} {mu.creation_ts[11:end]}"
    return stamps


def validity_mark(doc: AugmentedMemoryContext, item_id: str) -> str:
    """``(no longer true since DATE) `` for an item not true at ``valid_at``; ``(true until DATE) ``
    for one whose end is known; nothing for the rest."""
    v = doc.retrieval_metadata.validity.intervals.get(item_id)
    if v is None:
        return ""
    at = datetime.fromisoformat(doc.retrieval_metadata.validity.valid_at)
    if v.valid:
        return f"(true until {v.valid_to[:10]}) " if v.valid_to else ""
    if v.valid_to is not None and datetime.fromisoformat(v.valid_to) <= at:
        return f"(no longer true since {v.valid_to[:10]}) "
    if v.valid_from is not None and datetime.fromisoformat(v.valid_from) > at:
        return f"(not true until {v.valid_from[:10]}) "
    return "(no longer true) "


def _titled(title: str, text: str) -> str:
    title = one_line(title)
    return f"{title}: {text}" if title and not text.startswith(title) else text


def lines_of(doc: AugmentedMemoryContext, entities: Mapping[str, Entity], cap: int) -> list[Line]:
    """One line per returned item, best score first (ties: kind, then id)."""
    out: list[Line] = []
    stamps = day_stamps(doc.retrieved_memory_units)
    for mu in doc.retrieved_memory_units:
        e = entities.get(mu.muid)
        text, cut = cap_text(_titled(mu.title, e.content if isinstance(e, MemoryUnit) else mu.content_snippet), cap)
        prefix = f"- [{stamps[mu.muid]}] {validity_mark(doc, mu.muid)}"
        out.append(Line(mu.muid, "memory_unit", mu.final_retrieval_score, prefix, text, cut))
    for c in doc.retrieved_concepts:
        e = entities.get(c.id)
        description = one_line(e.description if isinstance(e, Concept) else c.description_snippet)
        properties = "; ".join(f"{k}: {one_line(str(v))}" for k, v in c.key_properties_values.items())
        body = " ".join(x for x in (description, f"Properties: {properties}." if properties else "") if x)
        text, cut = cap_text(body, cap)
        what = c.type if c.status == "active" else f"{c.type}, {c.status}"
        mark = validity_mark(doc, c.id)
        prefix = f"- {mark}{one_line(c.name)} ({what})" + (": " if text else "")
        bare = not text and not mark
        out.append(Line(c.id, "concept", c.final_retrieval_score, prefix, text, cut, c.name if bare else None))
    noted = {note_id(mu.muid): mu.muid for mu in doc.retrieved_memory_units}
    for a in doc.retrieved_artifacts:
        e = entities.get(a.id)
        kind = a.artifact_type.replace("_", " ")
        title = a.title if a.title != a.artifact_type else ""
        text, cut = cap_text(_titled(title, e.content if isinstance(e, Artifact) else a.content_snippet), cap)
        prefix = f"- [{a.created_at[:10]}, {kind}] {validity_mark(doc, a.id)}"
        source = noted.get(a.id) if a.artifact_type == NOTE_ARTIFACT_TYPE else None
        out.append(Line(a.id, "artifact", a.final_retrieval_score, prefix, text, cut, None, source))
    out.sort(key=lambda x: (-x.score, KIND_ORDER[x.kind], x.item_id))
    return out


def header(doc: AugmentedMemoryContext) -> str:
    meta = doc.retrieval_metadata
    when = f"as of {meta.as_of[:10]}"
    if meta.validity.valid_at != meta.as_of:
        when += f", what was true on {meta.validity.valid_at[:10]}"
    lines = [f"Memory context ({when}), best match first."]
    if meta.user_known is False:
        lines.append("Nothing is stored about this user yet.")
    elif doc.unmatched_key_phrases:
        lines.append("Nothing found for: " + ", ".join(f'"{p}"' for p in doc.unmatched_key_phrases) + ".")
    return "\n".join(lines) + "\n"


def footer(left: int, shortened: int, redundant: int, notes: int = 0) -> str:
    """The last line: what is not shown, when anything is not."""
    parts = []
    if left:
        parts.append(f"{left} more item{'s' if left != 1 else ''} over the budget")
    if shortened:
        parts.append(f"the rest of {shortened} long item{'s' if shortened != 1 else ''}")
    if redundant:
        parts.append(f"{redundant} concept{'s' if redundant != 1 else ''} named in the memories above")
    if notes:
        parts.append(f"{notes} note{'s' if notes != 1 else ''} of the messages above")
    return f"(Not shown: {'; '.join(parts)}.)\n" if parts else ""


def cut_line(line: Line, ok: Callable[[str], bool]) -> str | None:
    """The line with the longest prefix of its text, cut at a word and ended with the ellipsis,
    that ``ok`` accepts; None when not even a few words fit."""
    text = line.text
    lo, hi, best = min(MIN_CUT_CHARS, len(text)), len(text) - 1, None
    while lo <= hi:  # binary search on the text's length: a longer prefix never measures less
        mid = (lo + hi) // 2
        space = text.rfind(" ", 0, mid + 1)
        kept = text[: space if space > 0 else mid].rstrip(" ,;:-")
        candidate = f"{line.prefix}{kept}{ELLIPSIS}\n"
        if kept and ok(candidate):
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return best


@dataclass(slots=True)
class Packed:
    """A rendering's text and what it holds (``RenderedContext`` without the budget)."""

    text: str
    included: list[str]
    truncated: str | None
    left_out: list[str]
    shortened: list[str] | None = None  # compact only
    redundant: list[str] | None = None  # compact only


def names_in(name: str, texts: Sequence[str]) -> bool:
    """Whether one of ``texts`` holds ``name`` as words of its own (case ignored)."""
    pattern = re.compile(r"(?<!\w)" + re.escape(one_line(name).casefold()) + r"(?!\w)")
    return any(pattern.search(t.casefold()) for t in texts)


@dataclass(slots=True)
class _Pass:
    parts: list[str]  # the header, then the included lines
    included: list[Line]
    truncated: str | None

    def shown_texts(self) -> list[str]:
        """The included memory units' texts as shown (the one cut to fit the budget aside)."""
        return [x.text for x in self.included if x.kind == "memory_unit" and x.item_id != self.truncated]

    def shown_ids(self) -> set[str]:
        """The included memory units' ids (the one cut to fit the budget aside)."""
        return {x.item_id for x in self.included if x.kind == "memory_unit" and x.item_id != self.truncated}


def _set_aside(skip: Sequence[Line]) -> tuple[int, int]:
    """The concepts and the notes among ``skip``."""
    notes = sum(1 for x in skip if x.source is not None)
    return len(skip) - notes, notes


def _fits_between(fits: Callable[[str], bool], base: str, tail: str, text: str) -> bool:
    return fits(base + text + tail)


def _greedy(head: str, lines: Sequence[Line], fits: Callable[[str], bool], skip: frozenset[str]) -> _Pass:
    """Whole lines in order while they fit (the footer counted); the first that does not is cut to
    the room left, and the rest are left out. ``skip``: the concepts and notes set aside as redundant."""
    todo = [x for x in lines if x.item_id not in skip]
    concepts, notes = _set_aside([x for x in lines if x.item_id in skip])
    done = _Pass([head], [], None)
    shortened = 0
    for i, line in enumerate(todo):
        rest, base = len(todo) - i - 1, "".join(done.parts)
        piece = line.render()
        if fits(base + piece + footer(rest, shortened + line.shortened, concepts, notes)):
            done.parts.append(piece)
            done.included.append(line)
            shortened += line.shortened
            continue
        tail = footer(rest, shortened + 1, concepts, notes)
        cut = cut_line(line, functools.partial(_fits_between, fits, base, tail))
        if cut is not None:
            done.parts.append(cut)
            done.included.append(line)
            done.truncated = line.item_id
        break
    return done


def pack_compact(
    doc: AugmentedMemoryContext, entities: Mapping[str, Entity], item_chars: int, fits: Callable[[str], bool]
) -> Packed:
    """The compact text within the budget ``fits`` checks. The concepts with nothing but a name
    that a returned memory unit names, and the notes of returned messages, are set aside; packed
    again without those whose memory units did not make it in (at most three passes: the set
    only shrinks); any still not covered by what is shown are counted as left out."""
    lines = lines_of(doc, entities, item_chars)
    head = header(doc)
    texts = [x.text for x in lines if x.kind == "memory_unit"]
    ids = {x.item_id for x in lines if x.kind == "memory_unit"}
    skip = frozenset(x.item_id for x in lines if x.covered(texts, ids))
    done = _greedy(head, lines, fits, skip)
    for _ in range(3):
        shown, shown_ids = done.shown_texts(), done.shown_ids()
        kept = frozenset(x.item_id for x in lines if x.item_id in skip and x.covered(shown, shown_ids))
        if kept == skip:
            break
        skip = kept
        done = _greedy(head, lines, fits, skip)
    return _finish(done, lines, [x for x in lines if x.item_id in skip], fits)


def _finish(done: _Pass, lines: Sequence[Line], set_aside: Sequence[Line], fits: Callable[[str], bool]) -> Packed:
    """The footer after the lines, counting as redundant the concepts set aside that what is shown
    names (the others as left out); while the text is over the budget (the header alone nearly
    fills it), the last included lines go."""
    while True:
        shown, shown_ids = done.shown_texts(), done.shown_ids()
        covered = [x for x in set_aside if x.covered(shown, shown_ids)]
        redundant = [x.item_id for x in covered]
        ids = {x.item_id for x in done.included} | set(redundant)
        left_out = [x.item_id for x in lines if x.item_id not in ids]
        shortened = [x.item_id for x in done.included if x.shortened]
        n_short = len(set(shortened) | ({done.truncated} if done.truncated else set()))
        text = "".join(done.parts) + footer(len(left_out), n_short, *_set_aside(covered))
        if fits(text) or not done.included:
            break
        dropped = done.included.pop()
        done.parts.pop()
        done.truncated = None if done.truncated == dropped.item_id else done.truncated
    return Packed(
        text=text,
        included=[x.item_id for x in done.included],
        truncated=done.truncated,
        left_out=left_out,
        shortened=shortened,
        redundant=redundant,
    )
