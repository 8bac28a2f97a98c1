"""Digest of HRT's responses to a fixed set of requests: the before/after check of a refactor.

    python scripts/response_digest.py --out before.json [--locomo ../shared/data/locomo-dev.json]
    (change the code)
    python scripts/response_digest.py --out after.json [--locomo ...]
    python scripts/response_digest.py --compare before.json after.json

A change that adds a response field on purpose is checked for changing nothing else with ``--drop``
(e.g. ``--drop retrieval_metadata.validity``: the field is removed before hashing); one that changes
the bundled sample graph, with ``--sample`` naming the graph the "before" run read.

The requests: on the bundled sample graph, each demo request at every depth, with each weight preset,
with filters, a score floor and a rendered context; on LoCoMo (optional, read at run time, never
committed), every question as ``hrt eval locomo`` asks it, with the evaluation's weights and with the
defaults. Each response is the canonical JSON with a pinned ``as_of``, hashed with SHA-256; the
comparison names every request whose bytes differ. The embedded deployment, in-process.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

DEMO_AS_OF = "2026-03-20T12:00:00Z"


def sample_requests() -> list[dict[str, Any]]:
    from hrt.cli import DEMO_REQUESTS
    from hrt.config import WEIGHT_PRESETS

    out: list[dict[str, Any]] = []
    for base in DEMO_REQUESTS:
        body = {k: v for k, v in base.items() if k != "max_depth"}
        for depth in (0, 1, 2, 3):
            out.append({**body, "max_depth": depth})
        for preset in sorted(WEIGHT_PRESETS):
            out.append({**body, "weights_preset": preset})
        out.append({**body, "filters": {"tags": ["work"]}})
        out.append({**body, "min_score": 0.3})
        out.append({**body, "render": {"format": "markdown", "max_chars": 1200}})
        out.append({**body, "limits": {"memory_units": 3, "concepts": 2, "artifacts": 1}})
    return [{**b, "as_of": DEMO_AS_OF} for b in out]


def digest(text: str, drop: tuple[str, ...] = ()) -> str:
    if drop:
        from hrt.contract import canonical_dumps

        data = json.loads(text)
        for dotted in drop:
            *parents, last = dotted.split(".")
            node = data
            for key in parents:
                node = node.get(key, {})
            node.pop(last, None)
        text = canonical_dumps(data)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


async def run(
    locomo: Path | None, limit: int | None, sample: Path | None = None, drop: tuple[str, ...] = ()
) -> dict[str, str]:
    from hrt.cli import ingest_file, sample_data_path
    from hrt.config import load_settings
    from hrt.contract import RetrieveRequest
    from hrt.service import HRTService

    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        service = await HRTService(load_settings(db_path=Path(tmp) / "sample.db")).start()
        try:
            await ingest_file(service, sample or sample_data_path(), None)
            for i, body in enumerate(sample_requests()):
                ctx = await service.retrieve(RetrieveRequest.model_validate(body))
                out[f"sample/{i:03d} {json.dumps(body, sort_keys=True)}"] = digest(ctx.canonical_json(), drop)
        finally:
            await service.close()
        if locomo is not None:
            from hrt.eval.locomo import (
                EVAL_WEIGHTS,
                EvalConfig,
                build_questions,
                import_conversation,
                load_samples,
                request_for,
            )

            service = await HRTService(load_settings(db_path=Path(tmp) / "locomo.db")).start()
            try:
                samples = load_samples(locomo)
                imported = [import_conversation(s) for s in samples]
                for conv in imported:
                    await service.ingest(conv.records)
                cfg = EvalConfig()
                n = 0
                for sample, conv in zip(samples, imported, strict=True):
                    for q in build_questions(sample, conv)[0]:
                        if limit is not None and n >= limit:
                            break
                        n += 1
                        for label, weights in (("eval", EVAL_WEIGHTS), ("defaults", None)):
                            ctx = await service.retrieve(request_for(q, cfg, None, weights))
                            out[f"locomo/{q.user_id}/{n:04d}/{label}"] = digest(ctx.canonical_json(), drop)
            finally:
                await service.close()
    return out


def compare(before: Path, after: Path) -> int:
    a = json.loads(before.read_text(encoding="utf-8"))
    b = json.loads(after.read_text(encoding="utf-8"))
    differ = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    only = sorted(a.keys() ^ b.keys())
    print(f"{len(a.keys() & b.keys())} requests in both, {len(differ)} differ, {len(only)} in one only")
    for k in differ[:20] + only[:20]:
        print("  " + k[:160])
    return 1 if differ or only else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--locomo", type=Path, help="a LoCoMo file (e.g. ../shared/data/locomo-dev.json)")
    ap.add_argument("--limit", type=int, default=None, help="at most this many LoCoMo questions")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--sample", type=Path, help="the sample graph to read (default: the bundled one)")
    ap.add_argument("--drop", action="append", default=[], help="a response key removed before hashing (dotted)")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        ap.error("--out or --compare")
    result = asyncio.run(run(args.locomo, args.limit, args.sample, tuple(args.drop)))
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(result)} responses digested into {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
