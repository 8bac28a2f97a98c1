"""`hrt reembed` in the services deployment: PostgreSQL's vectors of record are rewritten, Weaviate
receives them through the outbox, and PostgreSQL then refuses the old model (hrt/reembed.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hrt.errors import StoreError
from hrt.ingest import parse_jsonl
from hrt.records import Artifact, Concept, MemoryUnit, entity_text, passage_texts
from hrt.reembed import _Unchecked, reembed
from hrt.service import HRTService
from hrt.stores.postgres.migrate import migrate
from tests.helpers import HashingEmbedder, jsonl, services_settings, small_graph
from tests.unit.test_reembed import LONG, OtherModel

pytestmark = pytest.mark.integration


async def test_reembed_moves_postgres_and_weaviate_to_the_new_model(postgres_dsn, stack_manager, tmp_path: Path):
    stack = stack_manager.need("neo4j", "weaviate")
    migrate(postgres_dsn)
    settings = services_settings(stack, postgres_dsn, tmp_path / "s.db", "HRTReembed")
    records = parse_jsonl(jsonl(small_graph("u1") + small_graph("u2", prefix="x") + LONG))
    entities = {(r.user_id, r.id): r for r in records if isinstance(r, MemoryUnit | Concept | Artifact)}
    first = await HRTService(settings, embedder=HashingEmbedder()).start()
    try:
        await first.ingest(records)
        assert first.projector is not None and (await first.projector.drain()).ok
    finally:
        await first.close()
    with pytest.raises(StoreError, match="not 'other-model'"):
        await HRTService(settings, embedder=OtherModel()).start()

    service = await HRTService(settings, embedder=_Unchecked(OtherModel())).start()
    try:
        result = await reembed(service.vector_rewriter(), OtherModel(), page=4)
    finally:
        await service.close()
    assert result.entities == len(entities) and result.previous == "hashing-test-embedder"

    with pytest.raises(StoreError, match="not 'hashing-test-embedder'"):
        await HRTService(settings, embedder=HashingEmbedder()).start()
    model = OtherModel()
    service = await HRTService(settings, embedder=OtherModel()).start()
    try:
        for user in ("u1", "u2"):
            indexed = await service.vectors.docs(user)  # Weaviate, fed by the outbox
            mine = {i: e for (u, i), e in entities.items() if u == user}
            assert set(indexed) == set(mine)
            for ident, entity in mine.items():
                assert np.allclose(indexed[ident].vector, model.embed([entity_text(entity)])[0], atol=1e-6)
            with_passages = [i for i, e in mine.items() if passage_texts(e)]
            assert with_passages
            phrase = model.embed(["the new model's phrase"])
            sims = await service.vectors.passage_similarities(user, with_passages, phrase)
            for ident in with_passages:
                best = float(np.max(model.embed(passage_texts(mine[ident])) @ phrase[0]))
                assert sims[ident][1] == pytest.approx(best, abs=1e-5)
        assert (await service.records.outbox_stats())["vector"]["lag"] == 0
    finally:
        await service.close()
