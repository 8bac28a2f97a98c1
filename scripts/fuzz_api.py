"""The long schemathesis run over a real ``hrt serve`` (the suite runs the same tests with 50
examples per operation and mode): ``python scripts/fuzz_api.py --examples 1000``. Writes
``bench-results/fuzz-api.json`` (examples, duration, outcome, HTTP statuses per route as the server
counted them); docs/security.md quotes it."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--examples", type=int, default=1000, help="examples per operation and generation mode")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "fuzz-api.json")
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = args.out.with_suffix(".statuses.json")
    env = {**os.environ, "HRT_FUZZ_EXAMPLES": str(args.examples), "HRT_FUZZ_REPORT": str(report)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/integration/test_fuzz_api.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = round(time.monotonic() - started, 1)
    tail = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else []
    result = {
        "command": f"python scripts/fuzz_api.py --examples {args.examples}",
        "examples_per_operation_and_mode": args.examples,
        "seconds": seconds,
        "pytest_exit": done.returncode,
        "pytest_summary": tail[0] if tail else "",
        **(json.loads(report.read_text()) if report.exists() else {}),
    }
    report.unlink(missing_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if done.returncode != 0:
        print(done.stdout[-20000:], file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
