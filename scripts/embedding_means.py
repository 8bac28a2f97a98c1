"""Write ``hrt/embedding_means.json``: each prebuilt embedding model's mean vector.

Recipe (``RECIPE``): every whole word of the model's WordPiece vocabulary (ASCII letters only, at
least three of them, in vocabulary order), embedded as a passage (the model's passage prefix, no
centering), averaged in float64, rounded to 7 decimals. The words are the model's own and the same
on every machine; no corpus of anyone's is read.

    python scripts/embedding_means.py [MODEL_ID ...]     # default: every prebuilt model
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from hrt.embedding_models import PREBUILT
from hrt.onnx_embedder import OnnxEmbedder

RECIPE = "vocabulary words [A-Za-z]{3,} in vocabulary order, as passages, mean in float64, 7 decimals"
OUT = Path(__file__).resolve().parents[1] / "hrt" / "embedding_means.json"


def vocabulary_words(tokenizer_json: Path) -> list[str]:
    vocab = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]["vocab"]
    ordered = sorted(vocab.items(), key=lambda item: item[1])
    return [w for w, _ in ordered if len(w) >= 3 and w.isascii() and w.isalpha()]


def mean_of(model_id: str, limit: int | None = None) -> np.ndarray:
    """The recipe's mean for ``model_id`` (over its first ``limit`` words when given: tests)."""
    embedder = OnnxEmbedder(model_id, threads=0, center=False)
    tokenizer = embedder.layout.transformer_dir / PREBUILT[model_id].tokenizer_member
    words = vocabulary_words(tokenizer)[:limit]
    vectors = embedder.embed(words).astype(np.float64)
    return np.round(vectors.mean(axis=0), 7)


def main(argv: list[str]) -> int:
    ids = argv or list(PREBUILT)
    data = json.loads(OUT.read_text(encoding="utf-8")) if OUT.exists() else {"recipe": RECIPE, "models": {}}
    data["recipe"] = RECIPE
    for model_id in ids:
        started = time.perf_counter()
        data["models"][model_id] = {"mean": [float(x) for x in mean_of(model_id)]}
        print(f"{model_id}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    models = sorted(data["models"].items())
    rows = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in models)
    OUT.write_text(f'{{\n "recipe": {json.dumps(RECIPE)},\n "models": {{\n{rows}\n }}\n}}\n', encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
