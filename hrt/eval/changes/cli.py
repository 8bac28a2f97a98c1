"""``hrt eval changes`` (and ``python -m hrt.eval changes``): the command line."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from hrt.embedder import Embedder
from hrt.eval.changes.data import DEFAULT_DATA, DataError, load
from hrt.eval.changes.report import markdown, summarise, write_outputs
from hrt.eval.changes.runner import PER_CALL, evaluate
from hrt.extraction.messages import MAX_MESSAGES

log = logging.getLogger("hrt.eval.changes")

DEFAULT_OUT = Path("eval-results/changes")


class UsageError(Exception):
    """A bad argument: the command prints it as one ``hrt: error:`` line and exits 2."""


class Parser(argparse.ArgumentParser):
    """argparse, whose errors are one ``hrt: error:`` line (no usage block) and exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def per_call(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= value <= MAX_MESSAGES:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_MESSAGES}, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="hrt eval changes",
        description="Changed facts: do retrievals return what is true now, above what no longer is, and mark the "
        "old facts? Conversations in which facts change (or do not), sent turn by turn (docs/eval-changes.md).",
    )
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="the conversations (default: the packaged conversations.json)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default: %(default)s)")
    parser.add_argument(
        "--per-call", type=per_call, default=PER_CALL, help="messages per conversation call (default: %(default)s)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of the markdown tables")
    return parser


def run(args: argparse.Namespace, embedder: Embedder | None = None) -> int:
    """Run the evaluation the parsed arguments describe; ``embedder`` defaults to the configured
    model (``HRT_EMBEDDING_MODEL``)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"argument --out: {args.out} is not a directory")
    conversations = load(args.data)
    if embedder is None:
        from hrt.config import Settings
        from hrt.service import load_embedder

        embedder = load_embedder(Settings())
    with tempfile.TemporaryDirectory(prefix="hrt-changes-") as tmp:
        runs, meta = asyncio.run(
            evaluate(conversations, embedder, Path(tmp) / "changes.db", per_call=args.per_call, progress=log.info)
        )
    data = args.data.read_bytes()
    meta["data"] = {"file": args.data.name, "sha256": hashlib.sha256(data).hexdigest()}
    summary = summarise(runs, meta)
    paths = write_outputs(summary, runs, args.out)
    sys.stdout.write(json.dumps(summary, indent=2, ensure_ascii=False) + "\n" if args.json else markdown(summary))
    log.info("wrote %s", ", ".join(str(p) for p in paths.values()))
    return 0


def main(argv: Sequence[str] | None = None, embedder: Embedder | None = None) -> int:
    """Entry point of ``hrt eval changes``: ``main(["--out", DIR, ...])``. A bad argument or data
    file is one ``hrt: error:`` line on stderr and exit status 2."""
    try:
        return run(build_parser().parse_args(argv), embedder)
    except (UsageError, DataError) as exc:
        print(f"hrt: error: {exc}", file=sys.stderr)
        return 2
