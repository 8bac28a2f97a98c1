"""What validity intervals (#20) cost a request: interleaved in one process, on a store a bench run
kept, each request run with the validity work on and off, alternating.

    hrt bench --sizes 100k --deployments embedded --fake-vectors --requests 40 --keep --out /tmp/b100
    python scripts/validity_ab.py --db /tmp/b100/work/embedded-100k.db --size 100k

"Off" is HRT as before #20: no validity stage (no SUPERSEDES read, nothing set aside), no
``valid_at`` in search's filter, no ``valid_at`` in the walk. Bench runs minutes apart differ here by
more than this change (docs/bench.md), so it is judged this way. Prints the expansion stage's and
the whole request's p50 and mean per side.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path
from typing import Any


async def run(db: Path, size: str, requests: int, warmup: int, seed: int) -> dict[str, dict[str, list[float]]]:
    from hrt.bench.stats import parse_size, size_label
    from hrt.bench.synth import SynthConfig, key_phrases
    from hrt.config import load_settings
    from hrt.contract import RetrieveRequest
    from hrt.pipeline import expansion, grounding, intake
    from hrt.pipeline.validity import Validity
    from hrt.service import HRTService

    entities = parse_size(size)
    label = size_label(entities)
    cfg = SynthConfig(entities=entities, seed=seed, user_id=f"bench-{label}", id_prefix=f"{label}-")
    svc = await HRTService(load_settings(db_path=db)).start()
    as_of = cfg.as_of().strftime("%Y-%m-%dT%H:%M:%SZ")

    async def no_validity(it: Any, candidates: Any, graph: Any) -> Validity:
        return Validity(list(candidates), at=it.event_time.timestamp())

    real_validity, real_filter = expansion.run_validity, grounding.search_filter
    real_prop = intake.Intake.validity_filter

    def switch(on: bool) -> None:
        expansion.run_validity = real_validity if on else no_validity  # type: ignore[assignment]
        grounding.search_filter = real_filter if on else (lambda f, valid_at=None: real_filter(f))  # type: ignore[assignment]
        intake.Intake.validity_filter = real_prop if on else property(lambda self: None)  # type: ignore[assignment,method-assign]

    out: dict[str, dict[str, list[float]]] = {
        "on": {"expansion": [], "total": []},
        "off": {"expansion": [], "total": []},
    }
    try:
        for i, phrases in enumerate(key_phrases(cfg, warmup + requests, salt="validity-ab")):
            body = {"user_id": cfg.user_id, "key_phrases": phrases, "as_of": as_of, "max_depth": 2}
            request = RetrieveRequest.model_validate(body)
            for side in ("on", "off") if i % 2 else ("off", "on"):
                switch(side == "on")
                _, timings = await svc.tool.run(request)
                if i >= warmup:
                    out[side]["expansion"].append(timings["expansion"] * 1000)
                    out[side]["total"].append(timings["total"] * 1000)
    finally:
        switch(True)
        await svc.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, type=Path, help="an embedded store kept by hrt bench --keep")
    ap.add_argument("--size", required=True, help="the bench size the store was made for: 10k, 100k, 1m")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    result = asyncio.run(run(args.db, args.size, args.requests, args.warmup, args.seed))
    for side, stages in result.items():
        figures = ", ".join(
            f"{stage} p50 {statistics.median(v):.2f} ms mean {statistics.mean(v):.2f} ms" for stage, v in stages.items()
        )
        print(f"validity {side:3s}: {figures} ({len(stages['total'])} requests)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
