"""Notes from the rules (hrt/extraction/notes.py): attributed, split, dated, short replies behind
what they answer; and the same note from the conversation route's planner and the batch import."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hrt.eval.locomo.importer import import_conversation
from hrt.extraction.conversation import LLMOutcome
from hrt.extraction.ids import message_id
from hrt.extraction.notes import (
    attributed,
    clauses,
    is_short_reply,
    listener_of,
    note_id,
    note_text,
    resolve_ago,
    resolve_relative,
    rule_note,
    with_dates,
)
from hrt.records import Artifact, Kind
from tests.unit.test_conversations import calls, dump, entities, locomo_sample, request, service

MONDAY = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # a Monday


def test_first_and_second_person_become_the_speaker_and_the_listener() -> None:
    said = attributed("I'm moving to Porto and my sister asked if you've been there", "Ana", "Ben")
    assert said == "Ana is moving to Porto and Ana's sister asked if Ben has been there"
    assert attributed("You helped me a lot", "Ana", None) == "You helped Ana a lot"  # no one listener
    assert attributed("Imagine my idea", "Ana", "Ben") == "Imagine Ana's idea"  # whole words only
    # a name is put in as it is: a backslash or braces in it are no group reference or template
    assert attributed("I told you", r"A\1{l}", r"B\g<0>") == r"A\1{l} told B\g<0>"


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("yesterday", "7 May 2023"),
        ("today", "8 May 2023"),
        ("tomorrow", "9 May 2023"),
        ("last week", "the week before 8 May 2023"),
        ("last weekend", "the weekend before 8 May 2023"),
        ("next month", "June 2023"),
        ("last month", "April 2023"),
        ("last year", "2022"),
        ("this year", "2023"),
        ("last Friday", "Friday, 5 May 2023"),
        ("last Monday", "Monday, 1 May 2023"),  # the one before the day it was said
    ],
)
def test_relative_times_resolve_against_the_message_time(phrase: str, expected: str) -> None:
    assert resolve_relative(phrase, MONDAY) == expected


def test_counted_times_ago() -> None:
    assert resolve_ago("two", "year", MONDAY) == "2021"
    assert resolve_ago("3", "day", MONDAY) == "5 May 2023"
    assert resolve_ago("a few", "month", MONDAY) == "February 2023"
    assert resolve_ago("a couple of", "week", MONDAY) == "the week of 24 April 2023"
    assert resolve_ago("14", "month", datetime(2023, 1, 10, tzinfo=UTC)) == "November 2021"


def test_dates_are_added_after_the_words_that_said_them() -> None:
    assert with_dates("We met two years ago, yesterday too", MONDAY) == (
        "We met two years ago (2021), yesterday (7 May 2023) too"
    )


def test_statements_leave_out_questions_and_filler() -> None:
    text = "Wow, that's great! Thanks. My kids loved the lake; we saw the Perseids. Did you go?"
    assert clauses(text) == ["My kids loved the lake.", "We saw the Perseids."]
    assert clauses("Haha yes, so cool!") == []


def test_a_short_reply_is_written_behind_what_it_answers() -> None:
    asked = ("Ana", "Which airline do you fly to Lisbon with?")
    assert is_short_reply("Yes, with TAP!") and not is_short_reply("I fly with TAP every month to Lisbon")
    note = note_text("Ben", "With TAP!", MONDAY, "Ana", asked)
    assert note == 'Ben, answering Ana\'s "Which airline do you fly to Lisbon with?": With TAP!'
    yes = note_text("Ben", "Yes!", MONDAY, "Ana", ("Ana", "Did you adopt the puppy?"))
    assert yes is not None and yes.endswith(": Yes!")
    assert note_text("Ben", "Thanks!", MONDAY, "Ana", ("Ana", "I adopted a puppy.")) is None  # answers nothing
    assert note_text("Ana", "Yes!", MONDAY, "Ben", ("Ana", "Shall I?")) is None  # one's own message


def test_statements_that_answer_a_question_are_written_behind_it() -> None:
    asked = ("Melanie", "Wow, congrats! What made you decide to adopt?")
    note = note_text("Caroline", "I have always wanted to help kids who need a home.", MONDAY, "Melanie", asked)
    assert note == (
        'Caroline, answering Melanie\'s "What made you decide to adopt?":\n'
        "Caroline has always wanted to help kids who need a home."
    )
    told = ("Melanie", "We adopted a cat.")  # no question: the statements alone
    assert (
        note_text("Caroline", "I have always wanted a dog.", MONDAY, "Melanie", told)
        == "Caroline has always wanted a dog."
    )
    long = ("Melanie", "Which " + "very " * 80 + "long road?")
    quoted = note_text("Caroline", "I took the coast road north.", MONDAY, "Melanie", long)
    assert quoted is not None and '..."' in quoted.splitlines()[0] and len(quoted.splitlines()[0]) < 300


def test_a_note_states_the_message_attributed_and_dated() -> None:
    text = "I went to a support group yesterday. The talks moved me, but the drive home was long!"
    assert note_text("Caroline", text, MONDAY, "Mel") == (
        "Caroline went to a support group yesterday (7 May 2023).\nThe talks moved Caroline.\nThe drive home was long."
    )
    assert note_text("Caroline", "Hi Mel! How are you?", MONDAY, "Mel") is None


def test_the_note_artifact() -> None:
    note = rule_note("u-1", "msg:s-1:4", "Ana", "I adopted a puppy named Rex", MONDAY, ["Ana", "Ben"], None)
    assert note is not None and note.id == note_id("msg:s-1:4") == "note:s-1:4"
    assert note.artifact_type == "note" and note.created_at == MONDAY
    assert note.content == "Ana adopted a puppy named Rex."
    assert rule_note("u-1", "msg:s-1:5", "Ana", "Thanks!", MONDAY, ["Ana", "Ben"], None) is None
    assert listener_of("Ana", ["Ana", "Ben"]) == "Ben" and listener_of("Ana", ["Ana", "Ben", "Cy"]) is None


@pytest.mark.parametrize("per_call", [1, 4])
async def test_the_route_writes_the_notes_the_batch_import_writes(tmp_path: Path, per_call: int) -> None:
    """One code path: ``POST /v1/conversations`` (one message a call, or four: a short reply whose
    question came in the call before reads it from the store) and the LoCoMo batch import write the
    same notes, each DERIVED_FROM its message; an edit rewrites its note, a delete takes it away."""
    svc = await service(tmp_path / "c.db")
    try:
        for c in calls(per_call=per_call):
            await svc.add_messages(c)
        rows = dump(tmp_path / "c.db")
        notes = {i: n for i, n in entities(rows, "artifact").items() if n["artifact_type"] == "note"}
        derived = {(s, t) for s, t, ty, _, _ in rows["edges"] if ty == "DERIVED_FROM"}
        assert derived == {(i, "msg:" + i.partition(":")[2]) for i in notes}
        batch = sorted(
            r.content for r in import_conversation(locomo_sample(dated=True)).records if isinstance(r, Artifact)
        )
        assert sorted(n["content"] for n in notes.values()) == batch
        assert "Tom is planning a hiking trip to Lisbon with Ana in July." in batch  # "I am", said by Tom
        # a short reply whose question came in the call before: read from the store
        await svc.add_messages(request(2, [("Maya", "Which airline do you fly to Lisbon with?")], 6))
        await svc.add_messages(request(2, [("Tom", "With TAP!")], 7))
        reply = entities(dump(tmp_path / "c.db"), "artifact")[note_id(message_id("s2", 7))]
        assert reply["content"] == 'Tom, answering Maya\'s "Which airline do you fly to Lisbon with?": With TAP!'
        lines = [line for b in batch for line in b.splitlines()]
        assert "Maya will try again next week (the week after 1 February 2026) at Clayworks." in lines

        edited = request(0, [("Maya", "I booked the glass blowing class instead, yesterday.")], 0, start=0)
        await svc.add_messages(edited)
        first = message_id("s0", 0)
        note = entities(dump(tmp_path / "c.db"), "artifact")[note_id(first)]
        assert note["content"] == "Maya booked the glass blowing class instead, yesterday (31 December 2025)."
        await svc.delete_entity("u1", Kind.MEMORY_UNIT, first)  # the message goes, its note with it
        assert note_id(first) not in entities(dump(tmp_path / "c.db"), "artifact")
    finally:
        await svc.close()


async def test_the_llm_extractors_facts_replace_the_note_and_are_dated_by_their_message(tmp_path: Path) -> None:
    """With the extractor configured, a message it gave facts for has those facts (dated by the
    message, DERIVED_FROM it) and no rule note: the two do not say the same thing twice; a message
    it gave none for keeps its note."""
    svc = await service(tmp_path / "c.db")

    async def llm(speaker: str, text: str, context: Sequence[str]) -> LLMOutcome | None:
        return LLMOutcome(facts=["Maya booked a pottery class at Clayworks."] if "pottery" in text else [])

    svc.llm_extractor = llm
    try:
        await svc.add_messages(calls(per_call=2)[0])  # Maya on the pottery class, Tom's question
        await svc.add_messages(request(0, [("Tom", "I taught my sister to knit last year.")], 2))
        rows = dump(tmp_path / "c.db")
    finally:
        await svc.close()
    artifacts = entities(rows, "artifact")
    first, third = message_id("s0", 0), message_id("s0", 2)
    facts = [a for a in artifacts.values() if a["artifact_type"] == "fact"]
    assert [f["content"] for f in facts] == ["Maya booked a pottery class at Clayworks."]
    assert facts[0]["created_at"].startswith("2026-01-01T10:00:00")  # the message's time, not the call's
    assert note_id(first) not in artifacts and artifacts[note_id(third)]["content"].startswith("Tom taught")
    derived = {(s, t) for s, t, ty, _, _ in rows["edges"] if ty == "DERIVED_FROM"}
    assert (facts[0]["id"], first) in derived and (note_id(third), third) in derived
    # the fact is linked as its message is: its speaker, and the message's concepts it names
    concepts = entities(rows, "concept")
    mentions: dict[str, set[str]] = {}
    for s, t, ty, _, _ in rows["edges"]:
        if ty in ("MENTIONS", "DERIVED_FROM") and t in concepts:
            mentions.setdefault(s, set()).add(concepts[t]["name"])
    of_fact, of_message = mentions.get(facts[0]["id"], set()), mentions[first]
    assert "Maya" in of_fact and of_fact <= of_message, (of_fact, of_message)
    named = {n for n in of_message if all(w in facts[0]["content"].lower() for w in n.lower().split())}
    assert len(named) > 1 and of_fact == named | {"Maya"}, (named, of_fact)
