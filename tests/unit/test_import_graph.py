"""The tooling's import graph: the bench's and the evaluation's modules import each other without a
cycle, and the server's modules (``hrt serve``: the CLI, the service, the API) never import the dev
stack or the tooling.

The cycle check reads the sources (every ``import``, at module level or inside a function, since a
deferred import only hides a cycle); the server check imports in a fresh process, so that what
other tests imported does not count.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hrt.bench", "hrt.eval.locomo")


def module_imports(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` (its ``__init__`` aside) -> the modules of the package it imports."""
    folder = ROOT.joinpath(*package.split("."))
    modules = {f"{package}.{p.stem}": p for p in sorted(folder.glob("*.py")) if p.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)  # from hrt.bench.stats import summary
                found.update(f"{node.module}.{alias.name}" for alias in node.names)  # from hrt.bench import run
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the path that closes it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_cycle_check_sees_a_deferred_import() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


@pytest.mark.parametrize("package", PACKAGES)
def test_the_tooling_modules_import_each_other_without_a_cycle(package: str) -> None:
    graph = module_imports(package)
    assert len(graph) >= 5, graph  # the modules were found
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_bench_peer_and_its_harness_share_modules_not_each_other() -> None:
    graph = module_imports("hrt.bench")
    assert "hrt.bench.run" not in graph["hrt.bench.peer"] and "hrt.bench.harness" not in graph["hrt.bench.peer"]


def test_the_server_never_imports_the_dev_stack_or_the_tooling() -> None:
    code = (
        "import json, sys\n"
        "import hrt.service, hrt.api, hrt.cli, hrt.onnx_embedder\n"
        "print(json.dumps(sorted(m for m in sys.modules\n"
        "                        if m == 'hrt.devstack' or m.startswith(('hrt.bench', 'hrt.eval')))))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
