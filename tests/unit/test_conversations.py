"""Conversation memory (#32), embedded: messages in, memory units, concepts and relations out,
turn by turn, idempotent and deterministic (hrt.extraction.conversation, HRTService.add_messages)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from hrt.config import Settings
from hrt.contract import RetrieveRequest
from hrt.errors import StateChanged
from hrt.eval.locomo.importer import import_conversation
from hrt.extraction.conversation import ExtractionOptions, plan_messages
from hrt.extraction.ids import message_id
from hrt.extraction.messages import ConversationRequest
from hrt.ingest import build_batch
from hrt.pipeline import utc_now
from hrt.records import Concept, EdgeType, Kind, MemoryUnit, Relation
from hrt.service import HRTService
from tests.helpers import HashingEmbedder

# an original little conversation (two friends, a pottery class, a trip): 3 sessions
SESSIONS: list[list[tuple[str, str]]] = [
    [
        ("Maya", "I finally booked the pottery class at Clayworks for Saturday."),
        ("Tom", "Nice! Is that the studio near Riverside Park?"),
        ("Maya", "Yes, Clayworks is right by Riverside Park. The pottery teacher is Ines."),
        ("Tom", "Ines taught my sister pottery last year, she loved the wheel."),
        ("Maya", "I want to make a glazed bowl for my mother's birthday in June."),
        ("Tom", "A glazed bowl sounds lovely. Your mother will like it."),
    ],
    [
        ("Tom", "How was the pottery class on Saturday?"),
        ("Maya", "Messy but fun. Ines showed us centering clay on the wheel."),
        ("Tom", "Did the glazed bowl survive the kiln?"),
        ("Maya", "It cracked in the kiln, so I will try again next week at Clayworks."),
        ("Tom", "I am planning a hiking trip to Lisbon with Ana in July."),
        ("Maya", "Lisbon in July is hot. Take water on the hiking trails."),
    ],
    [
        ("Maya", "The second glazed bowl came out of the kiln perfect."),
        ("Tom", "Great, your mother gets her birthday bowl after all."),
        ("Maya", "Are you still going to Lisbon with Ana?"),
        ("Tom", "Yes, Ana found a hiking route along the coast near Lisbon."),
        ("Maya", "Send me photos of the coast and the hiking route."),
        ("Tom", "Sure, and bring the bowl to dinner so Ana can see it."),
    ],
]


def request(session: int, messages: Sequence[tuple[str, str]], first: int, user: str = "u1", **extra: Any):
    return ConversationRequest.model_validate(
        {
            "user_id": user,
            "session_id": f"s{session}",
            "messages": [
                {"name": name, "content": text, "timestamp": f"2026-0{session + 1}-01T10:{first + i:02d}:00Z"}
                for i, (name, text) in enumerate(messages)
            ],
            **extra,
        }
    )


def locomo_sample(dated: bool = False) -> dict[str, Any]:
    """:data:`SESSIONS` in LoCoMo's shape (for the batch import); ``dated``: each session on the
    day :func:`request` gives its messages."""
    months = ("January", "February", "March")
    dates = {f"session_{n + 1}_date_time": f"10:00 am on 1 {months[n]}, 2026" for n in range(len(SESSIONS))}
    return {
        "sample_id": "t",
        "conversation": {
            "speaker_a": "Maya",
            "speaker_b": "Tom",
            **(dates if dated else {}),
            **{
                f"session_{n + 1}": [
                    {"speaker": s, "text": t, "dia_id": f"D{n + 1}:{i + 1}"} for i, (s, t) in enumerate(session)
                ]
                for n, session in enumerate(SESSIONS)
            },
        },
    }


def calls(per_call: int = 2, user: str = "u1") -> list[ConversationRequest]:
    out = []
    for n, session in enumerate(SESSIONS):
        for i in range(0, len(session), per_call):
            out.append(request(n, session[i : i + per_call], i, user))
    return out


async def service(path: Path) -> HRTService:
    # the hashing embedder's similarities are low: every phrase grounds
    settings = Settings(db_path=path, threshold_min=0.0, threshold_max=0.0)
    return await HRTService(settings, embedder=HashingEmbedder()).start()


def dump(path: Path, user: str = "u1") -> dict[str, Any]:
    """Everything a user has in the file, as sorted rows (entities, edges, statistics)."""
    db = sqlite3.connect(path)
    try:
        return {
            "entities": db.execute(
                "SELECT id, kind, data FROM entities WHERE user_id = ? ORDER BY id", (user,)
            ).fetchall(),
            "edges": db.execute(
                "SELECT source, target, type, weight, relation_type FROM edges WHERE user_id = ? ORDER BY 1, 2, 3",
                (user,),
            ).fetchall(),
            "state": db.execute(
                "SELECT ns, key, value FROM extraction_state WHERE user_id = ? ORDER BY 1, 2", (user,)
            ).fetchall(),
        }
    finally:
        db.close()


def entities(rows: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {i: json.loads(d) for i, k, d in rows["entities"] if k == kind}


async def test_messages_become_units_concepts_and_relations(tmp_path: Path) -> None:
    svc = await service(tmp_path / "c.db")
    try:
        results = [await svc.add_messages(c) for c in calls()]
    finally:
        await svc.close()
    rows = dump(tmp_path / "c.db")
    units = entities(rows, "memory_unit")
    concepts = entities(rows, "concept")
    assert len(units) == sum(len(s) for s in SESSIONS)
    first = units[message_id("s0", 0)]
    assert first["content"] == 'Maya said, "I finally booked the pottery class at Clayworks for Saturday."'
    assert first["metadata"] == {"session_id": "s0", "index": 0, "role": "user", "speaker": "Maya"}
    assert [r.messages[0].muid for r in results[:3]] == [message_id("s0", i) for i in (0, 2, 4)]
    # speakers, entities and repeated topics are concepts; a topic said once is not
    names = {c["name"]: c["type"] for c in concepts.values()}
    assert names["Maya"] == names["Tom"] == "person"
    assert names["Clayworks"] == names["Lisbon"] == names["Ines"] == "entity"
    assert names.get("glazed bowl") == "topic" and "centering clay" not in names
    edges = {(s, t, ty) for s, t, ty, _, _ in rows["edges"]}
    # FOLLOWS within a session, across calls; never across sessions
    assert (message_id("s0", 2), message_id("s0", 1), "FOLLOWS") in edges
    assert (message_id("s1", 0), message_id("s0", 5), "FOLLOWS") not in edges
    clayworks = next(i for i, c in concepts.items() if c["name"] == "Clayworks")
    mentions = {s for s, t, ty in edges if t == clayworks and ty == "MENTIONS"}
    assert mentions == {message_id("s0", 0), message_id("s0", 2), message_id("s1", 3)}
    # the speaker of a message is mentioned lightly, a named person fully
    weights = {(s, t): w for s, t, ty, w, _ in rows["edges"] if ty == "MENTIONS"}
    assert weights[(message_id("s0", 0), "person:maya")] == pytest.approx(0.1)
    assert weights[(message_id("s1", 4), "person:tom")] == pytest.approx(0.1)
    related = {(s, t) for s, t, ty in edges if ty == "RELATED_TO"}
    assert related and all(s < t for s, t in related)
    assert ("entity:ana", "entity:lisbon") in related  # said together three times


async def test_a_resend_is_a_no_op_and_a_replay_is_deterministic(tmp_path: Path) -> None:
    a = await service(tmp_path / "a.db")
    b = await service(tmp_path / "b.db")
    ask = RetrieveRequest.model_validate(
        {
            "user_id": "u1",
            "key_phrases": ["glazed bowl kiln", "Lisbon hiking"],
            "as_of": "2026-12-01T00:00:00Z",
            "config": {"relevance_gate": 0.0},
        }
    )
    try:
        for c in calls():
            await a.add_messages(c)
        before = dump(tmp_path / "a.db")
        for c in calls():  # every call again: nothing changes
            again = await a.add_messages(c)
            assert {m.status for m in again.messages} == {"unchanged"}
            assert again.concepts_linked == again.relations == 0
        assert dump(tmp_path / "a.db") == before
        for c in calls():  # the same sequence on a fresh store: the same graph, statistics and answers
            await b.add_messages(c)
        assert dump(tmp_path / "b.db") == before
        doc_a, doc_b = await a.retrieve(ask), await b.retrieve(ask)
        assert doc_a.retrieved_memory_units and doc_a.retrieved_concepts
        assert doc_a.model_dump_json() == doc_b.model_dump_json()
    finally:
        await a.close()
        await b.close()


async def test_appends_without_positions_recognise_a_retry(tmp_path: Path) -> None:
    svc = await service(tmp_path / "c.db")
    first = [{"role": "user", "content": "I adopted a cat named Pixel."}, {"role": "assistant", "content": "Lovely!"}]
    try:
        one = await svc.add_messages(ConversationRequest(user_id="u1", session_id="chat", messages=first))
        assert [(m.index, m.status) for m in one.messages] == [(0, "added"), (1, "added")]
        # the client did not hear back and sends the same messages with the next one
        more = [*first, {"role": "user", "content": "Pixel sleeps all day."}]
        two = await svc.add_messages(ConversationRequest(user_id="u1", session_id="chat", messages=more))
        assert [(m.index, m.status) for m in two.messages] == [(0, "unchanged"), (1, "unchanged"), (2, "added")]
        # a genuine repeat goes at the given position
        ok = [{"role": "assistant", "content": "Lovely!", "index": 3}]
        three = await svc.add_messages(ConversationRequest(user_id="u1", session_id="chat", messages=ok))
        assert [(m.index, m.status) for m in three.messages] == [(3, "added")]
    finally:
        await svc.close()
    units = entities(dump(tmp_path / "c.db"), "memory_unit")
    assert len(units) == 4
    assert units[message_id("chat", 0)]["content"] == 'User said, "I adopted a cat named Pixel."'
    assert units[message_id("chat", 1)]["source_agent_id"] == "Assistant"


async def test_an_edited_message_replaces_its_unit_and_its_mentions(tmp_path: Path) -> None:
    svc = await service(tmp_path / "c.db")
    try:
        for c in calls():
            await svc.add_messages(c)
        edit = request(2, [("Tom", "Yes, Ana found a sailing route along the coast near Porto.")], 3)
        edit = edit.model_copy(update={"start": 3})
        done = await svc.add_messages(edit)
        assert [(m.index, m.status) for m in done.messages] == [(3, "replaced")]
    finally:
        await svc.close()
    rows = dump(tmp_path / "c.db")
    muid = message_id("s2", 3)
    assert "Porto" in entities(rows, "memory_unit")[muid]["content"]
    concepts = entities(rows, "concept")
    targets = {concepts[t]["name"] for s, t, ty, _, _ in rows["edges"] if s == muid and ty == "MENTIONS"}
    assert "Porto" in targets and "Lisbon" not in targets and "Ana" in targets
    lisbon = json.loads(next(v for ns, k, v in rows["state"] if ns == "term" and k == "entity:lisbon"))
    assert lisbon["df"] == 3  # four messages named it, one no longer does


async def test_a_topic_too_common_is_unlinked_and_linked_again_as_the_conversation_grows(tmp_path: Path) -> None:
    # a topic may be named in 0.05 of the messages, never fewer than 8: with 160 messages 8, with 180, 9
    svc = await service(tmp_path / "c.db")

    async def send(said: list[tuple[str, int]], start: int, stop: int) -> Any:
        last = None
        for i in range(start, stop, 20):
            messages = [{"content": t} for t, _ in said[i : i + 20]]
            body = {"user_id": "u1", "session_id": "s", "start": i, "messages": messages}
            last = await svc.add_messages(ConversationRequest.model_validate(body))
        return last

    try:
        said = [(f"Day {i}: nothing special.", i) for i in range(180)]
        for i in range(9):
            said[i * 10] = ("Rain again, so I stayed in the greenhouse with Bruno.", i * 10)
        await send(said, 0, 160)
        rows = dump(tmp_path / "c.db")
        assert "topic:greenhouse" not in entities(rows, "concept")  # 9 of 160 messages: too common
        assert "entity:bruno" in entities(rows, "concept")  # a name is a subject however often it recurs
        last = await send(said, 160, 180)
        assert last.concepts_linked >= 1
    finally:
        await svc.close()
    rows = dump(tmp_path / "c.db")
    assert "topic:greenhouse" in entities(rows, "concept")  # 9 of 180: linked again
    mentions = {s for s, t, ty, _, _ in rows["edges"] if t == "topic:greenhouse" and ty == "MENTIONS"}
    assert mentions == {message_id("s", i * 10) for i in range(9)}


async def test_a_focused_chat_keeps_its_subjects_and_no_filler_becomes_a_concept(tmp_path: Path) -> None:
    """A short chat about one trip names Japan, Tokyo and the trip in most of its messages: they stay
    concepts; "please", number words and a month run into a name ("October Marco") do not."""
    svc = await service(tmp_path / "c.db")
    lines = [
        "We are planning a trip to Japan, Tokyo first.",
        "Please book the Japan trip hotel in Tokyo, ten nights.",
        "The Japan trip is in October Marco says.",
        "Please check Tokyo trains for the Japan trip.",
        "Tokyo in October: the trip to Japan is set.",
        "Please, ten times please, remember the Japan trip to Tokyo.",
        "Japan trip budget: three thousand for Tokyo.",
        "Marco likes Tokyo and the Japan trip plan.",
    ]
    try:
        for line in lines:
            body = {"user_id": "u1", "session_id": "s", "messages": [{"name": "Maya", "content": line}]}
            await svc.add_messages(ConversationRequest.model_validate(body))
    finally:
        await svc.close()
    concepts = entities(dump(tmp_path / "c.db"), "concept")
    assert {"entity:japan", "entity:tokyo", "entity:october", "entity:marco", "topic:trip"} <= set(concepts)
    assert not {"topic:please", "topic:ten", "topic:thousand", "topic:three", "entity:october-marco"} & set(concepts)


async def test_a_plan_made_from_stale_statistics_writes_nothing(tmp_path: Path) -> None:
    svc = await service(tmp_path / "c.db")
    try:
        first, second, *_ = calls()
        await svc.add_messages(first)
        stale = await plan_messages(svc.records, second, utc_now(), ExtractionOptions())
        await svc.add_messages(calls()[2])  # another writer commits first
        before = dump(tmp_path / "c.db")
        batch = build_batch(stale.records, svc.embedder)
        batch.state, batch.state_expect = stale.state, stale.expect
        with pytest.raises(StateChanged):
            await svc.writer.apply(batch)
        assert dump(tmp_path / "c.db") == before
        # the service plans again from what is committed
        done = await svc.add_messages(second)
        assert {m.status for m in done.messages} == {"added"}
    finally:
        await svc.close()


async def test_statistics_are_per_user_and_forgotten_with_the_user(tmp_path: Path) -> None:
    svc = await service(tmp_path / "c.db")
    try:
        for c in calls(user="u1"):
            await svc.add_messages(c)
        # u2 says "Clayworks" once: its own statistics start at one, whatever u1 said
        await svc.add_messages(request(0, [("Zoe", "We heard Clayworks closed early today.")], 0, user="u2"))
        u2 = dump(tmp_path / "c.db", "u2")
        term = json.loads(next(v for ns, k, v in u2["state"] if ns == "term" and k == "entity:clayworks"))
        assert term["df"] == 1
        assert all(json.loads(d).get("user_id") == "u2" for _, _, d in u2["entities"])
        await svc.delete_user("u1")
    finally:
        await svc.close()
    assert dump(tmp_path / "c.db", "u1") == {"entities": [], "edges": [], "state": []}
    assert dump(tmp_path / "c.db", "u2")["state"]


async def test_turn_by_turn_links_what_the_batch_import_links(tmp_path: Path) -> None:
    """The batch import (statistics over the whole conversation at once) and the route (statistics
    as they grow) agree on the concepts, up to the capitalisation a sentence-initial name gets."""
    svc = await service(tmp_path / "c.db")
    try:
        for c in calls(per_call=1):
            await svc.add_messages(c)
    finally:
        await svc.close()
    batch = import_conversation(locomo_sample())
    batch_concepts = {r.id for r in batch.records if isinstance(r, Concept)}
    turn_concepts = set(entities(dump(tmp_path / "c.db"), "concept"))
    assert len(batch_concepts & turn_concepts) >= 0.9 * len(batch_concepts | turn_concepts)
    batch_related = {
        (r.source, r.target) for r in batch.records if isinstance(r, Relation) and r.type is EdgeType.RELATED_TO
    }
    rows = dump(tmp_path / "c.db")
    turn_related = {(s, t) for s, t, ty, _, _ in rows["edges"] if ty == "RELATED_TO"}
    assert len(batch_related & turn_related) >= 0.7 * len(batch_related)
    assert sum(isinstance(r, MemoryUnit) for r in batch.records) == len(entities(rows, "memory_unit"))


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user_id": "u1", "session_id": "s", "messages": []}, "messages"),
        ({"user_id": "u1", "session_id": "s", "messages": [{"content": ""}]}, "messages.0.content"),
        ({"user_id": "u1", "session_id": "s", "messages": [{"content": "x", "role": "robot"}]}, "messages.0.role"),
        ({"user_id": "u1", "session_id": "s", "messages": [{"content": "x", "index": -1}]}, "messages.0.index"),
        ({"user_id": "u1", "session_id": "s\n", "messages": [{"content": "x"}]}, "session_id"),
        ({"user_id": "bad id", "session_id": "s", "messages": [{"content": "x"}]}, "user_id"),
        (
            {"user_id": "u1", "session_id": "s", "messages": [{"content": "x", "timestamp": "soon"}]},
            "messages.0.timestamp",
        ),
        ({"user_id": "u1", "session_id": "s", "messages": [{"content": "x"}], "extra": 1}, "extra"),
    ],
)
def test_bad_requests_name_their_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as err:
        ConversationRequest.model_validate(body)
    assert ".".join(str(p) for p in err.value.errors()[0]["loc"]) == field


async def test_appending_to_an_imported_session_never_overwrites_its_messages(tmp_path: Path) -> None:
    """A session that came in as records (an export imported with `hrt ingest`) has units at its
    messages' ids but no statistics: an append without positions goes after them, and an explicit
    position that one holds says `replaced`, never `added`."""
    svc = await service(tmp_path / "c.db")
    try:
        imported = [
            MemoryUnit(
                user_id="u1",
                muid=message_id("s", i),
                content=f'Maya said, "imported message {i}"',
                creation_ts=f"2026-01-01T10:0{i}:00Z",
                source_type="dialogue_turn",
            )
            for i in range(3)
        ]
        await svc.ingest(imported)
        body = {"user_id": "u1", "session_id": "s", "messages": [{"name": "Maya", "content": "a new message"}]}
        added = await svc.add_messages(ConversationRequest.model_validate(body))
        assert [(m.index, m.status) for m in added.messages] == [(3, "added")]
        units = await svc.records.get_many("u1", Kind.MEMORY_UNIT, [message_id("s", i) for i in range(4)])
        assert [units[message_id("s", i)].content for i in range(3)] == [u.content for u in imported]
        again = {**body, "messages": [{"name": "Maya", "content": "an edit of message 1", "index": 1}]}
        replaced = await svc.add_messages(ConversationRequest.model_validate(again))
        assert [(m.index, m.status) for m in replaced.messages] == [(1, "replaced")]
    finally:
        await svc.close()
