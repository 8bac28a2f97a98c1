"""The run (:func:`evaluate`): import every conversation into one embedded store, ask every
question of every system, aggregate the metrics.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hrt.config import Settings, Weights
from hrt.contract import RetrievalPresetName, RetrieveRequest
from hrt.embedder import CachedEmbedder, Embedder
from hrt.eval.locomo.importer import ImportedConversation, ImportOptions, import_conversation
from hrt.eval.locomo.metrics import PER_QUESTION_METRICS, RENDERED_METRICS, Ranking, aggregate, question_metrics
from hrt.eval.locomo.questions import Question, build_questions
from hrt.eval.locomo.systems import (
    HRT_SYSTEMS,
    SYSTEMS,
    EvalConfig,
    PhraseTally,
    System,
    Traced,
    _jsonable,
    baseline_systems,
    hrt_system,
)
from hrt.extraction.messages import ConversationRequest, Message
from hrt.extraction.notes import NOTE_ARTIFACT_TYPE
from hrt.ingest import Record
from hrt.pipeline import effective_config
from hrt.records import Artifact, EdgeType, MemoryUnit, Relation

if TYPE_CHECKING:
    from hrt.service import HRTService

# messages per conversation call in ``--ingest turns``: an agent writes back a turn or two at a time
TURNS_PER_CALL = 4
# ``--notes``: none, the rules alone (turns, and the concepts and relations HRT's rules extract: what
# an HRT user has); dataset, also LoCoMo's own LLM-written session summaries and observations as
# artifacts, which no HRT user has
NOTES = ("none", "dataset")


def notes_options(notes: str, base: ImportOptions | None = None) -> ImportOptions:
    """The import options of ``--notes`` (over ``base``, default the import's defaults)."""
    if notes not in NOTES:
        raise ValueError(f"unknown notes {notes!r}; one of {', '.join(NOTES)}")
    dataset = notes == "dataset"
    return replace(base or ImportOptions(), with_summaries=dataset, with_observations=dataset)


def notes_of(options: ImportOptions) -> str:
    """What ``options`` import of the dataset's notes: none, dataset (both), or the one kind."""
    if options.with_summaries and options.with_observations:
        return "dataset"
    if options.with_summaries or options.with_observations:
        return "summaries" if options.with_summaries else "observations"
    return "none"


@dataclass(slots=True)
class EvalResult:
    systems: dict[str, dict[str, dict[str, float]]]  # system -> group -> metric -> value
    per_question: list[dict[str, Any]]
    meta: dict[str, Any]


async def evaluate(
    samples: Sequence[Mapping[str, Any]],
    embedder: Embedder,
    db_path: Path,
    *,
    config: EvalConfig | None = None,
    import_options: ImportOptions | None = None,
    systems: Sequence[str] = SYSTEMS,
    limit_questions: int | None = None,
    progress: Callable[[str], None] | None = None,
    ingest: str = "batch",
    turns_per_call: int = TURNS_PER_CALL,
) -> EvalResult:
    """Import every sample into a fresh embedded store at ``db_path``, ask every question of every
    system (all on that one store and ``embedder``), and aggregate the metrics.

    ``import_options`` default to the rules alone (``notes_options("none")``: no dataset summary or
    observation). ``ingest``: ``batch`` writes each conversation's records as the batch import
    builds them (statistics over the whole conversation); ``turns`` sends its turns to the
    conversation route (:meth:`HRTService.add_messages`), session by session in calls of
    ``turns_per_call`` messages as an agent would, then the dataset's session summaries and
    observations as records when the options import them."""
    from hrt.service import HRTService

    cfg = config or EvalConfig()
    options = import_options or notes_options("none")
    say = progress or (lambda _msg: None)
    t0 = time.perf_counter()
    imported, questions, skipped = import_samples(samples, options)
    if limit_questions is not None:
        questions = questions[:limit_questions]
    phrases = sorted({p for q in questions for p in (q.text, *q.key_phrases(cfg.phrases))})
    overrides: dict[str, Any] = {"db_path": db_path, "embedding_cache_size": max(4096, len(phrases) + 1024)}
    overrides.update(cfg.settings)
    settings = Settings(**overrides)
    service = HRTService(settings, embedder=_cached(embedder, settings))
    await service.start()
    try:
        done = await _ingest_all(service, samples, imported, questions, ingest, turns_per_call, limit_questions, say)
        service.embedder.embed_queries(phrases)  # one batch; every request below hits the cache
        derived = {c.user_id: c.derived_from for c in imported}
        baselines = baseline_systems(service, derived, cfg.top_k, cfg.render_budgets)
        traced = Traced()
        tallies: dict[str, PhraseTally] = {}
        runners = _runners(systems, baselines, service, derived, cfg, traced, tallies)
        rows, seconds, per_question = await _ask(done.questions, runners, say)
        meta = _run_meta(imported, done, skipped, embedder, cfg, settings, options, runners, tallies, seconds, t0)
        return EvalResult({name: aggregate(rows[name]) for name in runners}, per_question, meta)
    finally:
        await service.close()


@dataclass(frozen=True, slots=True)
class _Ingested:
    """What the ingest left: the questions to ask, its time and, turn by turn, each call's."""

    questions: list[Question]
    ingest: str
    turns_per_call: int
    seconds: float
    call_ms: list[tuple[int, float]]  # (messages, ms) per conversation call


async def _ingest_all(
    service: HRTService,
    samples: Sequence[Mapping[str, Any]],
    imported: Sequence[ImportedConversation],
    questions: list[Question],
    ingest: str,
    turns_per_call: int,
    limit_questions: int | None,
    say: Callable[[str], None],
) -> _Ingested:
    """Every conversation into the store: as the batch import built it, or turn by turn (``turns``:
    then the questions are those of the store the turns built)."""
    t_import = time.perf_counter()
    call_ms: list[tuple[int, float]] = []
    if ingest == "turns":
        questions = await _ingest_by_turns(service, samples, imported, turns_per_call, call_ms, say)
        if limit_questions is not None:
            questions = questions[:limit_questions]
    else:
        for conv in imported:
            say(f"import {conv.sample_id}: {conv.counts}")
            await service.ingest(conv.records)
    return _Ingested(questions, ingest, turns_per_call, time.perf_counter() - t_import, call_ms)


def _run_meta(
    imported: Sequence[ImportedConversation],
    done: _Ingested,
    skipped: int,
    embedder: Embedder,
    cfg: EvalConfig,
    settings: Settings,
    options: ImportOptions,
    runners: Mapping[str, Any],
    tallies: Mapping[str, PhraseTally],
    seconds: Mapping[str, float],
    t0: float,
) -> dict[str, Any]:
    """The run's description: what was imported and asked, how, and how long it took."""
    return {
        "conversations": [c.sample_id for c in imported],
        "import_counts": {c.sample_id: c.counts for c in imported},
        "questions": len(done.questions),
        "questions_skipped_without_evidence": skipped,
        "embedder": getattr(embedder, "name", type(embedder).__name__),
        "config": cfg.as_json(),
        "hrt_systems": {n: _system_json(n, cfg, settings) for n in runners if n in HRT_SYSTEMS},
        "config_hash": settings.fingerprint(),
        "notes": notes_of(options),
        "import_options": _options_json(options),
        "ingest": done.ingest,
        # per HRT system: key phrases asked, those no entity grounded, and their share
        "unmatched_phrases": {n: t.as_json() for n, t in tallies.items()},
        **(
            {"turns_per_call": done.turns_per_call, "ingest_cost": ingest_cost(done.call_ms)}
            if done.ingest == "turns"
            else {}
        ),
        "seconds": {
            "import": round(done.seconds, 2),
            "total": round(time.perf_counter() - t0, 2),
            **{f"queries:{n}": round(s, 2) for n, s in seconds.items()},
        },
        "ms_per_question": {n: round(1000 * s / max(1, len(done.questions)), 2) for n, s in seconds.items()},
    }


async def _ingest_by_turns(
    service: HRTService,
    samples: Sequence[Mapping[str, Any]],
    imported: Sequence[ImportedConversation],
    turns_per_call: int,
    call_ms: list[tuple[int, float]],
    say: Callable[[str], None],
) -> list[Question]:
    """Each conversation's turns sent to the conversation route; the questions of the store they built."""
    questions: list[Question] = []
    for sample, conv in zip(samples, imported, strict=True):
        say(f"turns {conv.sample_id}: {conv.counts['memory_units']} turns")
        await ingest_turns(service, conv, turns_per_call, call_ms)
        qs, _ = build_questions(sample, conv)
        questions.extend(qs)
    return questions


def import_samples(
    samples: Sequence[Mapping[str, Any]], options: ImportOptions | None = None
) -> tuple[list[ImportedConversation], list[Question], int]:
    """Every sample imported (its records, not yet ingested) and its questions, in order, with the
    number of questions skipped for citing no imported turn."""
    imported = [import_conversation(s, options) for s in samples]
    questions: list[Question] = []
    skipped = 0
    for sample, conv in zip(samples, imported, strict=True):
        qs, n_skipped = build_questions(sample, conv)
        questions.extend(qs)
        skipped += n_skipped
    return imported, questions, skipped


async def ingest_turns(
    service: HRTService, conv: ImportedConversation, per_call: int, call_ms: list[tuple[int, float]]
) -> None:
    """One conversation through the conversation route, session by session, ``per_call`` messages
    a call; then its artifacts (summaries, observations) as records, their DERIVED_FROM edges
    pointing at the route's memory units, and an observation's at the concepts it names that the
    route made too. ``conv`` takes the route's ids (``turn_ids``)."""
    units = [r for r in conv.records if isinstance(r, MemoryUnit)]
    by_session: dict[int, list[MemoryUnit]] = {}
    for unit in units:
        by_session.setdefault(int(unit.metadata["session"]), []).append(unit)
    new_id: dict[str, str] = {}
    for number in sorted(by_session):
        session = by_session[number]
        for i in range(0, len(session), per_call):
            part = session[i : i + per_call]
            request = ConversationRequest(
                user_id=conv.user_id,
                session_id=f"session-{number}",
                messages=[
                    Message(
                        name=str(u.metadata["speaker"]),
                        content=conv.texts[u.muid],
                        timestamp=u.creation_ts,
                        metadata={"dia_id": u.metadata["dia_id"]},
                    )
                    for u in part
                ],
            )
            start = time.perf_counter()
            result = await service.add_messages(request)
            call_ms.append((len(part), 1000 * (time.perf_counter() - start)))
            for unit, done in zip(part, result.messages, strict=True):
                new_id[unit.muid] = done.muid
    conv.turn_ids = {d: new_id[m] for d, m in conv.turn_ids.items() if m in new_id}
    conv.derived_from = {a: frozenset(new_id.get(m, m) for m in ms) for a, ms in conv.derived_from.items()}
    # the route writes each message's rule note itself (hrt.extraction.notes): the import's are left out
    artifacts: list[Record] = [
        r for r in conv.records if isinstance(r, Artifact) and r.artifact_type != NOTE_ARTIFACT_TYPE
    ]
    notes = {r.id for r in conv.records if isinstance(r, Artifact) and r.artifact_type == NOTE_ARTIFACT_TYPE}
    known = await service.graph.ids(conv.user_id)  # the route's memory units and concepts
    for r in conv.records:
        if isinstance(r, Relation) and r.type is EdgeType.DERIVED_FROM and r.source not in notes:
            target = new_id.get(r.target, r.target)
            if target in known:
                artifacts.append(r.model_copy(update={"target": target}))
    if artifacts:
        await service.ingest(artifacts)


def ingest_cost(call_ms: Sequence[tuple[int, float]]) -> dict[str, float]:
    """Per turn (a call's time over its messages) p50 and p95, over every call and over the last
    tenth of them (the conversation's end, where the statistics are largest), and per call."""
    if not call_ms:
        return {}
    per_turn = [ms / n for n, ms in call_ms]
    tail = per_turn[-max(1, len(per_turn) // 10) :]
    calls = [ms for _, ms in call_ms]
    return {
        "calls": len(call_ms),
        "turn_ms_p50": round(percentile(per_turn, 50), 2),
        "turn_ms_p95": round(percentile(per_turn, 95), 2),
        "turn_ms_p50_end": round(percentile(tail, 50), 2),
        "turn_ms_p95_end": round(percentile(tail, 95), 2),
        "call_ms_p50": round(percentile(calls, 50), 2),
        "call_ms_p95": round(percentile(calls, 95), 2),
    }


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[rank]


def question_record(q: Question) -> dict[str, Any]:
    """A question's line of ``locomo-questions.jsonl`` (no question text), its systems to fill in."""
    return {
        "sample_id": q.sample_id,
        "qa_index": q.index,
        "category": q.category,
        "evidence": sorted(q.evidence),
        "systems": {},
    }


def system_record(ranking: Ranking, evidence: frozenset[str], metrics: Mapping[str, float]) -> dict[str, Any]:
    """One system's part of a question's line: the ranks of the evidence turns among the returned
    memory units and the per-question metrics."""
    return {
        "evidence_ranks": [r for r, m in enumerate(ranking.memory_units, start=1) if m in evidence],
        **{m: round(metrics[m], 4) for m in (*PER_QUESTION_METRICS, *RENDERED_METRICS) if m in metrics},
    }


def _runners(
    systems: Sequence[str],
    baselines: Mapping[str, System],
    service: HRTService,
    derived: Mapping[str, Mapping[str, frozenset[str]]],
    cfg: EvalConfig,
    traced: Traced,
    tallies: dict[str, PhraseTally],
) -> dict[str, System]:
    """The systems of the run by name, each HRT system with its tally of unmatched phrases."""
    runners: dict[str, System] = {}
    for name in systems:
        if name in baselines:
            runners[name] = baselines[name]
        elif name in HRT_SYSTEMS:
            depth, weights, preset = system_request(name, cfg)
            tallies[name] = PhraseTally()
            budgets = cfg.render_budgets if name == "hrt" else ()
            runners[name] = hrt_system(
                service.tool, derived, cfg, depth, weights, traced, preset, tallies[name], budgets
            )
        else:
            raise ValueError(f"unknown system {name!r}; one of {', '.join(SYSTEMS)}")
    return runners


async def _ask(
    questions: Sequence[Question], runners: Mapping[str, System], say: Callable[[str], None]
) -> tuple[dict[str, list[tuple[int, dict[str, float]]]], dict[str, float], list[dict[str, Any]]]:
    """Every question of every system: the metrics per system, the seconds each took, and the
    questions' lines."""
    rows: dict[str, list[tuple[int, dict[str, float]]]] = {n: [] for n in runners}
    seconds: dict[str, float] = dict.fromkeys(runners, 0.0)
    per_question: list[dict[str, Any]] = []
    for qi, q in enumerate(questions):
        entry = question_record(q)
        for name, runner in runners.items():
            start = time.perf_counter()
            ranking = await runner(q)
            seconds[name] += time.perf_counter() - start
            metrics = question_metrics(ranking, q.evidence)
            rows[name].append((q.category, metrics))
            entry["systems"][name] = system_record(ranking, q.evidence, metrics)
        per_question.append(entry)
        if (qi + 1) % 100 == 0:
            say(f"{qi + 1}/{len(questions)} questions")
    return rows, seconds, per_question


def system_request(name: str, cfg: EvalConfig) -> tuple[int | None, Weights | None, RetrievalPresetName | None]:
    """What an HRT system's requests name: depth (the run's for the headline rows when it sets
    one), weights (None: the server's) and preset."""
    depth, semantic_weights, preset = HRT_SYSTEMS[name]
    if name in ("hrt", "hrt-unweighted") and cfg.depth is not None:
        depth = cfg.depth
    return depth, cfg.weights if semantic_weights else None, preset


def _system_json(name: str, cfg: EvalConfig, settings: Settings) -> dict[str, Any]:
    """What an HRT system of the run was asked with: depth, weights, preset, the run's Settings and
    request overrides, and the config_hash its responses carry."""
    depth, weights, preset = system_request(name, cfg)
    given = overrides.given() if (overrides := cfg.overrides()) is not None else {}
    # the request the system sends (request_for), configured as the pipeline configures it
    request = RetrieveRequest(
        user_id="eval", key_phrases=["eval"], max_depth=depth, weights=weights, preset=preset, config=overrides
    )
    effective = effective_config(settings.retrieval(), request)
    return {
        "max_depth": depth if depth is not None else f"HRT_DEFAULT_DEPTH ({settings.default_depth})",
        "weights": "semantic only (EVAL_WEIGHTS)" if weights is not None else "HRT_WEIGHTS (the default weights)",
        "preset": preset,
        "request_config": given,
        "settings_overrides": {k: _jsonable(v) for k, v in sorted(cfg.settings.items())},
        "config_hash": effective.fingerprint(),  # what the system's responses carry
    }


def _cached(embedder: Embedder, settings: Settings) -> Embedder:
    if isinstance(embedder, CachedEmbedder):
        return embedder
    return CachedEmbedder(embedder, settings.embedding_cache_size)


def _options_json(options: ImportOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in ImportOptions.__dataclass_fields__}
