"""A store records the model of its vectors and refuses another's (hrt/stores/vector_meta.py), and
`hrt reembed` (hrt/reembed.py) moves the embedded store to a new model in place, resumably."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from hrt.config import Settings
from hrt.errors import StoreError
from hrt.ingest import parse_jsonl
from hrt.records import Artifact, Concept, MemoryUnit, entity_text, passage_texts
from hrt.reembed import _Unchecked, reembed
from hrt.service import HRTService
from hrt.stores import vector_meta
from hrt.stores.embedded.store import EmbeddedStore
from tests.helpers import HashingEmbedder, jsonl, mu, small_graph


class OtherModel(HashingEmbedder):
    """Another model: the hashing embedder's vectors turned around (a different, deterministic map)."""

    name = model_id = "other-model"

    def __init__(self, fail_after: int | None = None) -> None:
        super().__init__()
        self.fail_after = fail_after

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise RuntimeError("killed mid-way")
        return np.ascontiguousarray(super().embed(texts)[:, ::-1])


def test_check_records_refuses_and_names_the_fix():
    assert vector_meta.check({}, 384, "bge-small-en-v1.5", "s") == {
        "embedding_model": "bge-small-en-v1.5",
        "embedding_dim": "384",
    }
    assert vector_meta.check({"embedding_dim": "384"}, 384, "m", "s") == {"embedding_model": "m"}
    assert vector_meta.check({"embedding_dim": "384", "embedding_model": "m"}, 384, "m", "s") == {}
    with pytest.raises(
        StoreError, match=r"'minilm-l6', not 'e5-small-v2'.*HRT_EMBEDDING_MODEL=e5-small-v2 hrt reembed"
    ):
        vector_meta.check({"embedding_model": "minilm-l6"}, 384, "e5-small-v2", "the store")
    with pytest.raises(StoreError, match="HRT_EMBEDDING_MODEL=minilm-l6 HRT_EMBEDDING_QUANTIZE=int8"):
        vector_meta.check({"embedding_model": "minilm-l6-int8"}, 384, "e5-small-v2", "the store")
    with pytest.raises(StoreError, match="768-dimensional"):
        vector_meta.check({"embedding_dim": "768"}, 384, "m", "s")
    with pytest.raises(StoreError, match="halfway through a re-embedding with 'm2'"):
        vector_meta.check({"embedding_model": "m", "reembed_target": "m2"}, 384, "m", "s")
    # a store written before models were recorded holds the default of then, all-MiniLM-L6-v2
    assert vector_meta.check({"embedding_dim": "384"}, 384, "minilm-l6", "s", has_vectors=True) == {
        "embedding_model": "minilm-l6"
    }
    with pytest.raises(StoreError, match=r"'minilm-l6', not 'bge-small-en-v1\.5'"):
        vector_meta.check({"embedding_dim": "384"}, 384, "bge-small-en-v1.5", "s", has_vectors=True)
    assert (
        vector_meta.check({}, 384, "bge-small-en-v1.5", "s", has_vectors=False)["embedding_model"]
        == "bge-small-en-v1.5"
    )
    assert vector_meta.cursor_of({"reembed_target": "m2", "reembed_cursor": '["u", "e"]'}, "m2") == ("u", "e")
    assert vector_meta.cursor_of({"reembed_target": "m2", "reembed_cursor": '["u", "e"]'}, "m3") is None


# memory units of several sentences: each sentence is embedded too (hrt.records.passage_texts)
LONG = [
    mu(user, f"{user}-long", "Postgres moved to version 16. The launch slipped a week. Budgets were cut in May.")
    for user in ("u1", "u2")
]


def _stored(db: Path) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray | None]]:
    store = EmbeddedStore(db, None)
    try:
        rows = store.db.execute("SELECT user_id, id, vec, passages FROM docs").fetchall()
    finally:
        store.close()
    out = {}
    for user, ident, vec, passages in rows:
        v = np.frombuffer(vec, dtype=np.float32)
        out[(user, ident)] = (
            v,
            None if passages is None else np.frombuffer(passages, dtype=np.float32).reshape(-1, len(v)),
        )
    return out


async def test_a_store_refuses_another_model_until_reembedded(tmp_path: Path):
    settings = Settings(db_path=tmp_path / "hrt.db", preload_users=0)
    records = parse_jsonl(jsonl(small_graph("u1") + small_graph("u2", prefix="x") + LONG))
    entities = {(r.user_id, r.id): r for r in records if isinstance(r, MemoryUnit | Concept | Artifact)}
    first = await HRTService(settings, embedder=HashingEmbedder()).start()
    await first.ingest(records)
    await first.close()
    with pytest.raises(StoreError, match="not 'other-model'"):
        HRTService(settings, embedder=OtherModel())

    # killed after its first page: the store says where it stopped and refuses both models
    service = await HRTService(settings, embedder=_Unchecked(OtherModel())).start()
    with pytest.raises(RuntimeError, match="killed"):
        await reembed(service.vector_rewriter(), OtherModel(fail_after=1), page=3)
    await service.close()
    for model in (HashingEmbedder(), OtherModel()):
        with pytest.raises(StoreError, match="halfway through a re-embedding with 'other-model'"):
            HRTService(settings, embedder=model)

    seen: list[tuple[int, int]] = []
    service = await HRTService(settings, embedder=_Unchecked(OtherModel())).start()
    result = await reembed(service.vector_rewriter(), OtherModel(), page=3, progress=lambda d, t: seen.append((d, t)))
    await service.close()
    assert result.resumed and result.previous == "hashing-test-embedder" and result.model_id == "other-model"
    assert result.entities == len(entities) - 3  # the first page was committed before the kill
    assert seen[0] == (3, len(entities)) and seen[-1] == (len(entities), len(entities))

    # every vector and passage is the new model's, and the store now opens with it alone
    model = OtherModel()
    stored = _stored(settings.db_path)
    assert set(stored) == set(entities)
    for key, entity in entities.items():
        vec, passages = stored[key]
        assert np.array_equal(vec, model.embed([entity_text(entity)])[0])
        texts = passage_texts(entity)
        if texts:
            assert passages is not None and np.array_equal(passages, model.embed(texts))
    with pytest.raises(StoreError, match="not 'hashing-test-embedder'"):
        HRTService(settings, embedder=HashingEmbedder())
    service = await HRTService(settings, embedder=OtherModel()).start()
    try:
        from hrt.contract import RetrieveRequest

        doc = await service.retrieve(
            RetrieveRequest(user_id="u1", key_phrases=["Postgres"], as_of="2026-01-01T00:00:00Z")
        )
        assert doc.retrieved_memory_units or doc.retrieved_concepts
        meta = await service.vector_rewriter().vector_meta()
        assert meta == {"embedding_model": "other-model", "embedding_dim": "64"}
    finally:
        await service.close()
