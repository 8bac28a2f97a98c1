"""Transcript files as sessions of messages (``hrt ingest --conversation``): OpenAI-style chats as
JSON, ``{"messages": [...]}`` or JSON Lines, and LoCoMo's format, each with errors naming the file
position; and the command sending them in batches (against a stand-in service). The transcripts
here are made up for the tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hrt.cli import ingest_conversation, main
from hrt.errors import HRTError, InvalidInput, MalformedBody
from hrt.extraction.messages import ConversationRequest, ConversationResult, MessageResult
from hrt.extraction.transcripts import parse_transcript, read_transcript

CHAT = [
    {"role": "system", "content": "You are a travel assistant."},
    {"role": "user", "content": "We booked the ferry to Vis for June 3."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "t1", "type": "function"}]},
    {
        "role": "assistant",
        "name": "Pilot",
        "content": [
            {"type": "text", "text": "Noted."},
            {"type": "image_url", "image_url": {"url": "https://example.invalid/x.png"}},
            {"type": "text", "text": "The ferry leaves Split at 9."},
        ],
    },
    {"role": "developer", "content": "Answer in one line.", "metadata": {"source": "test"}},
]

SAMPLE = {
    "sample_id": "trip-1",
    "conversation": {
        "speaker_a": "Ines",
        "speaker_b": "Rafa",
        "session_1_date_time": "9:05 am on 4 March, 2024",
        "session_1": [
            {"speaker": "Ines", "dia_id": "D1:1", "text": "I started restoring an old sailboat."},
            {"speaker": "Rafa", "dia_id": "D1:2", "text": "", "blip_caption": "a wooden hull on trestles"},
            {"speaker": "Ines", "dia_id": "D1:3", "text": "Sanding takes forever.", "blip_caption": "sandpaper"},
        ],
        "session_2_date_time": "not a date",
        "session_2": [{"speaker": "Rafa", "dia_id": "D2:1", "text": "Is the boat in the water yet?"}],
        "session_3": [],
    },
}


def parse(value: object, name: str = "chat.json", session: str | None = None) -> list:
    return parse_transcript(json.dumps(value).encode(), name, session)


def test_an_openai_chat_is_one_session_of_its_messages_with_text():
    [session] = parse(CHAT, session="trip")
    assert session.session_id == "trip" and session.user_id is None and session.skipped == 1
    roles = [(m.role, m.name, m.index) for m in session.messages]
    # developer is a system message; the tool call without text is skipped; indexes are file positions
    assert roles == [("system", None, 0), ("user", None, 1), ("assistant", "Pilot", 3), ("system", None, 4)]
    assert session.messages[2].content == "Noted.\nThe ferry leaves Split at 9."  # text parts joined
    assert session.messages[3].metadata == {"source": "test"}
    # the same messages as {"messages": [...]} and as JSON Lines
    assert parse({"messages": CHAT}, session="trip") == [session]
    lines = "\n".join(json.dumps(m) for m in CHAT) + "\n\n"
    assert parse_transcript(lines.encode(), "chat.jsonl", "trip") == [session]


def test_a_file_names_its_session_by_its_stem_unless_told(tmp_path: Path):
    path = tmp_path / "kitchen-remodel.jsonl"
    path.write_text('{"role": "user", "content": "The tiles arrive Friday."}\n', encoding="utf-8")
    [session] = read_transcript(path)
    assert session.session_id == "kitchen-remodel" and session.messages[0].content == "The tiles arrive Friday."
    assert read_transcript(path, "s-9")[0].session_id == "s-9"


def test_locomo_sessions_are_dated_turns_with_speakers_captions_and_dialog_ids():
    sessions = parse(SAMPLE, "locomo.json")
    assert [s.session_id for s in sessions] == ["session-1", "session-2"]
    assert {s.user_id for s in sessions} == {"locomo-trip-1"}
    first = sessions[0].messages
    assert [(m.name, m.index, m.metadata["dia_id"]) for m in first] == [
        ("Ines", 0, "D1:1"),
        ("Rafa", 1, "D1:2"),
        ("Ines", 2, "D1:3"),
    ]
    assert first[1].content == "[image: a wooden hull on trestles]"
    assert first[2].content == "Sanding takes forever. [image: sandpaper]"
    start = datetime(2024, 3, 4, 9, 5, tzinfo=UTC)
    assert [m.timestamp for m in first] == [start.replace(second=s) for s in (0, 1, 2)]
    # a session without a readable date starts a day after the previous one
    assert sessions[1].messages[0].timestamp == datetime(2024, 3, 5, 9, 5, tzinfo=UTC)
    # a list of samples: each its own user
    other = {**SAMPLE, "sample_id": "trip-2"}
    assert {s.user_id for s in parse([SAMPLE, other], "locomo.json")} == {"locomo-trip-1", "locomo-trip-2"}


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        (json.dumps([{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}]), "[1].role", "robot"),
        (json.dumps({"messages": [{"content": 7}]}), "messages[0].content", "string or a list"),
        (json.dumps([{"content": [{"type": "text", "text": 3}]}]), "[0].content[0].text", "must be a string"),
        (json.dumps([{"content": "x", "timestamp": "soon"}]), "[0].timestamp", "ISO 8601"),
        (json.dumps([{"content": "x", "name": ""}]), "[0].name", "at least 1"),
        ('{"role": "user", "content": "a"}\n{"role": "user", "content": \n', "line 2", "line 2"),
        (json.dumps([{"content": None}]), "messages", "no message with text"),
        (json.dumps({"title": "not a transcript"}), "file", "neither"),
        ("", "file", "empty"),
    ],
)
def test_errors_name_the_file_and_the_position(raw: str, field: str, words: str):
    with pytest.raises(InvalidInput) as caught:
        parse_transcript(raw.encode(), "bad.json", None)
    assert caught.value.field is not None and caught.value.field.startswith(field)
    assert caught.value.message.startswith("bad.json") and words in caught.value.message


def test_a_locomo_file_keeps_its_own_session_names_and_bytes_must_be_utf8():
    with pytest.raises(InvalidInput) as caught:
        parse(SAMPLE, "locomo.json", session="mine")
    assert caught.value.field == "session_id"
    with pytest.raises(MalformedBody):
        parse_transcript(b"\xff\xfe[]", "x.json")


def test_a_json_file_that_is_not_json_is_reported_as_one_not_as_lines():
    with pytest.raises(MalformedBody) as caught:
        parse_transcript(b'[\n  {"role": "user", "content": "a"},\n]\n', "broken.json")
    assert caught.value.field == "file" and caught.value.message.startswith("broken.json: not valid JSON")


class FakeService:
    """Answers add_messages as a first write would: every message added."""

    def __init__(self) -> None:
        self.requests: list[ConversationRequest] = []

    async def add_messages(
        self, request: ConversationRequest, written_by: str | None = None, tenant: str | None = None, **_: object
    ) -> ConversationResult:
        """As the CLI's use case calls it (:func:`hrt.usecases.add_messages`): the operator's, no writer."""
        assert written_by is None and tenant is None
        self.requests.append(request)
        done = [
            MessageResult(index=m.index or 0, muid=f"{request.session_id}:{m.index}", status="added")
            for m in request.messages
        ]
        return ConversationResult(
            user_id=request.user_id,
            session_id=request.session_id,
            messages=done,
            concepts_linked=1,
            concepts_unlinked=0,
            relations=len(done),
        )


async def test_hrt_ingest_conversation_sends_each_session_in_batches_and_sums_them_up(tmp_path: Path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(CHAT), encoding="utf-8")
    service = FakeService()
    lines = await ingest_conversation(
        service,  # type: ignore[arg-type]
        path,
        "u-trip",
        None,
        "agent-1",
        3,
        names=("Maya", "Guide"),
    )
    assert [len(r.messages) for r in service.requests] == [3, 1]  # 4 messages with text, 3 a call
    speakers = {r.speaker(m) for r in service.requests for m in r.messages if not m.name}
    assert speakers == {"Maya", "System"} and {(r.user_name, r.agent_name) for r in service.requests} == {
        ("Maya", "Guide")
    }
    assert {(r.user_id, r.session_id, r.agent_id) for r in service.requests} == {("u-trip", "chat", "agent-1")}
    assert lines == [
        {
            "user_id": "u-trip",
            "session_id": "chat",
            "messages": 4,
            "skipped": 1,
            "added": 4,
            "unchanged": 0,
            "replaced": 0,
            "concepts_linked": 2,
            "relations": 4,
        }
    ]
    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps([SAMPLE, {**SAMPLE, "sample_id": "trip-2"}]), encoding="utf-8")
    service = FakeService()
    lines = await ingest_conversation(service, locomo, None, None, None, 20)  # type: ignore[arg-type]
    assert [(x["user_id"], x["session_id"], x["messages"]) for x in lines] == [
        ("locomo-trip-1", "session-1", 3),
        ("locomo-trip-1", "session-2", 1),
        ("locomo-trip-2", "session-1", 3),
        ("locomo-trip-2", "session-2", 1),
    ]
    with pytest.raises(HRTError, match="leave out --user"):
        await ingest_conversation(service, locomo, "u-one", None, None, 20)  # type: ignore[arg-type]
    with pytest.raises(HRTError, match="give --user"):
        await ingest_conversation(service, path, None, None, None, 20)  # type: ignore[arg-type]


def test_hrt_ingest_takes_a_records_file_or_a_conversation(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["ingest"]) == 2
    assert "give a JSONL file of records, or --conversation FILE" in capsys.readouterr().err
    assert main(["ingest", "x.jsonl", "--conversation", "y.json"]) == 2
    assert main(["ingest", "x.jsonl", "--user", "u1"]) == 2
    assert "--conversation only" in capsys.readouterr().err
