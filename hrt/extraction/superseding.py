"""The planner's side of :mod:`hrt.extraction.changes`: which earlier messages a new one ends.

For a message with a cue, the candidates are the messages that mention a key of the cue's clause
(the statistics' postings), those about the same life fact (the ``fam`` rows: family + SEP +
muid), and the conversation's last :data:`~hrt.extraction.changes.RECENT` messages of the session;
only those written before the new one count. Their texts come from this call or the record store
(one batched read, only when a cue fired). What a message ended is kept in its statistics row
(``sup``), so a later revert finds the change it undoes.

The result goes on the new message's memory unit: ``supersedes`` names what it ended (validity
then ends those at its time: hrt/pipeline/validity.py) and ``metadata.changes`` says which rule
fired. A revert ends the change it undoes and restates what that change had ended as a
``restatement`` artifact derived from the reverting message, so today's truth has a current text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hrt.extraction.changes import (
    RECENT,
    Cue,
    Earlier,
    answer_cue,
    echoes,
    families,
    find_cue,
    revert_target,
    subject_keys,
    superseded,
)
from hrt.extraction.ids import message_id
from hrt.records import MAX_SUPERSEDES, Artifact, Kind, MemoryUnit, iso

if TYPE_CHECKING:
    from hrt.extraction.statistics import State

SEP = "\x1f"
# candidates read at the most for one cue, newest first
MAX_CANDIDATES = 64
# a reply of at most this many words may answer a question about a change (:func:`answer_cue`)
ANSWER_WORDS = 6
# the user's last messages kept in the ``tail`` row
TAIL = 2 * RECENT
# a key with more messages than this names no subject (its postings are not read for a cue)
MAX_POSTINGS = 400


@dataclass(slots=True)
class Change:
    """What a message changes: the units it supersedes, its ``metadata.changes``, and a
    restatement (a revert's) to write."""

    supersedes: list[str] = field(default_factory=list)
    meta: dict[str, Any] | None = None
    restatement: Artifact | None = None
    restated: list[str] = field(default_factory=list)  # the muids the restatement derives from
    cued: bool = False  # the message announced a change (whether or not it ended anything)


def inner_text(content: str, speaker: str) -> str:
    """A message's text from its memory unit's content (``unit_content``)."""
    prefix = f'{speaker} said, "'
    if content.startswith(prefix) and content.endswith('"'):
        return content[len(prefix) : -1]
    return content


class ChangeFinder:
    """One call's supersession decisions, over the statistics the planner holds."""

    def __init__(self, state: State, user_id: str, session_id: str) -> None:
        self.st = state
        self.user = user_id
        self.session = session_id
        self.texts: dict[str, tuple[str, str]] = {}  # muid -> (speaker, text), this call's messages

    def remember(self, muid: str, speaker: str, text: str) -> None:
        self.texts[muid] = (speaker, text)

    async def note_tail(self, muid: str) -> None:
        """The user's last messages, in the order they came (the ``tail`` row): what a cue without
        an object of its own, or a correction, may change, across sessions."""
        tail = [m for m in (await self.st.get("tail", "tail") or []) if m != muid]
        self.st.put("tail", "tail", [*tail, muid][-TAIL:])

    def index_rows(self, muid: str, text: str, sign: int) -> list[str]:
        """The ``fam`` rows of a message, added (sign 1) or removed; returns its families."""
        fams = sorted(families(text))
        for fam in fams:
            self.st.put("fam", fam + SEP + muid, 1 if sign > 0 else None)
        return fams

    async def plan(self, muid: str, speaker: str, text: str, ts: datetime, position: int) -> Change:
        cue = find_cue(text) or await self._answer(speaker, text)
        if cue is None:
            return Change()
        change = await self._plan(cue, muid, speaker, text, ts, position)
        change.cued = True
        return change

    async def _answer(self, speaker: str, text: str) -> Cue | None:
        """A short reply that gives a value to the other side's question about a change ("What's
        the new date?" "September 6."): the question's change, with the reply's value."""
        tail = await self.st.get("tail", "tail") or []
        if not tail or len(text.split()) > ANSWER_WORDS:
            return None
        last = tail[-1]
        rows = await self.st.get_many("msg", [last])
        if last not in rows or rows[last].get("speaker") == speaker:
            return None
        question = (await self._texts([last], rows)).get(last, "")
        return answer_cue(question, text)

    async def _plan(self, cue: Cue, muid: str, speaker: str, text: str, ts: datetime, position: int) -> Change:
        earlier = await self._earlier(cue, speaker, text, ts, position)
        if cue.kind == "revert":
            return await self._revert(cue, muid, speaker, ts, earlier)
        ended = superseded(cue, text, speaker, [e for e, _ in earlier])[:MAX_SUPERSEDES]
        if not ended:
            return Change()
        return Change(supersedes=sorted(ended), meta={"kind": cue.kind, "rule": cue.rule, "supersedes": sorted(ended)})

    async def _candidates(self, cue: Cue, speaker: str, text: str, position: int) -> list[str]:
        keys = subject_keys(cue.clause, speaker)
        terms = [f"{kind}:{k}" for k in sorted(keys) for kind in ("entity", "topic")]
        found: set[str] = set()
        stats = await self.st.get_many("term", terms)
        posted = [t + SEP for t in terms if t in stats and 0 < int(stats[t].get("df", 0)) <= MAX_POSTINGS]
        fams = [fam + SEP for fam in sorted(families(cue.clause) or families(text))]
        await self.st.prefetch({}, {"post": posted, "fam": fams})
        for prefix in posted:
            found.update(k.split(SEP, 1)[1] for k in await self.st.scan("post", prefix))
        for prefix in fams:
            found.update(k.split(SEP, 1)[1] for k in await self.st.scan("fam", prefix))
        found.update(message_id(self.session, p) for p in range(max(0, position - 2 * RECENT), position))
        found.update(await self.st.get("tail", "tail") or [])
        return sorted(found)

    async def _earlier(
        self, cue: Cue, speaker: str, text: str, ts: datetime, position: int
    ) -> list[tuple[Earlier, Mapping[str, Any]]]:
        """The candidates written before the new message, newest first, with their rows."""
        muids = await self._candidates(cue, speaker, text, position)
        rows = await self.st.get_many("msg", muids)
        # their units in one read: their texts, and the rows of those the statistics do not know
        await self.st.prefetch_entities(Kind.MEMORY_UNIT, [m for m in muids if m not in self.texts])
        rows.update(await self._imported_rows([m for m in muids if m not in rows]))
        me = message_id(self.session, position)

        def before(m: str) -> bool:
            row = rows[m]
            when = datetime.fromisoformat(row["ts"])
            if m.rsplit(":", 1)[0] == me.rsplit(":", 1)[0]:
                return int(row["pos"]) < position
            return when < ts or (when == ts and m < me)

        ordered = sorted(
            (m for m in rows if m != me and before(m)),
            key=lambda m: (rows[m]["ts"], m.rsplit(":", 1)[0] == me.rsplit(":", 1)[0], int(rows[m]["pos"]), m),
            reverse=True,
        )[:MAX_CANDIDATES]
        texts = await self._texts(ordered, rows)
        tail = [m for m in (await self.st.get("tail", "tail") or []) if m != me]
        session_recent = [m for m in ordered if m.rsplit(":", 1)[0] == me.rsplit(":", 1)[0]]
        out: list[tuple[Earlier, Mapping[str, Any]]] = []
        mine = 0
        for m in ordered:
            row = rows[m]
            if row.get("speaker") == speaker:
                mine += 1
            recent = (
                len(tail) - tail.index(m) if m in tail else position - int(row["pos"]) if m in session_recent else 0
            )
            same = row.get("speaker") == speaker
            who = str(row.get("speaker", ""))
            earlier = Earlier(
                m, who, texts.get(m, ""), recent, mine if same else 0, bool(row.get("sup")), bool(row.get("cue"))
            )
            out.append((earlier, row))
        return out

    async def _imported_rows(self, muids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Rows for messages the statistics do not know but the record store holds (a session
        imported from an export): their time, position and speaker, from their units."""
        if not muids:
            return {}
        units = await self.st.entities(Kind.MEMORY_UNIT, muids)
        return {
            m: {
                "ts": iso(u.creation_ts),
                "pos": int(u.metadata.get("index", 0)),
                "speaker": str(u.metadata.get("speaker") or u.source_agent_id or ""),
            }
            for m, u in units.items()
            if isinstance(u, MemoryUnit)
        }

    async def _texts(self, muids: Sequence[str], rows: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
        out = {m: self.texts[m][1] for m in muids if m in self.texts}
        missing = [m for m in muids if m not in out]
        if missing:
            units = await self.st.entities(Kind.MEMORY_UNIT, missing)
            for m, unit in units.items():
                if isinstance(unit, MemoryUnit):
                    out[m] = inner_text(unit.content, str(rows[m].get("speaker", "")))
        return out

    async def _revert(
        self, cue: Cue, muid: str, speaker: str, ts: datetime, earlier: Sequence[tuple[Earlier, Mapping[str, Any]]]
    ) -> Change:
        changers = [(e.muid, e.text, e.recent) for e, row in earlier if row.get("sup")]
        target = revert_target(cue.clause, speaker, changers)
        if target is None:
            return Change()
        row = next(r for e, r in earlier if e.muid == target)
        chain = set(row.get("sup", []))
        # every change of the same statements (a change and the agent's echo of it), and their echoes
        changes = [e.muid for e, r in earlier if r.get("sup") and chain & set(r["sup"])] or [target]
        ended = list(dict.fromkeys(m for c in changes for m in (c, *echoes(c, [e for e, _ in earlier]))))
        restored = sorted(str(m) for m in chain - set(ended))
        texts = await self._texts(restored, await self.st.get_many("msg", restored))
        meta = {"kind": "revert", "rule": cue.rule, "supersedes": sorted(ended), "restores": restored}
        body = " / ".join(texts[m] for m in restored if m in texts)
        if not body:
            return Change(supersedes=sorted(ended), meta=meta)
        artifact = Artifact(
            user_id=self.user,
            id=restatement_id(muid),
            artifact_type="restatement",
            title=f"{speaker} went back to an earlier plan"[:500],
            content=f'{speaker} went back to what was said before: "{body}"'[:100_000],
            created_at=ts,
            confidence=0.8,
        )
        return Change(
            supersedes=sorted(ended), meta=meta, restatement=artifact, restated=[m for m in restored if m in texts]
        )


def restatement_id(muid: str) -> str:
    return f"restated:{muid.partition(':')[2]}"[:128]
