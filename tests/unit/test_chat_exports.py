"""ChatGPT and Claude data exports read as sessions (``hrt ingest --conversation conversations.json``):
the branch the user saw, the roles and text parts kept, what was left out counted by reason, and
errors naming the conversation and the field. And one reading of a message's content for every
entry point: the CLI, ``POST /v1/conversations`` and MCP ``remember``. The exports under
tests/data/exports are made up for these tests."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hrt.errors import InvalidInput
from hrt.extraction.exports import export_kind
from hrt.extraction.transcripts import parse_transcript_file, read_transcript_file
from hrt.extraction.wire import conversation_request, parse_conversation_body

DATA = Path(__file__).parent.parent / "data" / "exports"
CHATGPT = json.loads((DATA / "chatgpt_conversations.json").read_text(encoding="utf-8"))
CLAUDE = json.loads((DATA / "claude_conversations.json").read_text(encoding="utf-8"))


def test_a_chatgpt_export_is_the_branch_the_user_saw_with_what_was_left_out_by_reason():
    read = read_transcript_file(DATA / "chatgpt_conversations.json")
    assert (read.source, read.conversations, read.empty) == ("chatgpt", 2, 1)  # "New chat" holds nothing
    [session] = read.sessions
    assert session.session_id == "chatgpt-6a1f0c2e-0000-4000-8000-00000000a001" and session.user_id is None
    said = [(m.index, m.role, m.content.split()[0]) for m in session.messages]
    # the regenerated question about watering (another branch) is not sent; positions are the branch's
    assert said == [(1, "user", "I"), (2, "assistant", "Garlic"), (3, "user", "My"), (7, "assistant", "Then")]
    assert session.messages[0].timestamp == datetime(2024, 5, 1, 8, 0, tzinfo=UTC)
    assert session.messages[2].content.endswith("first Tuesday.")  # the image part left out
    assert session.messages[0].metadata == {"source": "chatgpt-export", "message_id": "u1"}
    assert dict(session.reasons) == {
        "non_text_content": 1,  # the code run
        "non_text_part": 1,  # the image
        "other_branch": 2,  # the first version of the question and its answer
        "system": 1,
        "tool": 1,
        "tool_call": 1,  # the assistant's message to the browser
    }
    assert session.skipped == 7


def test_a_claude_export_is_one_session_per_conversation_with_its_text_parts():
    read = read_transcript_file(DATA / "claude_conversations.json")
    assert (read.source, read.conversations, read.empty) == ("claude", 2, 1)
    [session] = read.sessions
    assert session.session_id == "claude-0b7d9e4a-0000-4000-8000-0000000c0001"
    assert [(m.index, m.role) for m in session.messages] == [(0, "user"), (1, "assistant"), (3, "user")]
    # the thinking and the tool use are not text; a message without content parts has its text
    assert session.messages[1].content.startswith("Split the forty minutes")
    assert session.messages[2].content == "My teacher Benedikt wants the Sarabande memorised by August."
    assert session.messages[1].timestamp == datetime(2024, 6, 2, 18, 0, 9, tzinfo=UTC)
    assert dict(session.reasons) == {"attachment": 1, "empty": 1, "non_text_part": 2}


def test_an_export_is_told_apart_from_a_chat_and_names_its_own_sessions():
    assert export_kind(CHATGPT) == "chatgpt" and export_kind(CLAUDE) == "claude"
    assert export_kind([{"role": "user", "content": "hi"}]) is None and export_kind([]) is None
    with pytest.raises(InvalidInput) as caught:
        parse_transcript_file(json.dumps(CLAUDE).encode(), "conversations.json", "mine")
    assert caught.value.field == "session_id"


def _broken(data: list[dict[str, Any]], path: tuple[Any, ...], value: Any) -> bytes:
    data = copy.deepcopy(data)
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        (_broken(CHATGPT, (0, "current_node"), "nowhere"), "[0].current_node", "must name a node"),
        (_broken(CHATGPT, (0, "mapping", "u1", "message", "author"), {}), "[0].mapping['u1'].message.author.role", ""),
        (
            _broken(CHATGPT, (0, "mapping", "u1", "message", "create_time"), "May 1st"),
            "[0].mapping['u1'].message.create_time",
            "epoch",
        ),
        (
            _broken(CHATGPT, (0, "mapping", "u1", "message", "content", "parts"), "text"),
            "[0].mapping['u1'].message.content.parts",
            "list",
        ),
        (_broken(CHATGPT, (0, "mapping", "u1", "parent"), "u1"), "[0].mapping", "cycle"),
        (_broken(CHATGPT, (0, "conversation_id"), 7), "[0].conversation_id", "id"),
        (
            _broken(CLAUDE, (0, "chat_messages", 1, "sender"), "robot"),
            "[0].chat_messages[1].sender",
            "human or assistant",
        ),
        (
            _broken(CLAUDE, (0, "chat_messages", 0, "created_at"), "yesterday"),
            "[0].chat_messages[0].timestamp",
            "ISO 8601",
        ),
        (
            _broken(CLAUDE, (0, "chat_messages", 1, "content", 1, "text"), 5),
            "[0].chat_messages[1].content[1].text",
            "string",
        ),
        (_broken(CLAUDE, (0, "chat_messages"), {}), "[0].chat_messages", "list"),
    ],
)
def test_a_malformed_export_names_the_conversation_and_the_field(raw: bytes, field: str, words: str):
    with pytest.raises(InvalidInput) as caught:
        parse_transcript_file(raw, "conversations.json")
    assert caught.value.field == field
    head = caught.value.message.split(": ")[0:2]
    assert head[0] == "conversations.json" and head[1].startswith(f"conversation {field[:3]}")
    assert "(id '" in caught.value.message or field.endswith(("conversation_id", "uuid"))
    assert words in caught.value.message


def test_every_entry_point_reads_content_parts_alike():
    parts = [{"type": "text", "text": "The ferry leaves Split at 9."}, {"type": "image_url"}, "Bring tickets."]
    body = {"user_id": "u1", "session_id": "s", "messages": [{"role": "developer", "content": parts}]}
    by_route = parse_conversation_body(json.dumps(body).encode())
    by_tool = conversation_request(body)
    by_cli = parse_transcript_file(json.dumps(body["messages"]).encode(), "chat.json", "s").sessions[0]
    assert by_route.messages[0].content == by_tool.messages[0].content == by_cli.messages[0].content
    assert by_route.messages[0].content == "The ferry leaves Split at 9.\nBring tickets."
    assert by_route.messages[0].role == by_cli.messages[0].role == "system"
    # a list without text is no message; a text part whose text is no string is named
    for content, field in (
        (([{"type": "image_url"}]), "messages[0].content"),
        ([{"type": "text"}], "messages[0].content"),
    ):
        with pytest.raises(InvalidInput) as caught:
            parse_conversation_body(json.dumps({**body, "messages": [{"content": content}]}).encode())
        assert caught.value.field == field
    with pytest.raises(InvalidInput) as caught:
        parse_conversation_body(json.dumps({**body, "messages": [{"content": [{"type": "text", "text": 3}]}]}).encode())
    assert (
        "content[0].text: must be a string" in caught.value.message and "3" not in caught.value.message.split(":")[-1]
    )


def test_a_body_s_messages_are_validated_from_their_own_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """The route's body goes bytes -> text -> messages: each message is validated from its span of
    the body (decoded once only to check its bounds), never encoded again from a decoded value; the
    MCP tool's arguments, which arrive decoded, are."""
    from types import SimpleNamespace

    from hrt.extraction import wire

    body = {"user_id": "u1", "session_id": "s", "messages": [{"content": "the ferry", "metadata": {"n": 1e2}}]}
    expected = conversation_request(body)

    def encoded_again(value: Any) -> str:
        raise AssertionError("a message was encoded again")

    monkeypatch.setattr(wire, "json", SimpleNamespace(dumps=encoded_again))
    assert parse_conversation_body(json.dumps(body).encode()) == expected
    with pytest.raises(AssertionError, match="encoded again"):
        conversation_request(body)
