"""What a conversation costs to write, turn by turn, as ``hrt eval locomo --ingest turns`` feeds it:
LoCoMo conversations sent to ``HRTService.add_messages`` (the handler of ``POST /v1/conversations``)
session by session, a few messages a call, in the embedded deployment or the services one (the dev
stack: PostgreSQL, Neo4j, Weaviate, started here and stopped after).

    python scripts/conversation_cost.py --deployment embedded --out bench-results/conversations-32/embedded.json
    python scripts/conversation_cost.py --deployment services --out bench-results/conversations-32/services.json

Per turn: a call's time over its messages, p50 and p95, over every call and over the last tenth
(the conversation's end, where the statistics are largest); per call too. The bundled embedder
(HRT_EMBEDDING_MODEL) embeds, as a server would. The data is read at run time, never stored.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from hrt.config import Settings
from hrt.eval.locomo.evaluation import ingest_cost, ingest_turns
from hrt.eval.locomo.importer import import_conversation
from hrt.extraction.locomo import load_samples
from hrt.service import HRTService, load_embedder


async def feed(settings: Settings, samples: list[dict[str, Any]], per_call: int) -> dict[str, Any]:
    service = await HRTService(settings, embedder=load_embedder(settings)).start()
    try:
        out: dict[str, Any] = {}
        every: list[tuple[int, float]] = []
        for sample in samples:
            conv = import_conversation(sample)
            await service.delete_user(conv.user_id)
            calls: list[tuple[int, float]] = []
            start = time.perf_counter()
            await ingest_turns(service, conv, per_call, calls)
            out[conv.sample_id] = {
                "turns": sum(n for n, _ in calls),
                "seconds": round(time.perf_counter() - start, 2),
                **ingest_cost(calls),
                "counts": await service.records.counts(conv.user_id),
            }
            every.extend(calls)
        out["all"] = ingest_cost(every)
        return out
    finally:
        await service.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("../shared/data/locomo-dev.json"))
    ap.add_argument("--conversations", nargs="*", default=None, help="sample ids (default: every one in --data)")
    ap.add_argument("--deployment", choices=("embedded", "services"), default="embedded")
    ap.add_argument("--per-call", type=int, default=4, help="messages per call (%(default)s)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures here as JSON too")
    args = ap.parse_args()
    samples = load_samples(args.data)
    if args.conversations:
        samples = [s for s in samples if str(s.get("sample_id")) in set(args.conversations)]
    with tempfile.TemporaryDirectory(prefix="hrt-conv-cost-") as tmp:
        if args.deployment == "embedded":
            figures = asyncio.run(feed(Settings(db_path=Path(tmp) / "c.db"), samples, args.per_call))
        else:
            from hrt import devstack
            from hrt.bench.targets import services_target

            # its own folder, which devstack opens to PostgreSQL's user (tmp is private to this one)
            stack_dir = Path(tempfile.mkdtemp(prefix="hrt-conv-stack-"))
            stack = devstack.up(stack_dir, devstack.SERVICES)
            try:
                target = services_target(stack, "conv")
                settings = Settings(db_path=Path(tmp) / "unused.db", **target.settings)
                figures = asyncio.run(feed(settings, samples, args.per_call))
            finally:
                for info in stack.services.values():
                    devstack.stop_pid(info.pid)
                shutil.rmtree(stack_dir, ignore_errors=True)
    result = {
        "command": f"python scripts/conversation_cost.py --deployment {args.deployment} --per-call {args.per_call}",
        "deployment": args.deployment,
        "per_call": args.per_call,
        "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "figures": figures,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
