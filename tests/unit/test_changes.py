"""What changed, by rules (hrt.extraction.changes): cues, subjects, values, and what is never a change;
and the planner's use of them (hrt.extraction.superseding) through HRTService.add_messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from hrt.config import Settings
from hrt.contract import RetrieveRequest
from hrt.extraction.changes import Earlier, find_cue, holders, superseded, values
from hrt.extraction.ids import message_id
from hrt.extraction.messages import ConversationRequest
from hrt.extraction.superseding import restatement_id
from hrt.records import Kind, MemoryUnit
from hrt.service import HRTService
from tests.helpers import HashingEmbedder


def ends(new: str, *old: str, speaker: str = "Maya", others: tuple[str, ...] = ()) -> list[int]:
    """Which of ``old`` (oldest first, said by ``speaker`` unless named in ``others``) ``new`` ends."""
    earlier = [
        Earlier(f"m{i}", others[i] if i < len(others) and others[i] else speaker, text, len(old) - i, len(old) - i)
        for i, text in enumerate(old)
    ][::-1]
    cue = find_cue(new)
    if cue is None:
        return []
    return sorted(int(m[1:]) for m in superseded(cue, new, speaker, earlier))


@pytest.mark.parametrize(
    ("new", "old", "expected"),
    [
        # a plan moved: the statement of the old date ends, a mention without a date does not
        (
            "We moved the Japan trip to October because Lena can't get time off in April.",
            ("We're going to Japan in April, Tokyo first.", "Can't wait for the Japan trip!"),
            [0],
        ),
        # an old value named: "instead", "dropping X"
        ("We're dropping Kyoto and doing Osaka instead.", ("Tokyo first and then Kyoto.", "Tokyo is huge."), [0]),
        ("Let's meet on Thursday instead of Tuesday.", ("Our sync is on Tuesday at 10am.",), [0]),
        # a correction of the speaker's own last message
        ("Sorry, I meant Wednesday.", ("The dentist is on Tuesday.",), [0]),
        # a cancellation ends what states its object
        ("We called off the wedding party.", ("The wedding party is at the lake house.", "The lake is cold."), [0]),
        ("I don't go to the climbing gym anymore.", ("I go to the climbing gym every Monday.",), [0]),
        # a life fact replaced: where one lives, with the old city named by the new statement's value kind
        ("I got a new phone number: 555 0199 321.", ("My phone number is 555 0123 456.",), [0]),
        ("Actually the dinner is at 8pm, not 7pm.", ("Dinner is at 7pm at Rosa's.",), [0]),
        ("I quit my job at Acme.", ("I work at Acme as a nurse.", "Acme's coffee is bad."), [0]),
        ("Turns out the flight is at 6am.", ("The flight leaves at 9am.",), [0]),
    ],
)
def test_a_change_ends_the_statement_it_changes(new: str, old: tuple[str, ...], expected: list[int]) -> None:
    assert ends(new, *old) == expected


@pytest.mark.parametrize(
    ("new", "old"),
    [
        # mentioned again, confirmed: no cue
        ("Still on for October, can't wait for Japan!", ("We moved the Japan trip to October.",)),
        ("Japan in April will be lovely.", ("We're going to Japan in April.",)),
        # a cue under a negation
        ("I'm not gonna give up on my dance studio.", ("My dance studio opened last May.",)),
        ("We didn't change the date, it's still May 3.", ("The party is on May 3.",)),
        # an adjective, not a change ("changing", "moving")
        ("It was a moving speech about our changing city.", ("The speech is on Friday in Lisbon.",)),
        # a question states nothing, and is never ended
        ("Did you move the meeting to Friday?", ("The meeting is on Monday.",)),
        ("We moved the meeting to Friday.", ("Is the meeting on Monday?",)),
        # someone else's fact: my sister's job is not mine
        ("My sister started a new job at Globex.", ("I work as a nurse at St. Anne's.",)),
        # a correction corrects the speaker's last messages only
        ("Sorry, I meant Wednesday.", ("The dentist is on Tuesday.", *["Nice weather."] * 4)),
        # a move of something else: no shared subject, no recent message
        ("We moved the sofa to the living room.", ("The concert is in April.", *["Nothing new."] * 8)),
    ],
)
def test_what_is_not_a_change_ends_nothing(new: str, old: tuple[str, ...]) -> None:
    assert ends(new, *old) == []


def test_a_cue_without_an_object_of_its_own_changes_a_recent_message() -> None:
    assert ends("Moved it to 3pm.", "Standup is at 2pm.") == [0]
    assert ends("Moved it to 3pm.", "Standup is at 2pm.", *["Sure."] * 8) == []


def test_values_and_holders() -> None:
    v = values("We fly on May 12 at 7:30am, call 555-0199-321 or mail ana@example.org")
    assert v["month"] == {"may"} and v["time"] == {"7:30"} and {"5550199321", "ana@example.org"} <= v["number"]
    assert values("at 3pm")["time"] == values("at 15:00")["time"] == values("at 3:00 pm")["time"] == {"15:00"}
    assert values("on the 16th")["day"] == {"16"} and values("April 3-13")["day"] == {"3"}
    assert "month" not in values("You may come along.")
    assert holders("My brother got a job.") == {"brother"} and holders("A trip with my sister.") == frozenset()


async def send(svc: HRTService, lines: list[tuple[str, str]], session: str = "s") -> list[str]:
    muids = []
    for i, (name, text) in enumerate(lines):
        body = {"name": name, "content": text, "timestamp": f"2026-01-{i + 1:02d}T10:00:00Z"}
        req = ConversationRequest(user_id="u", session_id=session, messages=[body])  # type: ignore[list-item]
        muids.extend(m.muid for m in (await svc.add_messages(req)).messages)
    return muids


async def test_the_planner_writes_supersession_with_its_rule_and_a_revert_restates(tmp_path: Path) -> None:
    svc = HRTService(Settings(db_path=tmp_path / "c.db"), embedder=HashingEmbedder())
    await svc.start()
    try:
        muids = await send(
            svc,
            [
                ("Maya", "We're flying to Lisbon on May 12 for the conference."),
                ("Bot", "Lisbon in May sounds great."),
                ("Maya", "We moved the Lisbon flight to June 2, the venue changed."),
                ("Bot", "Noted, June 2."),
                ("Maya", "Back to the original plan: May 12 after all, the venue is fine."),
            ],
        )
        units = await svc.records.get_many("u", Kind.MEMORY_UNIT, muids)
        moved, revert = units[muids[2]], units[muids[4]]
        assert isinstance(moved, MemoryUnit) and isinstance(revert, MemoryUnit)
        assert moved.supersedes == [muids[0], muids[1]] and moved.metadata["changes"]["rule"] == "moved"
        assert revert.supersedes == [muids[2], muids[3]]
        assert revert.metadata["changes"] == {
            "kind": "revert",
            "rule": "reverted",
            "supersedes": [muids[2], muids[3]],
            "restores": [muids[0], muids[1]],
        }
        restated = await svc.records.get_many("u", Kind.ARTIFACT, [restatement_id(muids[4])])
        assert "May 12" in restated[restatement_id(muids[4])].content  # type: ignore[union-attr]
        # what a retrieval sees: the revert and what it restates; every superseded message set aside
        ctx = await svc.retrieve(RetrieveRequest(user_id="u", key_phrases=["Lisbon flight"]))
        returned = {u.muid for u in ctx.retrieved_memory_units}
        assert returned.isdisjoint(muids[:4]) and ctx.retrieval_metadata.validity.suppressed["memory_unit"] == 4
        # the revert edited, still a revert: its restatement is written again, not lost
        again = {"name": "Maya", "content": "Back to the original plan: May 12 after all, the venue is great."}
        again |= {"timestamp": "2026-01-05T10:00:00Z", "index": 4}
        await svc.add_messages(ConversationRequest(user_id="u", session_id="s", messages=[again]))  # type: ignore[list-item]
        kept = await svc.records.get_many("u", Kind.ARTIFACT, [restatement_id(muids[4])])
        assert "May 12" in kept[restatement_id(muids[4])].content  # type: ignore[union-attr]
        # the revert edited into a plain message: its supersession and its restatement go
        edit = {"name": "Maya", "content": "The venue is fine.", "timestamp": "2026-01-05T10:00:00Z", "index": 4}
        await svc.add_messages(ConversationRequest(user_id="u", session_id="s", messages=[edit]))  # type: ignore[list-item]
        after = await svc.records.get_many("u", Kind.MEMORY_UNIT, [muids[4]])
        assert after[muids[4]].supersedes == []  # type: ignore[union-attr]
        assert await svc.records.get_many("u", Kind.ARTIFACT, [restatement_id(muids[4])]) == {}
    finally:
        await svc.close()


async def test_a_replay_gives_the_same_supersession(tmp_path: Path) -> None:
    lines = [
        ("Maya", "Our sync is on Tuesday at 10am."),
        ("Maya", "Sorry, I meant Wednesday."),
        ("Maya", "I cancelled the gym membership."),
        ("Maya", "The gym membership was too expensive anyway."),
    ]
    got = []
    for n in range(2):
        svc = HRTService(Settings(db_path=tmp_path / f"{n}.db"), embedder=HashingEmbedder())
        await svc.start()
        try:
            muids = await send(svc, lines)
            units = await svc.records.get_many("u", Kind.MEMORY_UNIT, muids)
            got.append([units[m].supersedes for m in muids])  # type: ignore[union-attr]
        finally:
            await svc.close()
    assert got[0] == got[1] == [[], [message_id("s", 0)], [], []]


async def test_a_session_imported_from_an_export_is_changed_like_any_other(tmp_path: Path) -> None:
    """Export a conversation, import it into a fresh store (records, no statistics), continue it:
    the change ends the imported statement, and the supersession of the export came along."""
    from hrt.export import export_records

    lines = [("Maya", "Our sync is on Tuesday at 10am."), ("Maya", "We moved the sync to Thursday.")]
    first = HRTService(Settings(db_path=tmp_path / "a.db"), embedder=HashingEmbedder())
    await first.start()
    try:
        muids = await send(first, lines[:1])
        async with first.records.export_reader("u") as reader:
            records = [r async for part in export_records(reader) for r in part]
    finally:
        await first.close()
    second = HRTService(Settings(db_path=tmp_path / "b.db"), embedder=HashingEmbedder())
    await second.start()
    try:
        await second.ingest(records)
        body = {"name": "Maya", "content": lines[1][1], "timestamp": "2026-01-09T10:00:00Z"}
        done = await second.add_messages(ConversationRequest(user_id="u", session_id="s", messages=[body]))  # type: ignore[list-item]
        unit = (await second.records.get_many("u", Kind.MEMORY_UNIT, [done.messages[0].muid]))[done.messages[0].muid]
        assert done.messages[0].index == 1 and unit.supersedes == muids  # type: ignore[union-attr]
    finally:
        await second.close()


def test_a_short_reply_to_a_question_about_a_change_states_it() -> None:
    from hrt.extraction.changes import answer_cue

    cue = answer_cue("Oh! Did they move the standup? To what time?", "9:15 now.")
    assert cue is not None and cue.rule == "answered" and values(cue.stated)["time"] == {"9:15"}
    assert answer_cue("How was the standup?", "9:15 now.") is None  # the question is about no change
    assert answer_cue("Did they move the standup?", "Yes they did.") is None  # the reply gives no value
