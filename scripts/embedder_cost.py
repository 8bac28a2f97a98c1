"""What each embedding model costs on this machine: a request's key phrases, and ingest's texts.

    python scripts/embedder_cost.py [--models ID ...] [--out FILE.json]

Per model (HRT_EMBEDDING_THREADS threads, as the server runs it):
- ``phrases_p50_ms`` / ``phrases_p95_ms``: one ``embed_queries`` call of 3 new key phrases (what a
  request's intake stage waits for), over 200 calls of phrases never seen before;
- ``texts_per_s``: ``embed`` of the sample graph's entity texts and passages (hrt/sample_data), in
  the batches ingest makes (256 entities a call).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from hrt.config import Settings
from hrt.embedding_models import MODEL_IDS
from hrt.ingest import parse_jsonl
from hrt.records import Artifact, Concept, MemoryUnit, entity_text, passage_texts

SAMPLE = Path(__file__).resolve().parents[1] / "hrt" / "sample_data" / "sample_graph.jsonl"
WORDS = [
    "project",
    "launch",
    "budget",
    "hiking",
    "sister",
    "painting",
    "meeting",
    "deadline",
    "beach",
    "garden",
    "recipe",
    "concert",
]


def phrases(n: int) -> list[list[str]]:
    """``n`` requests of 3 distinct key phrases, each phrase new (no embedding cache helps)."""
    out = []
    for i in range(n):
        a, b, c = (WORDS[(i + k) % len(WORDS)] for k in (0, 3, 7))
        out.append([f"{a} plans {i}", f"the {b} with friends {i}", f"{c} last week {i}"])
    return out


def measure(model_id: str, settings: Settings) -> dict[str, float | str]:
    from hrt.onnx_embedder import OnnxEmbedder

    quantize = "int8" if model_id.endswith("-int8") else "off"
    base = model_id.removesuffix("-int8") if model_id.startswith("minilm") else model_id
    embedder = OnnxEmbedder(
        base, cache_dir=settings.cache_root() / "onnx", threads=settings.embedding_threads, quantize=quantize
    )
    for ps in phrases(5):  # warm up
        embedder.embed_queries(ps)
    times = []
    for ps in phrases(200):
        t = time.perf_counter()
        embedder.embed_queries(ps)
        times.append((time.perf_counter() - t) * 1000)
    records = parse_jsonl(SAMPLE.read_text().splitlines())
    records = [r for r in records if isinstance(r, MemoryUnit | Concept | Artifact)]
    texts = [entity_text(r) for r in records] + [p for r in records for p in passage_texts(r)]
    t = time.perf_counter()
    for i in range(0, len(texts), 256):
        embedder.embed(texts[i : i + 256])
    seconds = time.perf_counter() - t
    times.sort()
    return {
        "model": embedder.model_id,
        "phrases_p50_ms": round(statistics.median(times), 2),
        "phrases_p95_ms": round(times[int(len(times) * 0.95)], 2),
        "texts": len(texts),
        "texts_per_s": round(len(texts) / seconds, 1),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=[*MODEL_IDS, "minilm-l6-int8"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    settings = Settings()
    rows = []
    for model_id in args.models:
        rows.append(measure(model_id, settings))
        print(json.dumps(rows[-1]), file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"threads": settings.embedding_threads, "models": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
