"""``hrt eval locomo`` (and ``python -m hrt.eval locomo``): the command line."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hrt.config import Settings
from hrt.embedder import CachedEmbedder, Embedder
from hrt.eval.locomo.compare import compare_report
from hrt.eval.locomo.evaluation import NOTES, evaluate, import_samples, notes_options
from hrt.eval.locomo.importer import ImportOptions
from hrt.eval.locomo.misses import MissReport, analyse, write_misses
from hrt.eval.locomo.misses import markdown as misses_markdown
from hrt.eval.locomo.questions import PHRASE_MODES
from hrt.eval.locomo.report import markdown_report, write_outputs
from hrt.eval.locomo.sidebyside import FILE as SIDE_BY_SIDE_FILE
from hrt.eval.locomo.sidebyside import RUNS, read_run, run_folder, side_by_side_markdown
from hrt.eval.locomo.systems import DEFAULT_SYSTEMS, DEPRECATED_SYSTEMS, EVAL_SETTINGS, SYSTEMS, EvalConfig
from hrt.extraction.locomo import load_samples

log = logging.getLogger("hrt.eval.locomo")

DEFAULT_DATA = Path("../shared/data/locomo-dev.json")


def _system(name: str) -> str:
    """A ``--systems`` name; a deprecated one is taken under its new name, with a warning."""
    if name in DEPRECATED_SYSTEMS:
        new = DEPRECATED_SYSTEMS[name]
        print(f"hrt: warning: the system {name} is now called {new}; the old name will go", file=sys.stderr)
        return new
    if name not in SYSTEMS:
        raise argparse.ArgumentTypeError(f"unknown system; one of {', '.join(SYSTEMS)}")
    return name


def _setting(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or key not in Settings.model_fields:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME a Settings field, got {text!r}")
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add_input_arguments(parser)
    _add_system_arguments(parser)
    _add_ingest_arguments(parser)
    _add_mode_arguments(parser)


def _add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """What to read and where to write."""
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a LoCoMo JSON file (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("eval-results/locomo"), help="output directory")
    parser.add_argument("--db", type=Path, default=None, help="the embedded store to build (default: a temp file)")
    parser.add_argument("--limit-questions", type=int, default=None, help="only the first N questions (quick runs)")
    parser.add_argument("--conversations", nargs="*", default=None, help="only these sample_ids")


def _add_system_arguments(parser: argparse.ArgumentParser) -> None:
    """Which systems answer, and how HRT's are set."""
    parser.add_argument(
        "--systems",
        nargs="*",
        type=_system,
        default=list(DEFAULT_SYSTEMS),
        metavar="SYSTEM",
        help=f"systems to run, of: {' '.join(SYSTEMS)} (default: all)",
    )
    parser.add_argument(
        "--depth",
        type=int,
        default=None,
        help="max_depth of the two headline rows (default: none, HRT_DEFAULT_DEPTH decides)",
    )
    parser.add_argument(
        "--phrases", default=EvalConfig().phrases, choices=PHRASE_MODES, help="key phrases per question (%(default)s)"
    )
    parser.add_argument(
        "--setting",
        type=_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Settings override for every HRT system, repeatable (default: none, the product's defaults)",
    )


def _add_ingest_arguments(parser: argparse.ArgumentParser) -> None:
    """How the conversations reach the store."""
    parser.add_argument(
        "--ingest",
        choices=("batch", "turns"),
        default="batch",
        help="batch: each conversation's records as the batch import builds them (statistics over the whole "
        "conversation); turns: its turns sent to the conversation route session by session, a few per call, as "
        "an agent would (default: %(default)s)",
    )
    parser.add_argument(
        "--turns-per-call", type=int, default=4, help="messages per conversation call with --ingest turns (%(default)s)"
    )
    parser.add_argument(
        "--notes",
        choices=NOTES,
        default="none",
        help="none: the rules alone, as an HRT user has them (turns, and the concepts HRT's rules extract); "
        "dataset: also LoCoMo's own LLM-written session summaries and observations, as artifacts "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="run the questions four times, the rules alone and with the dataset's notes, each batch and turn by "
        "turn (--notes and --ingest are then ignored), each into OUT/<notes>-<ingest>, and write the table "
        "OUT/locomo-side-by-side.md",
    )


def _add_mode_arguments(parser: argparse.ArgumentParser) -> None:
    """The runs that are not a plain run: comparisons, misses, experiments."""
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("BEFORE", "AFTER"),
        default=None,
        help="no run: paired bootstrap of two runs' locomo-questions.jsonl (DIR or DIR:SYSTEM, or FILE:SYSTEM), "
        "after minus before, for every system both hold (or the two named)",
    )
    parser.add_argument(
        "--misses",
        action="store_true",
        help="no run: on the store --db holds (kept by a batch run of the same data and code), why each evidence "
        "turn the headline request's walk misses is not a candidate (hrt/eval/locomo/misses.py); writes "
        "locomo-misses.md, .json and .jsonl to --out",
    )
    parser.add_argument(
        "--experimental-path-sum",
        action="store_true",
        help="every HRT request overrides path_evidence to noisy_or: a candidate's path evidence is the noisy-or "
        "of its direct evidence and every seed's best path to it, instead of the best path (Proposal B)",
    )


def run(args: argparse.Namespace, embedder: Embedder | None = None) -> int:
    """Run the evaluation the parsed arguments describe; ``embedder`` defaults to the configured
    model (``HRT_EMBEDDING_MODEL``, the bundled all-MiniLM-L6-v2)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.compare:
        sys.stdout.write(compare_report(*args.compare))
        return 0
    if not args.data.exists():
        log.error("%s not found (LoCoMo data is read at run time; see LOCOMO-NOTICE.md)", args.data)
        return 2
    samples = load_samples(args.data)
    if args.conversations:
        samples = [s for s in samples if str(s.get("sample_id")) in set(args.conversations)]
    if not samples:
        log.error("no conversation to evaluate in %s", args.data)
        return 2
    if args.misses and (args.db is None or not args.db.exists()):
        log.error("--misses reads a kept store: give --db PATH of a run (hrt eval locomo --db PATH ...)")
        return 2
    if embedder is None:
        from hrt.service import load_embedder

        embedder = load_embedder(Settings())
    config = EvalConfig(
        depth=args.depth,
        phrases=args.phrases,
        settings={**EVAL_SETTINGS, **dict(args.setting)},
        experimental_path_sum=args.experimental_path_sum,
    )
    if args.misses:
        options = notes_options(args.notes)
        report = asyncio.run(run_misses(samples, embedder, args.db, config, args.depth, options))
        paths = write_misses(report, args.out)
        sys.stdout.write(misses_markdown(report))
        log.info("wrote %s", ", ".join(str(p) for p in paths.values()))
        return 0
    if not args.side_by_side:
        _run_once(args, samples, embedder, config, args.notes, args.ingest, args.out)
        return 0
    runs = []
    for notes, ingest in RUNS:
        folder = run_folder(args.out, notes, ingest)
        log.info("side by side: notes %s, ingest %s -> %s", notes, ingest, folder)
        _run_once(args, samples, embedder, config, notes, ingest, folder)
        runs.append((notes, ingest, read_run(folder)))
    table = side_by_side_markdown(runs)
    (args.out / SIDE_BY_SIDE_FILE).write_text(table, encoding="utf-8")
    sys.stdout.write(table)
    return 0


def _run_once(
    args: argparse.Namespace,
    samples: Sequence[Mapping[str, Any]],
    embedder: Embedder,
    config: EvalConfig,
    notes: str,
    ingest: str,
    out: Path,
) -> None:
    """One evaluation on a fresh store (``--db``, or a temporary file), its outputs in ``out``."""
    with tempfile.TemporaryDirectory(prefix="hrt-locomo-") as tmp:
        db = args.db or Path(tmp) / "locomo.db"
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        result = asyncio.run(
            evaluate(
                samples,
                embedder,
                db,
                config=config,
                systems=args.systems,
                limit_questions=args.limit_questions,
                progress=log.info,
                import_options=notes_options(notes),
                ingest=ingest,
                turns_per_call=args.turns_per_call,
            )
        )
    result.meta["data"] = {"file": args.data.name, "sha256": hashlib.sha256(args.data.read_bytes()).hexdigest()}
    paths = write_outputs(result, out)
    sys.stdout.write(markdown_report(result))
    log.info("wrote %s", ", ".join(str(p) for p in paths.values()))


async def run_misses(
    samples: Sequence[Mapping[str, Any]],
    embedder: Embedder,
    db: Path,
    config: EvalConfig,
    depth: int | None,
    options: ImportOptions | None = None,
) -> MissReport:
    """``--misses``: the samples imported again in memory as the run imported them (``options``: its
    ``--notes``), their questions and too-common concepts, the kept store opened as the run left it,
    every question's misses classified."""
    from hrt.service import HRTService

    imported, questions, _ = import_samples(samples, options)
    service = HRTService(Settings(db_path=db, **config.settings), embedder=CachedEmbedder(embedder, 8192))
    await service.start()
    try:
        return await analyse(service.tool, imported, questions, config, depth, progress=log.info)
    finally:
        await service.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hrt eval locomo", description="Evidence retrieval on LoCoMo: HRT against BM25, dense and hybrid RRF."
    )
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``hrt eval locomo``: ``main(["--data", PATH, "--out", DIR, ...])``."""
    return run(build_parser().parse_args(argv))
