"""The ``hrt`` command: demo, serve, mcp, keys, ingest, export, query, migrate, project, doctor, eval,
bench, dev, export-schema.

Each command is a short handler; the work is in the modules they call (eval, bench and dev are
imported lazily, so the server never loads them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from hrt.config import Settings, load_settings
from hrt.contract import AugmentedMemoryContext, RetrieveRequest, canonical_dumps
from hrt.errors import HRTError, InvalidInput, StoreUnavailable
from hrt.ingest import parse_jsonl
from hrt.settings_check import settings_error, unknown_variables

if TYPE_CHECKING:
    from hrt.extraction.transcripts import Transcript
    from hrt.service import HRTService

log = logging.getLogger("hrt")

DEMO_AS_OF = "2025-12-31T00:00:00Z"
DEMO_REQUESTS: list[dict[str, Any]] = [
    {"user_id": "u-maya", "key_phrases": ["Project Phoenix timeline", "team bandwidth", "that book on deep work"]},
    {"user_id": "u-tom", "key_phrases": ["Postgres migration", "on-call incident"], "max_depth": 1},
    {"user_id": "u-sara", "query": "How did the onboarding flow usability tests go?"},
    # a fact that changed: the June pricing decision supersedes March's, which is suppressed and
    # counted (retrieval_metadata.validity); with "valid_at": "2025-04-01T00:00:00Z" March's returns
    {"user_id": "u-maya", "key_phrases": ["Phoenix pricing decision"], "limits": {"memory_units": 3, "artifacts": 2}},
]


def sample_data_path() -> Path:
    return Path(str(resources.files("hrt.sample_data").joinpath("sample_graph.jsonl")))


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if getattr(args, "db", None):
        overrides["db_path"] = Path(args.db)
    for line in unknown_variables(os.environ):  # a misspelt setting would be ignored in silence
        print(f"hrt: warning: {line}", file=sys.stderr)
    return load_settings(**overrides)


async def _service(settings: Settings) -> HRTService:
    from hrt.service import HRTService

    return await HRTService(settings).start()


async def ingest_file(
    service: HRTService, path: Path, batch_size: int | None, progress: bool = False
) -> tuple[int, int]:
    """Validate the whole file first, then write it (one transaction per ``batch_size`` lines); the
    bar on stderr shows on a terminal, or always with ``progress``."""
    from tqdm import tqdm

    with path.open(encoding="utf-8") as fh:
        records = parse_jsonl(fh)
    upserted = deleted = 0
    size = batch_size or max(1, len(records))
    shown = False if progress else None  # None: tqdm shows it on a terminal only
    with tqdm(total=len(records), desc=f"ingest {path.name}", unit="rec", file=sys.stderr, disable=shown) as bar:
        for i in range(0, len(records), size):
            part = records[i : i + size]
            result = await service.ingest(part)
            upserted += result.upserted
            deleted += result.deleted
            bar.update(len(part))
    return upserted, deleted


def cmd_demo(args: argparse.Namespace) -> int:
    return asyncio.run(_demo(args))


async def _demo(args: argparse.Namespace) -> int:
    tmp = None
    if args.db:
        db = Path(args.db)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="hrt-demo-")
        db = Path(tmp.name) / "hrt.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    t0 = time.perf_counter()
    service = await _service(load_settings(db_path=db))
    t1 = time.perf_counter()
    up, _ = await ingest_file(service, sample_data_path(), None)
    t2 = time.perf_counter()
    print(
        f"# HRT demo: embedded store at {db}; model loaded in {t1 - t0:.1f}s; "
        f"{up} sample records ingested in {t2 - t1:.1f}s",
        file=sys.stderr,
    )
    out_dir = Path(args.out) if args.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    try:
        for i, body in enumerate(DEMO_REQUESTS, start=1):
            request = RetrieveRequest.model_validate({**body, "as_of": DEMO_AS_OF})
            start = time.perf_counter()
            result = await service.retrieve(request)
            ms = (time.perf_counter() - start) * 1000
            print(f"# request {i}: {json.dumps(body)} ({ms:.1f} ms)", file=sys.stderr)
            suppressed = {k: n for k, n in result.retrieval_metadata.validity.suppressed.items() if n}
            if suppressed:
                print(f"#   set aside as no longer true: {json.dumps(suppressed)}", file=sys.stderr)
            text = result.canonical_json(indent=2)
            print(text)
            if out_dir:
                (out_dir / f"demo-{i}.json").write_text(text + "\n", encoding="utf-8")
    finally:
        await service.close()
        if tmp is not None:
            tmp.cleanup()
    return 0


def configure_server_logging(settings: Settings) -> None:
    """HRT's own loggers at ``HRT_LOG_LEVEL``; the audit log (``hrt.audit``) always, one JSON
    object per line on stderr."""
    logging.getLogger("hrt").setLevel(settings.log_level.upper())
    audit = logging.getLogger("hrt.audit")
    audit.setLevel(logging.INFO)
    audit.propagate = False
    if not audit.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        audit.addHandler(handler)


async def _active_keys(settings: Settings) -> int:
    from hrt.stores.factory import open_record_store

    now = time.time()
    async with open_record_store(settings) as store:
        return sum(1 for k in await store.keys() if k.status(now) == "active")


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from hrt.api import create_app
    from hrt.api.app import AUTH_OFF_WARNING, NO_KEY_MESSAGE
    from hrt.auth import auth_off_refused, is_loopback

    settings = _settings(args)
    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    settings = settings.model_copy(update={"host": host, "port": port})
    if settings.auth == "off":
        if not is_loopback(host):
            raise HRTError(auth_off_refused(host))
        print(f"hrt: warning: {AUTH_OFF_WARNING}", file=sys.stderr)
    else:
        try:
            active = asyncio.run(_active_keys(settings))
        except StoreUnavailable as exc:  # start anyway: /readyz says unavailable until it answers
            print(f"hrt: warning: {exc}; the API keys are read once it answers", file=sys.stderr)
            active = None
        if active == 0:
            raise HRTError(NO_KEY_MESSAGE)
    configure_server_logging(settings)
    sys.setswitchinterval(settings.switch_interval_ms / 1000)
    uvicorn.run(create_app(settings), host=host, port=port, log_level=settings.log_level.lower())
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """``hrt mcp``: the MCP tools over stdio, in process on the configured store (like ``hrt query``),
    acting as the operator who can open it: every scope for every user unless --user/--scope narrow it."""
    from hrt.mcp_server import operator_principal, serve_stdio

    settings = _settings(args)
    configure_server_logging(settings)  # stderr only: stdout carries the protocol
    asyncio.run(serve_stdio(settings, operator_principal(args.user, args.scope)))
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    """``hrt keys create | list | revoke`` on the configured record store."""
    from hrt.auth import lineage_status, live_keys_named, new_key, parse_expiry
    from hrt.stores.factory import open_record_store

    settings = _settings(args)
    now = time.time()

    async def run() -> int:
        async with open_record_store(settings) as store:
            if args.action == "create":
                expires = parse_expiry(args.expires, now) if args.expires else None
                token, record = new_key(
                    args.name,
                    args.scope,
                    None if args.all_users else args.user,
                    expires_at=expires,
                    rate_limit=args.rate_limit,
                    max_concurrency=args.max_concurrency,
                    now=now,
                )
                await store.create_key(record)
                if args.json:
                    print(json.dumps({"key": token, **record.describe(now)}))
                else:
                    print(token)
                    who = "every user" if record.users is None else ", ".join(record.users)
                    print(
                        f"# key {record.name!r} ({record.key_id}): scopes {', '.join(record.scopes)}; acts for {who}"
                        f"{'; expires ' + str(record.describe(now)['expires_at']) if expires else ''}. "
                        "Store it now: it is not shown again.",
                        file=sys.stderr,
                    )
            elif args.action == "list":
                keys = await store.keys()
                by_id = {k.key_id: k for k in keys}
                print(json.dumps([k.describe(now, lineage_status(k, by_id, now)) for k in keys], indent=2))
            else:
                live = live_keys_named(await store.keys(), args.name)
                if len(live) != 1:
                    ids = ", ".join(f"{k.key_id} (made by {k.parent or 'the operator'})" for k in live)
                    raise HRTError(
                        f"{len(live)} live keys are named {args.name!r}: give its key id" + (f": {ids}" if ids else "")
                        if live
                        else f"no unrevoked key is named {args.name!r}"
                    )
                done = await store.revoke_key(live[0].key_id, now)
                if done is None:
                    raise HRTError(f"no unrevoked key is named {args.name!r}")
                print(json.dumps(done.describe(now)))
        return 0

    return asyncio.run(run())


async def ingest_conversation(
    service: HRTService,
    path: Path,
    user: str | None,
    session: str | None,
    agent: str | None,
    batch: int,
    progress: bool = False,
    names: tuple[str | None, str | None] = (None, None),
) -> list[dict[str, Any]]:
    """A transcript file (:mod:`hrt.extraction.transcripts`) through ``add_messages``, ``batch``
    messages per call (each one transaction); read whole first, so a bad file sends nothing. One
    summary per session; an export's last line sums the export up (conversations read, sessions
    sent, messages left out by reason)."""
    from tqdm import tqdm

    from hrt.extraction.messages import ConversationRequest
    from hrt.extraction.transcripts import read_transcript_file

    transcript = read_transcript_file(path, session)
    sessions = transcript.sessions
    users = {s.user_id for s in sessions}
    if user is not None and len(users - {None}) > 1:
        raise HRTError(f"{path.name} holds {len(users)} users' conversations: leave out --user to keep them apart")
    if user is None and None in users:
        raise HRTError(f"{path.name} does not say whose conversation it is: give --user")
    # every request is made before the first is sent: an invalid user or session id sends nothing
    calls = [
        (
            s,
            ConversationRequest(
                user_id=user or s.user_id,
                session_id=s.session_id,
                agent_id=agent,
                user_name=names[0],
                agent_name=names[1],
                messages=part,
            ),
        )
        for s in sessions
        for part in (s.messages[i : i + batch] for i in range(0, len(s.messages), batch))
    ]
    summaries: dict[tuple[str, str], dict[str, Any]] = {}
    total = sum(len(s.messages) for s in sessions)
    with tqdm(
        total=total, desc=f"ingest {path.name}", unit="msg", file=sys.stderr, disable=False if progress else None
    ) as bar:
        for s, request in calls:
            result = await service.add_messages(request)
            line = summaries.setdefault(
                (request.user_id, s.session_id),
                {"user_id": request.user_id, "session_id": s.session_id, "messages": 0, "skipped": s.skipped}
                | ({"skipped_why": dict(s.reasons)} if s.reasons else {})
                | dict.fromkeys(("added", "unchanged", "replaced", "concepts_linked", "relations"), 0),
            )
            line["messages"] += len(result.messages)
            for m in result.messages:
                line[m.status] += 1
            line["concepts_linked"] += result.concepts_linked
            line["relations"] += result.relations
            bar.update(len(request.messages))
    lines = list(summaries.values())
    if transcript.source in ("chatgpt", "claude"):
        lines.append(_export_summary(transcript, lines))
    return lines


def _export_summary(transcript: Transcript, lines: list[dict[str, Any]]) -> dict[str, Any]:
    """An export's last summary line: what was read, sent and left out (and why, over every
    conversation, the empty ones too)."""
    sums = {k: sum(line[k] for line in lines) for k in ("messages", "added", "unchanged", "replaced")}
    return {
        "export": transcript.source,
        "conversations": transcript.conversations,
        "sessions": len(lines),
        "empty_conversations": transcript.empty,
        **sums,
        "skipped": sum(transcript.skipped.values()),
        "skipped_why": dict(transcript.skipped),
    }


def cmd_ingest(args: argparse.Namespace) -> int:
    if (args.file is None) == (args.conversation is None):
        raise HRTError("give a JSONL file of records, or --conversation FILE")
    if args.conversation is not None:
        return _ingest_conversation(args)
    if args.user or args.session or args.agent or args.user_name or args.agent_name:
        raise HRTError("--user, --session, --agent, --user-name and --agent-name apply to --conversation only")

    async def run() -> tuple[int, int]:
        service = await _service(_settings(args))
        try:
            return await ingest_file(service, Path(args.file), args.batch_size, progress=args.progress)
        finally:
            await service.close()

    up, deleted = asyncio.run(run())
    print(json.dumps({"upserted": up, "deleted": deleted}))
    return 0


def _ingest_conversation(args: argparse.Namespace) -> int:
    batch = args.batch_size or 20
    if batch < 1:
        raise HRTError("--batch must be at least 1")

    async def run() -> list[dict[str, Any]]:
        service = await _service(_settings(args))
        try:
            return await ingest_conversation(
                service,
                Path(args.conversation),
                args.user,
                args.session,
                args.agent,
                batch,
                progress=args.progress,
                names=(args.user_name, args.agent_name),
            )
        finally:
            await service.close()

    for line in asyncio.run(run()):  # one line per session
        print(json.dumps(line))
    return 0


async def export_user(settings: Settings, user: str, out: BinaryIO, progress: bool = False) -> int:
    """``hrt export``: one user's records as NDJSON in the ingest format (hrt/export.py) to
    ``out``, from the configured record store, in process; returns the lines written. The bar on
    stderr shows on a terminal, or always with ``progress``."""
    from tqdm import tqdm

    from hrt.export import check_exportable, export_lines
    from hrt.stores.factory import open_record_store

    async with open_record_store(settings) as records:
        await check_exportable(records, user)
        total = sum((await records.counts(user)).values())  # implied SUPERSEDES lines are fewer
        counted: dict[str, Any] = {}
        shown = False if progress else None
        with tqdm(total=total, desc=f"export {user}", unit="rec", file=sys.stderr, disable=shown) as bar:
            async with records.export_reader(user) as reader:
                async for chunk in export_lines(reader, counted):
                    out.write(chunk)
                    bar.update(counted["records"] - bar.n)
            bar.total = bar.n
            bar.refresh()
    out.flush()
    return int(counted["records"])


def cmd_export(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if args.out in (None, "-"):
        n = asyncio.run(export_user(settings, args.user, sys.stdout.buffer, args.progress))
    else:
        target = Path(args.out)
        partial = target.with_name(target.name + ".partial")  # never a truncated file under the name
        # a user's whole memory: readable by its owner only (0600, whatever the umask), from the
        # first byte; a stale partial (perhaps another mode, another owner's) is replaced, not reused
        partial.unlink(missing_ok=True)
        try:
            with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
                n = asyncio.run(export_user(settings, args.user, fh, args.progress))
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        partial.replace(target)
    print(f"# exported {n} records of {args.user}", file=sys.stderr)
    return 0


def render_text(result: AugmentedMemoryContext) -> str:
    """``hrt query``'s human output: the summary, then each item with how it was found."""
    from hrt.pipeline.render import how_found

    provenance = result.retrieval_metadata.provenance
    lines = [result.retrieval_summary, ""]
    if result.retrieval_metadata.user_known is False:
        lines.append(f"  nothing is stored for user {result.retrieval_metadata.user_id} yet")

    def how(ident: str) -> str:
        p = provenance.get(ident)
        return f"\n            {how_found(p, markdown=False)}" if p is not None else ""

    for mu in result.retrieved_memory_units:
        lines.append(
            f"  memory  {mu.final_retrieval_score:.4f}  {mu.creation_ts[:10]}  {mu.muid}  {mu.title}{how(mu.muid)}"
        )
    for c in result.retrieved_concepts:
        lines.append(f"  concept {c.final_retrieval_score:.4f}  {c.type:<10}  {c.id}  {c.name}{how(c.id)}")
    for a in result.retrieved_artifacts:
        lines.append(f"  artifact {a.final_retrieval_score:.4f} {a.artifact_type}  {a.id}  {a.title}{how(a.id)}")
    validity = result.retrieval_metadata.validity
    stale = sorted(i for i, v in validity.intervals.items() if not v.valid)
    if stale:
        lines.append(f"  no longer true on {validity.valid_at[:10]}: {', '.join(stale)}")
    counted = ", ".join(f"{n} {kind}" for kind, n in validity.suppressed.items() if n)
    if counted:
        lines.append(f"  set aside as not true on {validity.valid_at[:10]}: {counted}")
    return "\n".join(lines)


def cmd_query(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"user_id": args.user}
    if args.phrase:
        body["key_phrases"] = args.phrase
    if args.query:
        body["query"] = args.query
    if args.as_of:
        body["as_of"] = args.as_of
    if args.valid_at:
        body["valid_at"] = args.valid_at
    if args.include_invalidated:
        body["include_invalidated"] = True
    if args.depth is not None:
        body["max_depth"] = args.depth
    if args.preset:
        body["weights_preset"] = args.preset
    if args.rerank:
        body["rerank"] = True
    if args.min_score is not None:
        body["min_score"] = args.min_score
    if args.render:
        render = {
            "format": args.render,
            "max_chars": args.max_chars,
            "max_tokens": args.max_tokens,
            "max_item_chars": args.max_item_chars,
        }
        body["render"] = {k: v for k, v in render.items() if v is not None} | {"tokenizer": args.tokenizer}
    request = RetrieveRequest.model_validate(body)

    async def run() -> AugmentedMemoryContext:
        service = await _service(_settings(args))
        try:
            result: AugmentedMemoryContext = await service.retrieve(request)
            return result
        finally:
            await service.close()

    result = asyncio.run(run())
    rendered = result.retrieval_metadata.rendered
    if args.json:
        print(result.canonical_json(indent=2))
    elif rendered is not None:
        print(rendered.text, end="")
    else:
        print(render_text(result))
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Schema of every configured store: SQLite steps, PostgreSQL migrations, Neo4j constraints and
    indexes (graph_schema/), the Weaviate collection. Idempotent."""
    from hrt.stores.factory import migrate_projections, migrate_records

    settings = _settings(args)
    report: dict[str, Any] = migrate_records(settings)
    report.update(asyncio.run(migrate_projections(settings)))
    print(json.dumps(report))
    return 0


class _NoEmbedder:
    """Schema work embeds nothing; this avoids loading the model for ``hrt migrate``."""

    name = "none"
    dim = 384
    model_id = ""  # no model: a store's model is not checked

    def embed(self, texts: Any) -> Any:
        raise RuntimeError("hrt migrate embeds nothing")

    embed_queries = embed


def cmd_reembed(args: argparse.Namespace) -> int:
    """Move the store's vectors to the configured embedding model (hrt/reembed.py)."""
    from hrt.reembed import run

    if args.page < 1:
        raise InvalidInput("--page must be at least 1", field="page")
    print(json.dumps(asyncio.run(run(_settings(args), page=args.page, show_progress=args.progress))))
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    """List the embedding models, or fetch their files into the cache."""
    from hrt.embedding_models import PREBUILT, fetch_models, models_report

    settings = _settings(args)
    if args.action == "list":
        print(json.dumps(models_report(settings.cache_root()), indent=2))
        return 0
    ids = list(PREBUILT) if args.all else (args.ids or [settings.embedding_model])
    from hrt.onnx_embedder import use_int8

    quantize = "int8" if not (args.all or args.ids) and use_int8(settings.embedding_quantize) else "off"
    print(json.dumps(fetch_models(ids, quantize, settings.cache_root(), settings.model_repository)))
    return 0


# `hrt doctor` and `hrt project`: a store could not be reached, so part of the work is left
# (docs/reliability.md, "Store outages"); 1 stays "drift found" / "a delivery failed otherwise"
EXIT_PARTIAL = 3
STORE_NAMES = {"records": "PostgreSQL", "graph": "Neo4j", "vectors": "Weaviate"}


async def _partial_service(args: argparse.Namespace) -> tuple[HRTService, dict[str, bool]]:
    """A service for a tool that works in a partial outage, and which stores answer now."""
    from hrt.service import HRTService

    service = await HRTService(_settings(args), embedder=_NoEmbedder()).start(partial=True)
    up = await service.store_checks()
    return service, {port: ok and port not in service.down for port, ok in up.items()}


def cmd_project(args: argparse.Namespace) -> int:
    """Drain the outbox once into the graph store and vector index: to the targets that are up;
    what is for a target that is down stays queued (exit 3)."""

    async def run() -> dict[str, Any]:
        service, up = await _partial_service(args)
        try:
            if service.projector is None:
                return {"projected": {}, "note": "the embedded record store projects in its own transaction"}
            if not up["records"]:
                return {"projected": {}, "unavailable": ["PostgreSQL"], "note": "nothing can be read"}
            report = await service.projector.drain()
            unavailable = [STORE_NAMES[port] for port in ("graph", "vectors") if not up[port]]
            circuits = service.stores.circuits
            unavailable += [c.store for c in circuits.values() if c.is_open and c.store not in unavailable]
            return {
                "projected": report.delivered,
                "failed": report.failed,
                "dead": {target: len(seqs) for target, seqs in report.dead.items()},
                "left_to_other_replicas": sorted(report.leased_elsewhere),
                "unavailable": sorted(unavailable),
                "queued": {t: int(s["lag"]) for t, s in (await service.projector.records.outbox_stats()).items()},
            }
        finally:
            await service.close()

    result = asyncio.run(run())
    print(json.dumps(result))
    if result.get("unavailable"):
        return EXIT_PARTIAL
    return 0 if not result.get("failed") else 1


async def _doctor(args: argparse.Namespace) -> dict[str, Any]:
    from hrt.doctor import check, repair_user

    service, up = await _partial_service(args)
    try:
        stores = {STORE_NAMES[p]: "checked" if ok else "unavailable" for p, ok in up.items()}
        if not up["records"]:
            return {"stores": stores, "users_checked": 0, "drift": [], "note": "the record store is the truth"}
        graph = service.graph if up["graph"] else None
        vectors = service.vectors if up["vectors"] else None
        drift = await check(service.records, graph, vectors, args.user)
        dirty = [d for d in drift if not d.clean]
        out: dict[str, Any] = {"stores": stores, "users_checked": len(drift), "drift": [d.as_dict() for d in dirty]}
        if service.records.outbox is None:
            out["note"] = "the embedded store writes records and projections in one transaction"
        elif args.repair and dirty and graph is not None and vectors is not None:
            for d in dirty:
                await repair_user(service.records, graph, vectors, d)
            after = await check(service.records, graph, vectors, [d.user_id for d in dirty])
            out["repaired"] = [d.user_id for d in dirty]
            out["drift_after_repair"] = [d.as_dict() for d in after if not d.clean]
        elif args.repair and dirty:
            out["note"] = "not repaired: --repair rebuilds both projections, and one is unavailable"
        return out
    finally:
        await service.close()


def cmd_doctor(args: argparse.Namespace) -> int:
    """Report drift between the record store and the projections; with --repair, rebuild them.
    Exit 0: every store checked, no drift; 1: drift (left after --repair); 3: no drift found in
    what could be checked, but a store was unavailable (``stores`` says which)."""
    result = asyncio.run(_doctor(args))
    print(json.dumps(result, indent=2))
    remaining = result.get("drift_after_repair", result["drift"])
    if remaining:
        return 1
    return EXIT_PARTIAL if "unavailable" in result["stores"].values() else 0


def cmd_eval(args: argparse.Namespace) -> int:
    if args.benchmark == "changes":
        from hrt.eval.changes import main as changes_main

        return int(changes_main(args.rest))
    from hrt.eval.locomo import main as locomo_main

    return int(locomo_main(args.rest))


def cmd_bench(args: argparse.Namespace) -> int:
    from hrt.bench.run import main as bench_main

    return int(bench_main(args.rest))


def cmd_dev(args: argparse.Namespace) -> int:
    from hrt import devstack

    directory = Path(args.dir)
    if args.action == "up":
        t0 = time.perf_counter()
        sizes = {"neo4j_page_cache": args.neo4j_page_cache, "weaviate_memory": args.weaviate_memory}
        # unset: devstack's defaults (NEO4J_PAGE_CACHE, WEAVIATE_MEMORY)
        try:
            stack = devstack.up(
                directory,
                tuple(args.services or devstack.SERVICES),
                **{k: v for k, v in sizes.items() if v is not None},
            )
        except devstack.DevStackError as exc:  # a bad size, a server that did not start: no traceback
            print(f"hrt: error: {exc}", file=sys.stderr)
            return 2
        print(
            json.dumps(
                {
                    "started_in_s": round(time.perf_counter() - t0, 1),
                    "env_file": str(directory / "stack.env"),
                    "env": stack.env(redacted=True),  # the secrets are in env_file (mode 0600)
                    "neo4j_browser": stack.neo4j_browser if "neo4j" in stack.services else None,
                },
                indent=2,
            )
        )
    elif args.action == "down":
        print(json.dumps({"stopped": devstack.down(directory)}))
    else:
        print(json.dumps(devstack.status(directory), indent=2))
    return 0


def cmd_export_schema(args: argparse.Namespace) -> int:
    from hrt.contract import request_json_schema, response_json_schema

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "augmented_memory_context.v9.4.schema.json").write_text(
        canonical_dumps(response_json_schema(), indent=2) + "\n", encoding="utf-8"
    )
    (out / "retrieve_request.schema.json").write_text(
        canonical_dumps(request_json_schema(), indent=2) + "\n", encoding="utf-8"
    )
    print(f"wrote {out}/augmented_memory_context.v9.4.schema.json and {out}/retrieve_request.schema.json")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hrt", description="HRT, the Hybrid Retrieval Tool")
    p.add_argument("--debug", action="store_true", help="an unexpected error prints its traceback, not one line")
    sub = p.add_subparsers(dest="command", required=True)
    _add_serving_parsers(sub)
    _add_keys_parser(sub)
    _add_ingest_export_parsers(sub)
    _add_query_parser(sub)
    _add_store_maintenance_parsers(sub)
    _add_tool_parsers(sub)
    return p


def _add_serving_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``demo``, ``serve`` and ``mcp``."""
    d = sub.add_parser("demo", help="build a fresh store from the bundled sample graph and run sample retrievals")
    d.add_argument("--db", help="keep the demo store at this path (default: a temporary directory)")
    d.add_argument("--out", help="also write each response to DIR/demo-N.json")
    d.set_defaults(func=cmd_demo)

    s = sub.add_parser("serve", help="serve the HTTP API")
    s.add_argument("--db")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.set_defaults(func=cmd_serve)

    from hrt.auth import SCOPES

    mc = sub.add_parser("mcp", help="serve HRT's MCP tools over stdio for an MCP host, on the configured store")
    mc.add_argument("--db")
    mc.add_argument("--user", action="append", help="act only for this user (repeatable; default: every user)")
    mc.add_argument(
        "--scope",
        action="append",
        choices=SCOPES,
        help="allow only this scope (repeatable; default: every scope): retrieve for retrieve_memory and "
        "memory_stats, ingest for remember and forgetting an entity, admin for forgetting a user",
    )
    mc.set_defaults(func=cmd_mcp)


def _add_keys_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``keys create|list|revoke``."""
    from hrt.auth import SCOPES

    k = sub.add_parser("keys", help="create, list or revoke the API keys of `hrt serve` (in the record store)")
    ks = k.add_subparsers(dest="action", required=True)
    kc = ks.add_parser("create", help="create a key and print its secret, once")
    kc.add_argument("--name", required=True, help="a name unique among the operator's live keys (shown in logs)")
    kc.add_argument("--scope", action="append", choices=SCOPES, required=True, help="repeatable")
    who = kc.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", action="append", help="a user the key acts for (repeatable)")
    who.add_argument("--all-users", action="store_true", help="the key acts for every user")
    kc.add_argument("--expires", help="a duration (30d, 12h, 90m, 2w) or an ISO date or time")
    kc.add_argument(
        "--rate-limit", type=float, help="requests per second per server (default HRT_KEY_RATE_LIMIT; 0: none)"
    )
    kc.add_argument(
        "--max-concurrency", type=int, help="requests in flight per server (default HRT_KEY_MAX_CONCURRENCY; 0: none)"
    )
    kc.add_argument("--json", action="store_true", help="print the key and its record as JSON")
    kl = ks.add_parser("list", help="every key with its status (never the secret)")
    kr = ks.add_parser("revoke", help="revoke the unrevoked key of this name (or key id)")
    kr.add_argument("name", help="a key's name, or its key id when keys of several owners share the name")
    for parser in (kc, kl, kr):
        parser.add_argument("--db")
    k.set_defaults(func=cmd_keys)


def _add_ingest_export_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``ingest`` and ``export``."""
    i = sub.add_parser(
        "ingest",
        help="ingest a JSONL file of records (docs/api.md, 'Ingest format'), or a conversation's messages "
        "(--conversation)",
    )
    i.add_argument("file", nargs="?", help="a JSONL file of records")
    i.add_argument(
        "--conversation",
        metavar="FILE",
        help="a transcript (OpenAI-style messages as JSON or JSON Lines, LoCoMo, or the conversations.json "
        "of a ChatGPT or Claude data export) sent as messages, as POST /v1/conversations does; one JSON "
        "summary line per session (and one for an export)",
    )
    i.add_argument("--user", help="with --conversation: whose conversation (a LoCoMo sample has its own)")
    i.add_argument("--session", help="with --conversation: the session of a chat transcript (default: its stem)")
    i.add_argument("--agent", help="with --conversation: the agent id the messages are recorded with")
    i.add_argument("--user-name", help="with --conversation: the speaker of the user's messages that name none")
    i.add_argument("--agent-name", help="with --conversation: the speaker of the assistant's messages that name none")
    i.add_argument("--db")
    i.add_argument(
        "--batch-size",
        "--batch",
        type=int,
        help="records per transaction (default: the whole file); with --conversation, messages per call (default 20)",
    )
    i.add_argument("--progress", action="store_true", help="show the progress bar on stderr also when not a terminal")
    i.set_defaults(func=cmd_ingest)

    x = sub.add_parser(
        "export",
        help="write one user's records as NDJSON in the ingest format (docs/api.md, 'Export and import')",
    )
    x.add_argument("--user", required=True)
    x.add_argument("--out", help="the file to write (default: stdout)")
    x.add_argument("--progress", action="store_true", help="show the progress bar on stderr also when not a terminal")
    x.add_argument("--db")
    x.set_defaults(func=cmd_export)


def _add_query_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``query``."""
    q = sub.add_parser("query", help="run one retrieval and print it")
    q.add_argument("--user", required=True)
    q.add_argument("--phrase", action="append", help="a key phrase (repeatable)")
    q.add_argument("--query", help="a free-text query, used when no --phrase is given")
    q.add_argument("--as-of", help="ISO timestamp; pin it for byte-identical output")
    q.add_argument("--valid-at", help="ISO timestamp: what was true then, as known at --as-of (default: --as-of)")
    q.add_argument(
        "--include-invalidated", action="store_true", help="also return facts no longer true at --valid-at, marked"
    )
    q.add_argument("--depth", type=int)
    q.add_argument("--preset", help="weights preset: balanced, semantic, recent, salient, personal")
    q.add_argument("--rerank", action="store_true")
    q.add_argument("--min-score", type=float, help="leave out items scoring below this (0-1)")
    q.add_argument(
        "--render",
        choices=["markdown", "text", "compact"],
        help="print the context as one text for a prompt, within a budget (compact: for an LLM, no ids or scores)",
    )
    q.add_argument("--max-item-chars", type=int, help="with --render compact: an item's text at most (default 600)")
    q.add_argument("--max-chars", type=int, help="the rendered text's budget in characters (default 8000)")
    q.add_argument("--max-tokens", type=int, help="the rendered text's budget in tokens (of --tokenizer)")
    q.add_argument("--tokenizer", default="cl100k_base", choices=["cl100k_base", "minilm-wordpiece"])
    q.add_argument("--json", action="store_true", help="print the AugmentedMemoryContext V9.4 JSON")
    q.add_argument("--db")
    q.set_defaults(func=cmd_query)


def _add_store_maintenance_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``migrate``, ``reembed``, ``models``, ``project`` and ``doctor``."""
    m = sub.add_parser("migrate", help="create or upgrade the store's schema (idempotent)")
    m.add_argument("--db")
    m.set_defaults(func=cmd_migrate)

    rb = sub.add_parser(
        "reembed",
        help="rewrite every vector of the store with the configured embedding model (HRT_EMBEDDING_MODEL), "
        "in place; resumable",
    )
    rb.add_argument("--db")
    rb.add_argument("--page", type=int, default=256, help="entities embedded and committed together")
    rb.add_argument("--progress", action="store_true", help="show the progress bar even when not on a terminal")
    rb.set_defaults(func=cmd_reembed)

    mo = sub.add_parser("models", help="the embedding models HRT knows by id; fetch their files ahead of use")
    mo.add_argument("action", choices=["list", "fetch"])
    mo.add_argument("ids", nargs="*", help="model ids to fetch (default: the configured HRT_EMBEDDING_MODEL)")
    mo.add_argument("--all", action="store_true", help="fetch every prebuilt model (fp32 and int8)")
    mo.set_defaults(func=cmd_models)

    pr = sub.add_parser("project", help="deliver pending outbox events to the graph store and vector index once")
    pr.add_argument("--db")
    pr.set_defaults(func=cmd_project)

    dr = sub.add_parser(
        "doctor",
        help="report drift between the records and the graph and vector projections (ids, content, edges, "
        "dead outbox events)",
    )
    dr.add_argument("--user", action="append", help="check only these users (repeatable)")
    dr.add_argument("--repair", action="store_true", help="rebuild the projections of drifted users from records")
    dr.add_argument("--db")
    dr.set_defaults(func=cmd_doctor)


def _add_tool_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``eval``, ``bench``, ``dev`` and ``export-schema``."""
    ev = sub.add_parser(
        "eval",
        help="retrieval quality: `hrt eval locomo --data PATH --out DIR`, `hrt eval changes` (facts that change; "
        "see docs/)",
    )
    ev.add_argument("benchmark", choices=["locomo", "changes"])
    ev.add_argument("rest", nargs=argparse.REMAINDER, help="options of the benchmark (--help for them)")
    ev.set_defaults(func=cmd_eval)

    be = sub.add_parser("bench", help="speed at scale: `hrt bench --sizes 10k,100k --out DIR` (see docs/bench.md)")
    be.add_argument("rest", nargs=argparse.REMAINDER, help="options of the benchmark (--help for them)")
    be.set_defaults(func=cmd_bench)

    dv = sub.add_parser("dev", help="start, stop or inspect the local PostgreSQL + Neo4j + Weaviate dev stack")
    dv.add_argument("action", choices=["up", "down", "status"])
    dv.add_argument("--dir", default=".hrt-dev", help="where the stack keeps data, logs and stack.env")
    dv.add_argument("--services", nargs="*", choices=["postgres", "neo4j", "weaviate"])
    dv.add_argument(
        "--neo4j-page-cache",
        help="Neo4j's page cache (default: the dev stack's, for up to 100k entities; a million: ~3g)",
    )
    dv.add_argument(
        "--weaviate-memory",
        help="Weaviate's GOMEMLIMIT (default: the dev stack's, for up to 100k entities; a million: ~4GiB)",
    )
    dv.set_defaults(func=cmd_dev)

    e = sub.add_parser("export-schema", help="write the JSON Schemas of the request and the response")
    e.add_argument("--out", default="hrt/schema")
    e.set_defaults(func=cmd_export_schema)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # every option, --help included, belongs to the benchmark
        from hrt.bench.run import main as bench_main

        return int(bench_main(argv[1:]))
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except HRTError as exc:
        where = f" (field {exc.field})" if exc.field else ""
        print(f"hrt: error: {exc.message}{where}", file=sys.stderr)
        return 2
    except Exception as exc:
        if args.debug:
            raise
        print(f"hrt: error: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: Exception) -> str:
    """What an error that is not HRT's own says in one line: a setting's names its variable, a
    request model's the field, a file's the path; anything else its type (``--debug``: the traceback)."""
    from pydantic import ValidationError

    setting = settings_error(exc)
    if setting is not None:
        return setting
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        return f"field '{field}': {err['msg']}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text} (hrt --debug ... prints the traceback)"


if __name__ == "__main__":
    raise SystemExit(main())
