"""Which model wrote a store's vectors: recorded by every record store, checked when it opens.

A store keeps its vectors' model id and dimension (``embedding_model``, ``embedding_dim``) and,
while ``hrt reembed`` rewrites them, the model it is moving to (``reembed_target``) and how far it
got (``reembed_cursor``). A store opened by another model, or halfway through a re-embedding, is
refused with the command that fixes it: vectors of two models in one index would rank each other's
texts by a scale neither was trained on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from hrt.embedding_models import BUNDLED
from hrt.errors import StoreError

MODEL_KEY = "embedding_model"
DIM_KEY = "embedding_dim"
TARGET_KEY = "reembed_target"
CURSOR_KEY = "reembed_cursor"
KEYS = (MODEL_KEY, DIM_KEY, TARGET_KEY, CURSOR_KEY)
# the model of a store's vectors written before stores recorded it (the default until then)
LEGACY_MODEL = BUNDLED


def env_for(model_id: str) -> str:
    """The settings that load the model ``model_id`` names."""
    if model_id == f"{BUNDLED}-int8":
        return f"HRT_EMBEDDING_MODEL={BUNDLED} HRT_EMBEDDING_QUANTIZE=int8"
    return f"HRT_EMBEDDING_MODEL={model_id}"


def check(meta: Mapping[str, str], dim: int, model_id: str, where: str, has_vectors: bool = False) -> dict[str, str]:
    """Raise :class:`StoreError` unless the store's vectors are ``model_id``'s; return what to record.
    A new store takes this model. One that records none but ``has_vectors`` was written before
    models were recorded, when the default was all-MiniLM-L6-v2: it is taken as that model's."""
    recorded = meta
    if MODEL_KEY not in meta and has_vectors:
        meta = {**meta, MODEL_KEY: LEGACY_MODEL}
    target = meta.get(TARGET_KEY)
    if target:
        raise StoreError(
            f"{where} is halfway through a re-embedding with {target!r}; finish it with `{env_for(target)} hrt reembed`"
        )
    stored = meta.get(MODEL_KEY)
    if stored is not None and stored != model_id:
        raise StoreError(
            f"{where} holds vectors of the embedding model {stored!r}, not {model_id!r}: run with {env_for(stored)}, "
            f"or rewrite every vector with `{env_for(model_id)} hrt reembed`"
        )
    if DIM_KEY in meta and int(meta[DIM_KEY]) != dim:
        raise StoreError(
            f"{where} holds {meta[DIM_KEY]}-dimensional vectors but the embedder makes {dim}; use the model that "
            f"wrote them, or rewrite every vector with `hrt reembed`"
        )
    return {k: v for k, v in ((MODEL_KEY, model_id), (DIM_KEY, str(dim))) if k not in recorded}


def cursor_of(meta: Mapping[str, str], model_id: str) -> tuple[str, str] | None:
    """Where an unfinished re-embedding to ``model_id`` stopped (the last ``(user_id, id)`` it
    wrote), or None to start from the first entity."""
    if meta.get(TARGET_KEY) != model_id or not meta.get(CURSOR_KEY):
        return None
    user_id, entity_id = json.loads(meta[CURSOR_KEY])
    return str(user_id), str(entity_id)


def cursor_value(cursor: tuple[str, str]) -> str:
    return json.dumps(list(cursor))
