"""A conversation whose plans changed, as a new user sends it to a real ``hrt serve`` (the real
embedder): the 22-turn chat of tests/data/japan_chat.json (a job, a family, a trip to Japan
planned for April, moved to October, Kyoto later dropped for Osaka, a shellfish allergy). The
agent must get today's plan first, the April plan marked as no longer true (or left out,
counted), the chat's subjects as concepts, one person per speaker, and an answer to a question
in plain words."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hrt.contract import AugmentedMemoryContext
from hrt.extraction.ids import message_id
from tests.integration.conftest import ServerProcess, start_hrt_server

pytestmark = pytest.mark.integration

CHAT = json.loads((Path(__file__).parent.parent / "data" / "japan_chat.json").read_text())
USER = "u-maya"
APRIL = message_id("chat-1", 2)  # "... We're going April 3-13, Tokyo first and then Kyoto."
APRIL_ECHO = message_id("chat-1", 3)  # "Tokyo and Kyoto in April is cherry blossom season"
MOVED = message_id("chat-2", 0)  # "... we moved the Japan trip to October ..."
DATES = message_id("chat-2", 2)  # "The new dates are October 8-18."
OSAKA = message_id("chat-3", 0)  # "... we're dropping Kyoto and doing Osaka instead ..."
ALLERGY = message_id("chat-1", 4)
AS_OF = "2026-11-28T00:00:00Z"  # eight months after the last message


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("changed-facts")
    srv = start_hrt_server(tmp / "srv.db", tmp / "server.log")
    try:
        for session in CHAT["sessions"]:
            messages = session["messages"]
            for i in range(0, len(messages), 4):
                body = {
                    "user_id": USER,
                    "session_id": session["session_id"],
                    "user_name": CHAT["user_name"],
                    "agent_name": CHAT["agent_name"],
                    "messages": messages[i : i + 4],
                }
                r = httpx.post(f"{srv.base_url}/v1/conversations", json=body, headers=srv.headers, timeout=120)
                assert r.status_code == 200, r.text
        yield srv
    finally:
        srv.stop()


def retrieve(server: ServerProcess, **body: Any) -> AugmentedMemoryContext:
    r = httpx.post(
        f"{server.base_url}/v1/retrieve",
        json={"user_id": USER, "as_of": AS_OF, **body},
        headers=server.headers,
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return AugmentedMemoryContext.model_validate_json(r.text)


@pytest.mark.parametrize(
    "ask",
    [
        {"query": "Where is she travelling?"},
        {"key_phrases": ["Japan trip", "travel plans"]},
        {"key_phrases": ["trip dates"]},
    ],
)
def test_the_changed_plan_comes_first_and_the_old_one_is_set_aside(server: ServerProcess, ask: dict[str, Any]) -> None:
    doc = retrieve(server, **ask)
    ranked = [u.muid for u in doc.retrieved_memory_units]
    plan = [m for m in ranked if m in {APRIL, APRIL_ECHO, MOVED, DATES, OSAKA}]
    assert plan and plan[0] in {MOVED, DATES, OSAKA}, ranked  # the first statement of the plan is today's
    assert {MOVED, DATES} & set(ranked)
    assert APRIL not in ranked and APRIL_ECHO not in ranked
    assert doc.retrieval_metadata.validity.suppressed["memory_unit"] >= 2
    # the rule that fired and what it ended are on the message that changed it
    changes = doc.retrieval_metadata.memory_unit_attributes[MOVED].metadata.get("changes") if MOVED in ranked else None
    assert changes is None or (changes["rule"] == "moved" and APRIL in changes["supersedes"])


def test_asked_with_the_old_facts_they_come_marked_and_after_the_current_ones(server: ServerProcess) -> None:
    doc = retrieve(
        server,
        key_phrases=["Japan trip in April", "Tokyo and Kyoto"],
        include_invalidated=True,
        limits={"memory_units": 22},
    )
    ranked = [u.muid for u in doc.retrieved_memory_units]
    intervals = doc.retrieval_metadata.validity.intervals
    assert APRIL in ranked, ranked
    assert intervals[APRIL].valid is False and MOVED in intervals[APRIL].superseded_by
    assert intervals[APRIL].valid_to == "2026-02-14T12:00:00Z"
    assert ranked.index(APRIL) > ranked.index(MOVED)  # after what replaced it
    # what HRT knew before the change: the April plan, current
    before = retrieve(server, key_phrases=["Japan trip in April"], as_of="2026-02-01T00:00:00Z")
    assert before.retrieved_memory_units[0].muid == APRIL


def test_the_subjects_stay_concepts_and_each_speaker_is_one_person(server: ServerProcess) -> None:
    for concept in ("entity:japan", "entity:tokyo", "entity:kyoto", "entity:osaka", "person:maya"):
        r = httpx.get(
            f"{server.base_url}/v1/users/{USER}/entities/concept/{concept}", headers=server.headers, timeout=30
        )
        assert r.status_code == 200, (concept, r.text)
    for noise in ("topic:please", "topic:ten", "person:user", "entity:october-marco"):
        r = httpx.get(f"{server.base_url}/v1/users/{USER}/entities/concept/{noise}", headers=server.headers, timeout=30)
        assert r.status_code == 404, noise
    doc = retrieve(server, key_phrases=["Maya's job"])
    speakers = {
        doc.retrieval_metadata.memory_unit_attributes[u.muid].source_agent_id for u in doc.retrieved_memory_units
    }
    assert speakers <= {"Maya", "Assistant"}


def test_a_question_in_plain_words_finds_the_allergy_and_each_phrase_keeps_its_hit(server: ServerProcess) -> None:
    doc = retrieve(server, query="Does she have any dietary restrictions?")
    assert ALLERGY in [u.muid for u in doc.retrieved_memory_units]
    both = retrieve(server, key_phrases=["food allergies", "Japan trip"])
    texts = " ".join(u.content_snippet for u in both.retrieved_memory_units)
    assert "shellfish allergy" in texts and ("Japan trip" in texts or "Osaka" in texts)
