"""``hrt bench --peer`` cannot break silently: a tiny run of the whole peer comparison on the real
services stack (PostgreSQL, Neo4j, Weaviate), with auth on as the command runs it (the bench
provisions its own API key), through the command line as a user runs it.

The peer is neo4j-graphrag's ``WeaviateNeo4jRetriever`` (in the ``test`` extra, so ``make test``
installs it): a missing package or a stack that does not start fails this test, never a skip. Both
sides embed with the hashing test embedder (``--vectors module:Class``: the ingest, the server and
the peer), so it loads no model. Nothing here asserts a speed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hrt import devstack
from hrt.bench import run as bench

pytestmark = pytest.mark.integration


def test_peer_comparison_runs_with_auth_on(stack_manager: Any, tmp_path: Path) -> None:
    import neo4j_graphrag  # noqa: F401  (the peer; an ImportError here fails the test, it does not skip)

    stack_manager.need(*devstack.SERVICES)  # started when not running; the bench reuses it (--stack-dir)
    out = tmp_path / "results"
    argv = [
        "--sizes", "300",
        "--deployments", "services",
        "--peer",
        "--stack-dir", str(stack_manager.dir),
        "--out", str(out),
        "--requests", "4",
        "--warmup", "1",
        "--concurrency", "1",
        "--vectors", "tests.helpers:HashingEmbedder",
        "--writes", "0",
    ]  # fmt: skip
    code = bench.main(argv)
    results = json.loads((out / "results.json").read_text())
    [run] = results["runs"]
    assert run["status"] == "ok", run.get("error")
    [peer] = results["peer"]
    assert peer["status"] == "ok", peer.get("error")  # "/v1/retrieve answered 401" was this line
    assert code == 0
    assert peer["entities"] == 300 and peer["setup"]["depth"] == 1
    hrt, other = peer["hrt"]["end_to_end"], peer["peer"]["end_to_end"]
    assert hrt["n"] == other["n"] == 4
    assert hrt["p50_ms"] > 0 and other["p50_ms"] > 0
    assert peer["ratio_p50"] == round(hrt["p50_ms"] / other["p50_ms"], 3) and peer["ratio_p50"] > 0
    assert peer["ratio_p95"] is not None and peer["ratio_p95"] > 0
    assert peer["hrt"]["items_per_request_p50"] > 0  # HRT answered with a context, not an error body
    assert peer["peer"]["items_per_request_p50"] > 0  # the peer joined its Weaviate hits to Neo4j nodes
    assert "| 300 | " in (out / "README.md").read_text().split("## Peer")[1]
