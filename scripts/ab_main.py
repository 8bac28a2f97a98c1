"""The hot-path guard: a paired A/B of the whole request, this tree against an earlier main.

The rule (docs/development.md, "Before a change to the request's path lands"): any change to what a
retrieval runs (pipeline, stores, scoring, the API's request path) is measured against the main it
branched from with this script, on the same host, and its summary goes in the closing note. Runs
minutes apart differ here by more than most changes, so only paired figures count.

    python scripts/ab_main.py --base 0ff2368                      # builds a 100k store once
    python scripts/ab_main.py --base 0ff2368 --store /tmp/b/work/embedded-100k.db

What it does: a ``git worktree`` of ``--base`` (detached, under ``--work``), a kept embedded store
of ``--size`` made by the base's own ``hrt bench --keep`` when none is given (composed vectors, so
no model pass at ingest), two copies of it (each side opens its own: a newer HRT migrates a store
that an older one then may not open), then ``scripts/serve_ab.py``: one ``hrt serve`` per tree,
every request to both in alternating order, answers compared byte for byte. The summary (p50, p95,
mean per side, per stage p50, identical answers) is printed and written to ``--out``.

Exit status: serve_ab's (1 when any answer differs) or 2 when a step before it failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def run(cmd: list[str], **kwargs: object) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def worktree(base: str, work: Path) -> Path:
    sha = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--short=10", base], check=True, capture_output=True, text=True
    ).stdout.strip()
    tree = work / f"tree-{sha}"
    if not (tree / "hrt").is_dir():
        run(["git", "-C", str(HERE), "worktree", "add", "--detach", "--force", str(tree), sha])
    return tree


def make_store(tree: Path, size: str, work: Path) -> Path:
    """A kept embedded store of ``size`` made by ``tree``'s own bench (so both sides can open it)."""
    out = work / f"store-{size}"
    store = out / "work" / f"embedded-{size}.db"
    if not store.exists():
        env = {**os.environ, "PYTHONPATH": str(tree)}
        cmd = [sys.executable, "-m", "hrt.cli", "bench", "--sizes", size, "--deployments", "embedded"]
        cmd += ["--fake-vectors", "--requests", "5", "--warmup", "1", "--concurrency", "1", "--keep", "--out", str(out)]
        usage = subprocess.run([*cmd[:4], "--help"], env=env, cwd="/", capture_output=True, text=True).stdout
        if "--writes" in usage:  # older benches measure no writes
            cmd += ["--writes", "0", "--trickle-s", "0"]
        if "--conversations" in usage:  # nor conversation calls: the kept store holds the generated graph alone
            cmd += ["--conversations", "0"]
        run(cmd, env=env, cwd="/")
    return store


def copy_store(store: Path, to: Path) -> Path:
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{store}{suffix}")
        if src.exists():
            shutil.copyfile(src, f"{to}{suffix}")
    ann = Path(f"{store}.ann")
    if ann.is_dir():
        shutil.rmtree(f"{to}.ann", ignore_errors=True)
        shutil.copytree(ann, f"{to}.ann")
        os.chmod(f"{to}.ann", 0o700)
    os.chmod(to, 0o600)
    return to


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the main to compare against (a commit, tag or branch)")
    ap.add_argument("--size", default="100k", help="bench size of the store (default 100k)")
    ap.add_argument("--tree", type=Path, help="the base already checked out here (no worktree is made)")
    ap.add_argument("--store", type=Path, help="a store kept by hrt bench --keep (default: made by the base)")
    ap.add_argument("--requests", type=int, default=300, help="measured requests per side (default 300)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/hrt-ab"), help="worktree and store copies")
    ap.add_argument("--out", type=Path, help="write the summary here too")
    ap.add_argument("--differ", type=Path, help="write each pair of differing answers here")
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for both servers, repeatable (HRT_AUTH=off against a base whose keys differ)",
    )
    args = ap.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        tree = args.tree.resolve() if args.tree else worktree(args.base, work)
        store = args.store.resolve() if args.store else make_store(tree, args.size, work)
        a = copy_store(store, work / "a.db")
        b = copy_store(store, work / "b.db")
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"ab_main: {exc}", file=sys.stderr)
        return 2
    cmd = [sys.executable, str(HERE / "scripts" / "serve_ab.py"), "--a", str(tree), "--b", str(HERE)]
    cmd += ["--db", str(a), "--size", args.size, "--requests", str(args.requests), "--b-env", f"HRT_DB_PATH={b}"]
    for pair in args.env:
        cmd += ["--a-env", pair, "--b-env", pair]
    if args.differ is not None:
        cmd += ["--differ", str(args.differ.resolve())]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
    sys.stderr.write(done.stderr[-4000:])
    summary = f"base {args.base} ({tree.name}) vs {HERE}\n{done.stdout}"
    print(summary, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(summary)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
