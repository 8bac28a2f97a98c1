"""Filters pushed down into search (SearchFilter): the embedded index's masks, the schema step that
backfills what they read, and a filtered request that still fills its limits."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hrt.config import Settings
from hrt.contract import RetrieveRequest
from hrt.ingest import parse_jsonl
from hrt.records import Kind
from hrt.service import HRTService
from hrt.stores.base import SearchFilter
from hrt.stores.embedded.store import EmbeddedStore
from tests.helpers import HashingEmbedder, concept, jsonl, mu, rel, small_graph

ALL = list(Kind)


async def search(svc: HRTService, user: str, phrase: str, where: SearchFilter | None, k: int = 20):
    [hits] = await svc.vectors.search(user, [phrase], svc.embedder.embed([phrase]), ALL, k, None, where=where)
    return {h.id for h in hits}


async def test_tags_agents_and_time_let_through_only_what_a_request_can_return(loaded_service):
    svc = loaded_service
    everything = await search(svc, "u1", "Phoenix bandwidth Postgres billing", None)
    assert {"m1", "m2", "m3", "c-phx", "c-bw"} <= everything
    tagged = await search(svc, "u1", "Phoenix bandwidth Postgres billing", SearchFilter(tags=("phoenix", "people")))
    assert {h for h in tagged if h.startswith("m")} == {"m1", "m2"}  # memory units with a wanted tag
    assert {"c-phx", "c-bw", "a1"} <= tagged  # concepts and artifacts carry no tags: they pass
    by_agent = await search(
        svc, "u1", "Phoenix bandwidth Postgres billing", SearchFilter(source_agent_ids=("meeting-agent",))
    )
    assert {h for h in by_agent if h.startswith("m")} == {"m1"}
    both = SearchFilter(tags=("phoenix", "infra"), source_agent_ids=("dialogue-agent",))
    assert {h for h in await search(svc, "u1", "Phoenix Postgres", both) if h.startswith("m")} == {"m3", "m4"}
    june = SearchFilter(ts_from=1749513600.0, ts_to=1749859200.0)  # 2025-06-10 to 2025-06-14 UTC
    dated = await search(svc, "u1", "Phoenix bandwidth Postgres billing", june)
    assert {h for h in dated if not h.startswith("c")} == {"m1", "m2"}  # a1 (06-15) and m3 (07-01) fall outside
    assert {"c-phx", "c-bw"} <= dated  # concepts have no time: they pass
    assert await search(svc, "u2", "Phoenix", SearchFilter(tags=("phoenix",))) >= {"xm1"}  # per user


async def test_a_filtered_request_fills_its_limits(tmp_path: Path, monkeypatch):
    """Twenty notes match the phrase better than the five tagged ones; with 6 hits per leg (the
    concept and five notes) the unfiltered search never reaches the tagged ones, the pushed-down
    one does."""
    records = [concept("u", "c-launch", "Launch", "The product launch.")]
    for i in range(20):
        records.append(
            mu("u", f"plain{i:02d}", f"launch launch launch plan notes {i}", f"2025-05-{i + 1:02d}T10:00:00Z")
        )
    for i in range(5):
        records.append(
            mu("u", f"tagged{i}", f"launch retrospective item {i}", f"2025-06-{i + 1:02d}T10:00:00Z", tags=["retro"])
        )
    records += [rel("u", "MENTIONS", f"plain{i:02d}", "c-launch") for i in range(20)]
    settings = Settings(db_path=tmp_path / "f.db", search_k=6, seeds_per_phrase=6, default_depth=0, threshold_min=0.2)
    svc = HRTService(settings, embedder=HashingEmbedder())
    body = {"user_id": "u", "key_phrases": ["launch"], "as_of": "2026-01-01T00:00:00Z", "filters": {"tags": ["retro"]}}
    try:
        await svc.ingest(parse_jsonl(jsonl(records)))
        doc = await svc.retrieve(RetrieveRequest.model_validate(body))
        from hrt.pipeline import grounding

        monkeypatch.setattr(grounding, "search_filter", lambda filters, valid_at=None: None)  # as before the pushdown
        unfiltered_search = await svc.retrieve(RetrieveRequest.model_validate(body))
    finally:
        await svc.close()
    returned = [m.muid for m in doc.retrieved_memory_units]
    assert len(returned) == 5 and all(i.startswith("tagged") for i in returned)
    assert len(unfiltered_search.retrieved_memory_units) < 5


async def test_the_schema_step_backfills_tags_and_agents_of_stored_documents(tmp_path: Path):
    db = tmp_path / "old.db"
    svc = HRTService(Settings(db_path=db), embedder=HashingEmbedder())
    await svc.ingest(parse_jsonl(jsonl(small_graph("u1"))))
    await svc.close()
    with sqlite3.connect(db) as conn:  # as a store from before the step: no such columns
        conn.execute("ALTER TABLE docs DROP COLUMN tags")
        conn.execute("ALTER TABLE docs DROP COLUMN source_agent_id")
        conn.execute("DELETE FROM schema_migrations WHERE version = 3")
    store = EmbeddedStore(db, dim=None)
    assert store.applied_on_open == [3]
    rows = dict(store.db.execute("SELECT id, tags FROM docs WHERE kind = 'memory_unit'").fetchall())
    store.close()
    assert rows["m1"] == '["phoenix"]' and rows["m2"] == '["people"]'
    svc = HRTService(Settings(db_path=db), embedder=HashingEmbedder())
    try:
        assert {
            h
            for h in await search(svc, "u1", "Phoenix bandwidth", SearchFilter(tags=("phoenix",)))
            if h.startswith("m")
        } == {"m1"}
    finally:
        await svc.close()
