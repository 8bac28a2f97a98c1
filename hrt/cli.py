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
from typing import TYPE_CHECKING, Any

from hrt.cli_memory import export_user as export_user
from hrt.cli_memory import ingest_conversation as ingest_conversation
from hrt.cli_memory import ingest_file as ingest_file
from hrt.cli_memory import render_text as render_text
from hrt.cli_parser import build_parser as build_cli_parser
from hrt.config import Settings, load_settings
from hrt.contract import AugmentedMemoryContext, RetrieveRequest, canonical_dumps
from hrt.errors import HRTError, InvalidInput, StoreUnavailable
from hrt.settings_check import settings_error, unknown_variables

if TYPE_CHECKING:
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
        from hrt import usecases

        service = await _service(_settings(args))
        try:
            return (await usecases.retrieve(service, None, request)).response
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
    """The ``hrt`` command line (:mod:`hrt.cli_parser`), each subcommand run by its ``cmd_`` handler here."""
    commands = {name: value for name, value in globals().items() if name.startswith("cmd_")}
    return build_cli_parser(commands)


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
