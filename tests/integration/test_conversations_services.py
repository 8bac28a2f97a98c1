"""Conversation memory (#32) in the services deployment: the statistics live in PostgreSQL beside
the records, the graph and vectors reach Neo4j and Weaviate through the outbox, and the embedded
deployment given the same calls builds the same graph."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from hrt.config import Settings
from hrt.contract import RetrieveRequest
from hrt.errors import StateChanged
from hrt.extraction.conversation import ExtractionOptions, plan_messages
from hrt.extraction.ids import message_id
from hrt.extraction.messages import ConversationRequest
from hrt.ingest import build_batch
from hrt.pipeline import utc_now
from hrt.records import Kind
from hrt.service import HRTService
from hrt.stores.postgres.migrate import migrate
from tests.helpers import services_settings as make_services_settings
from tests.unit.test_conversations import calls

pytestmark = pytest.mark.integration


async def test_messages_in_services_match_the_embedded_graph(
    real_embedder, postgres_dsn, stack_manager, tmp_path: Path
):
    stack = stack_manager.need("neo4j", "weaviate")
    migrate(postgres_dsn)
    services_settings = make_services_settings(stack, postgres_dsn, tmp_path / "s.db", "HRTConversations")
    user = "conv-" + uuid.uuid4().hex[:8]
    services = await HRTService(services_settings, embedder=real_embedder).start()
    embedded = await HRTService(Settings(db_path=tmp_path / "e.db"), embedder=real_embedder).start()
    try:
        for c in calls(user=user):
            a = await services.add_messages(c)
            b = await embedded.add_messages(c)
            assert a == b  # the same ids, statuses and counts
        again = await services.add_messages(calls(user=user)[0])
        assert {m.status for m in again.messages} == {"unchanged"}
        assert services.projector is not None and (await services.projector.drain()).ok
        # the records and relations are the embedded ones
        assert await services.records.counts(user) == await embedded.records.counts(user)
        assert await services.records.all_relations(user) == await embedded.records.all_relations(user)
        # and the graph and vectors answered from Neo4j and Weaviate: units with concepts and paths
        ask = RetrieveRequest(user_id=user, key_phrases=["pottery class at Clayworks"], as_of="2026-12-01T00:00:00Z")
        doc = await services.retrieve(ask)
        assert not doc.retrieval_metadata.degraded
        assert message_id("s0", 0) in {m.muid for m in doc.retrieved_memory_units}
        assert "entity:clayworks" in {c.id for c in doc.retrieved_concepts}
        paths = [p for p in doc.retrieval_metadata.provenance.values() if p.hops]
        assert paths, "something was reached through the graph"
        # a plan made from statistics another writer has since changed writes nothing in PostgreSQL
        stale = await plan_messages(services.records, calls(user=user + "x")[0], utc_now(), ExtractionOptions())
        await services.add_messages(calls(user=user + "x")[0])
        before = await services.records.counts(user + "x")
        batch = build_batch(stale.records, services.embedder)
        batch.state, batch.state_expect = stale.state, stale.expect
        with pytest.raises(StateChanged):
            await services.writer.apply(batch)
        assert await services.records.counts(user + "x") == before
        # forgetting the user forgets its statistics
        await services.delete_user(user)
        assert await services.records.state_scan(user, "term", "") == {}
    finally:
        await services.close()
        await embedded.close()


async def test_a_changed_plan_is_superseded_alike_in_services_and_embedded(
    real_embedder, postgres_dsn, stack_manager, tmp_path: Path
):
    """The chat of tests/data/japan_chat.json in both deployments: the same supersessions, and a
    retrieval from Neo4j and Weaviate sets the April plan aside as the embedded one does."""
    import json

    chat = json.loads((Path(__file__).parent.parent / "data" / "japan_chat.json").read_text())
    stack = stack_manager.need("neo4j", "weaviate")
    migrate(postgres_dsn)
    services_settings = make_services_settings(stack, postgres_dsn, tmp_path / "s.db", "HRTChangedFacts")
    user = "maya-" + uuid.uuid4().hex[:8]
    services = await HRTService(services_settings, embedder=real_embedder).start()
    embedded = await HRTService(Settings(db_path=tmp_path / "e.db"), embedder=real_embedder).start()
    april, moved = message_id("chat-1", 2), message_id("chat-2", 0)
    try:
        for session in chat["sessions"]:
            for i in range(0, len(session["messages"]), 4):
                call = ConversationRequest.model_validate(
                    {
                        "user_id": user,
                        "session_id": session["session_id"],
                        "user_name": chat["user_name"],
                        "agent_name": chat["agent_name"],
                        "messages": session["messages"][i : i + 4],
                    }
                )
                assert await services.add_messages(call) == await embedded.add_messages(call)
        assert services.projector is not None and (await services.projector.drain()).ok
        units = await services.records.get_many(user, Kind.MEMORY_UNIT, [moved])
        assert april in units[moved].supersedes  # type: ignore[union-attr]
        ask = RetrieveRequest(user_id=user, key_phrases=["Japan trip", "travel plans"], as_of="2026-11-28T00:00:00Z")
        docs = [await services.retrieve(ask), await embedded.retrieve(ask)]
        for doc in docs:
            assert not doc.retrieval_metadata.degraded
            assert april not in {m.muid for m in doc.retrieved_memory_units}
            assert doc.retrieval_metadata.validity.suppressed["memory_unit"] >= 2
        marked = RetrieveRequest.model_validate(
            {
                "user_id": user,
                "key_phrases": ["Japan trip in April"],
                "as_of": "2026-11-28T00:00:00Z",
                "include_invalidated": True,
                "limits": {"memory_units": 22},
            }
        )
        for doc in [await services.retrieve(marked), await embedded.retrieve(marked)]:
            intervals = doc.retrieval_metadata.validity.intervals
            assert any(not v.valid and moved in v.superseded_by for v in intervals.values())
    finally:
        await services.close()
        await embedded.close()
