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
from hrt.ingest import build_batch
from hrt.pipeline import utc_now
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
