"""The conversation statistics stay consistent with the records (#45, L1): a conversation's concept
deleted or merged away does not break the later messages that mention it, and an id the planner
makes never lands on one the user ingested."""

from __future__ import annotations

from hrt.extraction.ids import entity_id
from hrt.extraction.messages import ConversationRequest
from hrt.ingest import parse_jsonl
from hrt.records import Kind
from hrt.service import HRTService
from tests.helpers import concept, jsonl, mu


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
