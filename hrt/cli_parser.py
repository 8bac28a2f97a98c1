"""The ``hrt`` command line: every subcommand, its arguments and its help; each parsed command
runs the handler :mod:`hrt.cli` gives for it."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

Commands = Mapping[str, Callable[[argparse.Namespace], int]]


def build_parser(commands: Commands) -> argparse.ArgumentParser:
    """The ``hrt`` command line; ``commands``: each subcommand's handler, by its function's name
    (``cmd_serve``), set as the parsed namespace's ``func``."""
    p = argparse.ArgumentParser(prog="hrt", description="HRT, the Hybrid Retrieval Tool")
    p.add_argument("--debug", action="store_true", help="an unexpected error prints its traceback, not one line")
    sub = p.add_subparsers(dest="command", required=True)
    _add_serving_parsers(sub, commands)
    _add_keys_parser(sub, commands)
    _add_ingest_export_parsers(sub, commands)
    _add_query_parser(sub, commands)
    _add_store_maintenance_parsers(sub, commands)
    _add_tool_parsers(sub, commands)
    return p


def _add_serving_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser], commands: Commands) -> None:
    """``demo``, ``serve`` and ``mcp``."""
    d = sub.add_parser("demo", help="build a fresh store from the bundled sample graph and run sample retrievals")
    d.add_argument("--db", help="keep the demo store at this path (default: a temporary directory)")
    d.add_argument("--out", help="also write each response to DIR/demo-N.json")
    d.set_defaults(func=commands["cmd_demo"])

    s = sub.add_parser("serve", help="serve the HTTP API")
    s.add_argument("--db")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.set_defaults(func=commands["cmd_serve"])

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
    mc.set_defaults(func=commands["cmd_mcp"])


def _add_keys_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], commands: Commands) -> None:
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
    k.set_defaults(func=commands["cmd_keys"])


def _add_ingest_export_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser], commands: Commands) -> None:
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
    i.set_defaults(func=commands["cmd_ingest"])

    x = sub.add_parser(
        "export",
        help="write one user's records as NDJSON in the ingest format (docs/api.md, 'Export and import')",
    )
    x.add_argument("--user", required=True)
    x.add_argument("--out", help="the file to write (default: stdout)")
    x.add_argument("--progress", action="store_true", help="show the progress bar on stderr also when not a terminal")
    x.add_argument("--db")
    x.set_defaults(func=commands["cmd_export"])


def _add_query_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], commands: Commands) -> None:
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
    q.set_defaults(func=commands["cmd_query"])


def _add_store_maintenance_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], commands: Commands
) -> None:
    """``migrate``, ``reembed``, ``models``, ``project`` and ``doctor``."""
    m = sub.add_parser("migrate", help="create or upgrade the store's schema (idempotent)")
    m.add_argument("--db")
    m.set_defaults(func=commands["cmd_migrate"])

    rb = sub.add_parser(
        "reembed",
        help="rewrite every vector of the store with the configured embedding model (HRT_EMBEDDING_MODEL), "
        "in place; resumable",
    )
    rb.add_argument("--db")
    rb.add_argument("--page", type=int, default=256, help="entities embedded and committed together")
    rb.add_argument("--progress", action="store_true", help="show the progress bar even when not on a terminal")
    rb.set_defaults(func=commands["cmd_reembed"])

    mo = sub.add_parser("models", help="the embedding models HRT knows by id; fetch their files ahead of use")
    mo.add_argument("action", choices=["list", "fetch"])
    mo.add_argument("ids", nargs="*", help="model ids to fetch (default: the configured HRT_EMBEDDING_MODEL)")
    mo.add_argument("--all", action="store_true", help="fetch every prebuilt model (fp32 and int8)")
    mo.set_defaults(func=commands["cmd_models"])

    pr = sub.add_parser("project", help="deliver pending outbox events to the graph store and vector index once")
    pr.add_argument("--db")
    pr.set_defaults(func=commands["cmd_project"])

    dr = sub.add_parser(
        "doctor",
        help="report drift between the records and the graph and vector projections (ids, content, edges, "
        "dead outbox events)",
    )
    dr.add_argument("--user", action="append", help="check only these users (repeatable)")
    dr.add_argument("--repair", action="store_true", help="rebuild the projections of drifted users from records")
    dr.add_argument("--db")
    dr.set_defaults(func=commands["cmd_doctor"])


def _add_tool_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser], commands: Commands) -> None:
    """``eval``, ``bench``, ``dev`` and ``export-schema``."""
    ev = sub.add_parser(
        "eval",
        help="retrieval quality: `hrt eval locomo --data PATH --out DIR`, `hrt eval changes` (facts that change; "
        "see docs/)",
    )
    ev.add_argument("benchmark", choices=["locomo", "changes"])
    ev.add_argument("rest", nargs=argparse.REMAINDER, help="options of the benchmark (--help for them)")
    ev.set_defaults(func=commands["cmd_eval"])

    be = sub.add_parser("bench", help="speed at scale: `hrt bench --sizes 10k,100k --out DIR` (see docs/bench.md)")
    be.add_argument("rest", nargs=argparse.REMAINDER, help="options of the benchmark (--help for them)")
    be.set_defaults(func=commands["cmd_bench"])

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
    dv.set_defaults(func=commands["cmd_dev"])

    e = sub.add_parser("export-schema", help="write the JSON Schemas of the request and the response")
    e.add_argument("--out", default="hrt/schema")
    e.set_defaults(func=commands["cmd_export_schema"])
