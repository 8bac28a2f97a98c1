"""The conversation statistics stay consistent with the records (#45, L1): a conversation's concept
deleted or merged away does not break the later messages that mention it, and an id the planner
makes never lands on one the user ingested; and (L3) the statistics a message adds, and a user holds,
are bounded."""

from __future__ import annotations

import json
import sqlite3

from hrt.config import Settings
from hrt.errors import PayloadTooLarge
from hrt.extraction.ids import entity_id
from hrt.extraction.messages import ConversationRequest
from hrt.ingest import parse_jsonl
from hrt.records import Kind
from hrt.service import HRTService
from tests.helpers import HashingEmbedder, concept, jsonl, mu


def said(*lines: tuple[str, str], session: str = "s1") -> ConversationRequest:
    return ConversationRequest.model_validate(
        {
            "user_id": "u1",
            "session_id": session,
            "messages": [{"role": "user", "name": who, "content": text} for who, text in lines],
        }
    )


async def mentioned(svc: HRTService, muid: str) -> set[str]:
    """The concepts a memory unit MENTIONS."""
    return {r.target for r in await svc.records.relations_of("u1", [muid]) if r.type.value == "MENTIONS"}


async def test_a_deleted_speaker_concept_is_made_again_by_the_next_message(hashing_service):
    svc = hashing_service
    await svc.add_messages(said(("Maya", "I booked the pottery class at Clayworks.")))
    maya = entity_id("person", "maya")
    assert (await svc.records.get_many("u1", Kind.CONCEPT, [maya])).keys() == {maya}
    assert await svc.delete_entity("u1", Kind.CONCEPT, maya) == 1
    later = await svc.add_messages(said(("Maya", "The bowl came out of the kiln.")))  # was a 422
    assert [m.status for m in later.messages] == ["added"]
    assert (await svc.records.get_many("u1", Kind.CONCEPT, [maya])).keys() == {maya}
    assert maya in await mentioned(svc, later.messages[0].muid)


async def test_a_merged_speaker_concept_sends_later_mentions_to_the_target(hashing_service):
    svc = hashing_service
    await svc.ingest(parse_jsonl(jsonl([concept("u1", "c-tom", "Tom Baker", type="person")])))
    await svc.add_messages(said(("Tom", "I am planning a hiking trip to Lisbon.")))
    tom = entity_id("person", "tom")
    merged = await svc.merge_concepts("u1", "c-tom", [tom])
    assert merged.merged == [tom]
    later = await svc.add_messages(said(("Tom", "Ana found a hiking route near Lisbon.")))  # was a 422
    assert [m.status for m in later.messages] == ["added"]
    assert "c-tom" in await mentioned(svc, later.messages[0].muid)
    assert not await svc.records.get_many("u1", Kind.CONCEPT, [tom])  # the merge is not undone
    target = (await svc.records.get_many("u1", Kind.CONCEPT, ["c-tom"]))["c-tom"]
    assert target.name == "Tom Baker"  # the statistics do not rename a concept they did not make


async def test_an_ingested_id_never_collides_with_a_made_one(hashing_service):
    svc = hashing_service
    maya = entity_id("person", "maya")
    await svc.ingest(parse_jsonl(jsonl([mu("u1", maya, "a note the user filed under this id")])))
    first = await svc.add_messages(said(("Maya", "I booked the pottery class at Clayworks.")))  # was a 409
    again = await svc.add_messages(said(("Maya", "The bowl came out of the kiln.")))
    assert [m.status for m in [*first.messages, *again.messages]] == ["added", "added"]
    unit = (await svc.records.get_many("u1", Kind.MEMORY_UNIT, [maya]))[maya]
    assert unit.content == "a note the user filed under this id"  # untouched
    speakers = await mentioned(svc, again.messages[0].muid)
    assert maya not in speakers and any(c.startswith(maya + "-") for c in speakers)


# --- L3: the statistics are bounded per message and per user ---------------------------------------


def state_rows(svc: HRTService, user: str = "u1") -> int:
    """Rows of the user's statistics as stored (the meta row aside), read from the SQLite file."""
    with sqlite3.connect(str(svc.settings.db_path)) as db:
        (n,) = db.execute(
            "SELECT COUNT(*) FROM extraction_state WHERE user_id = ? AND ns != 'meta'", (user,)
        ).fetchone()
    return int(n)


async def test_one_long_message_adds_a_bounded_number_of_statistics_rows(hashing_service):
    words = " ".join(f"Word{i:05d} topic{i:05d}." for i in range(4500))  # ~95 KB of distinct words
    await hashing_service.add_messages(said(("Maya", words)))
    assert state_rows(hashing_service) < 4000  # was ~70,000: 2,000 words and 256 keys at most


async def test_a_user_statistics_are_bounded_and_their_count_is_kept_exact(tmp_path):
    svc = HRTService(Settings(db_path=tmp_path / "hrt.db", max_conversation_state_rows=150), embedder=HashingEmbedder())
    try:
        lines = [
            ("Maya", "I booked the pottery class at Clayworks for Saturday."),
            ("Tom", "Is that the studio near Riverside Park?"),
            ("Maya", "Yes, the pottery teacher is Ines."),
            ("Tom", "Ines taught my sister pottery last year."),
            ("Maya", "I want to make a glazed bowl for my mother in June."),
            ("Tom", "I am planning a hiking trip to Lisbon with Ana in July."),
        ]
        refused = None
        for i, line in enumerate(lines):
            before = state_rows(svc)
            try:
                await svc.add_messages(said(line, session=f"s{i}"))
            except PayloadTooLarge as exc:
                refused = exc
                assert state_rows(svc) == before  # nothing of the refused call is written
                break
            meta = json.loads((await svc.records.state_get("u1", "meta", ["meta"]))["meta"])
            assert meta["rows"] == state_rows(svc) <= 150
        assert refused is not None and refused.field == "messages"
    finally:
        await svc.close()


async def test_deleting_messages_shrinks_their_statistics(hashing_service):
    svc = hashing_service
    first = await svc.add_messages(said(("Maya", "I booked the pottery class at Clayworks for Saturday.")))
    base = state_rows(svc)
    extra = await svc.add_messages(
        said(
            ("Tom", "Is that the Clayworks studio near Riverside Park?"),
            ("Maya", "Yes, and the pottery teacher there is Ines Moreau."),
        )
    )
    grown = state_rows(svc)
    ines = entity_id("entity", "ines moreau")
    assert grown > base and await svc.records.get_many("u1", Kind.CONCEPT, [ines])
    for message in extra.messages:
        assert await svc.delete_entity("u1", Kind.MEMORY_UNIT, message.muid) >= 1
    meta = json.loads((await svc.records.state_get("u1", "meta", ["meta"]))["meta"])
    assert state_rows(svc) < grown and meta["rows"] == state_rows(svc) and meta["turns"] == 1
    assert not await svc.records.state_get("u1", "msg", [m.muid for m in extra.messages])
    # what only the deleted messages mentioned is gone; the next message works as before
    assert not await svc.records.get_many("u1", Kind.CONCEPT, [ines])
    later = await svc.add_messages(said(("Maya", "The bowl came out of the kiln at Clayworks.")))
    assert [m.status for m in later.messages] == ["added"] and first.messages[0].status == "added"
