"""HRT's import graph: no cycle among all of ``hrt``'s modules, no arrow from a lower layer to a
higher one (:data:`LAYERS`), only the registry of backends (``hrt.stores.registry``) imports the
store adapters, and the server's modules (``hrt serve``: the CLI, the service, the API) never
import the dev stack or the tooling.

The graph is read from the sources: every ``import``, at module level or inside a function, since a
deferred import only hides a cycle; imports under ``if TYPE_CHECKING:`` are annotations, never run,
and do not count. The server check imports in a fresh process, so that what other tests imported
does not count.
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

# Lowest first: a module imports only from its own layer or lower ones. A name is a module or a
# package (all of its modules); a module takes the layer of the longest name that covers it.
LAYERS: list[tuple[str, ...]] = [
    ("hrt", "hrt.errors", "hrt.text", "hrt.cache_files", "hrt.breaker", "hrt.metrics", "hrt.templates", "hrt.tracing"),
    # the domain (hrt.metadata_filter: the grammar the contract validates and the stores compile)
    (
        "hrt.records",
        "hrt.retrieval_config",
        "hrt.settings_groups",
        "hrt.config",
        "hrt.settings_check",
        "hrt.embedding_models",
        "hrt.contract",
        "hrt.auth",
        "hrt.jsonbounds",
        "hrt.metadata_filter",
    ),
    # the ports and what adapters share: values, projection of records, walks, indexes, caches
    ("hrt.stores", "hrt.stores.base", "hrt.stores.projection", "hrt.stores.ann", "hrt.stores.bm25"),
    ("hrt.stores.graph_walk", "hrt.stores.user_cache", "hrt.stores.vector_meta"),
    ("hrt.stores.circuit", "hrt.stores.fallback", "hrt.stores.guarded"),  # stores behind servers: outages
    ("hrt.stores.backend",),  # what a backend says of itself
    (
        "hrt.embedder",
        "hrt.onnx_embedder",
        "hrt.onnx_export",
        "hrt.onnx_layout",
        "hrt.onnx_session",
        "hrt.reranker",
        "hrt.rerankers",
        "hrt.openai_compat",
    ),  # models
    ("hrt.model_loading",),  # the models the settings name
    ("hrt.stores.embedded", "hrt.stores.postgres", "hrt.stores.neo4j", "hrt.stores.weaviate"),  # adapters
    ("hrt.stores.registry", "hrt.stores.factory"),  # the backends known, and the composition root
    ("hrt.ingest",),
    ("hrt.pipeline", "hrt.projector", "hrt.browse", "hrt.export", "hrt.merge", "hrt.doctor"),  # use cases
    ("hrt.prompts", "hrt.extraction"),
    ("hrt.write_admission", "hrt.service"),
    ("hrt.usecases",),  # what every door (HTTP, MCP, CLI) calls
    ("hrt.front",),  # what the front doors share
    ("hrt.api", "hrt.mcp_http", "hrt.mcp_server", "hrt.reembed"),  # front doors
    (
        "hrt.cli",
        "hrt.cli_memory",
        "hrt.cli_parser",
        "hrt.client",
        "hrt.devstack",
        "hrt.devcluster",
        "hrt.bench",
        "hrt.eval",
        "hrt.config_docs",
    ),  # entry points, tooling
]
ADAPTERS = ("hrt.stores.embedded", "hrt.stores.postgres", "hrt.stores.neo4j", "hrt.stores.weaviate")
# the peer bench runs neo4j-graphrag's retriever over HRT's own Weaviate collection, so it names
# the collection's tenants as the Weaviate adapter does
ADAPTER_READERS = {"hrt.stores.registry", "hrt.bench.peer"}


def all_modules() -> dict[str, Path]:
    """Every module of ``hrt`` by its dotted name (a package by its ``__init__``)."""
    out: dict[str, Path] = {}
    for path in sorted((ROOT / "hrt").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _run_time_nodes(tree: ast.AST) -> list[ast.AST]:
    """The nodes of ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    return [n for n in ast.walk(tree) if id(n) not in skipped]


def hrt_imports() -> dict[str, set[str]]:
    """Each module of ``hrt`` -> the modules of ``hrt`` it imports when it runs (a name imported
    from a package counts as its module when it is one, else as the package)."""
    modules = all_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in _run_time_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1
                    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
        resolved: set[str] = set()
        for target in found:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                resolved.add(target)
        graph[name] = resolved
    return graph


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for index, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (best is None or len(name) > best[1]):
                best = (index, len(name))
    return None if best is None else best[0]


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


def test_hrt_imports_without_a_cycle() -> None:
    graph = hrt_imports()
    assert len(graph) > 100 and "hrt.stores.factory" in graph["hrt.service"]  # the graph was read
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_every_module_has_a_layer_and_no_arrow_points_up() -> None:
    graph = hrt_imports()
    assert [m for m in graph if layer_of(m) is None] == []
    up = [
        f"{m} (layer {layer_of(m)}) -> {d} (layer {layer_of(d)})"
        for m, targets in sorted(graph.items())
        for d in sorted(targets)
        if (layer_of(d) or 0) > (layer_of(m) or 0)
    ]
    assert up == []


def test_the_layer_check_sees_an_arrow_up() -> None:
    assert layer_of("hrt.stores.embedded.store") == layer_of("hrt.stores.neo4j") > layer_of("hrt.stores.base")
    assert layer_of("hrt.service") > layer_of("hrt.stores.factory") > layer_of("hrt.stores.postgres.records")
    assert layer_of("hrt.mcp_server") > layer_of("hrt.service")


def test_only_the_registry_imports_the_store_adapters() -> None:
    """Which backends exist is known in ``hrt.stores.registry`` alone: no other module imports an
    adapter (the composition root asks the registry), and an adapter imports from no other
    backend's package."""
    graph = hrt_imports()

    def backend(module: str) -> str | None:
        return next((a for a in ADAPTERS if module == a or module.startswith(a + ".")), None)

    crossing = [
        f"{m} -> {d}"
        for m, targets in sorted(graph.items())
        for d in sorted(targets)
        if backend(d) is not None and backend(m) != backend(d) and m not in ADAPTER_READERS
    ]
    assert crossing == []
    assert any(backend(d) for d in graph["hrt.stores.registry"])  # the check reads the registry's imports
    assert not any(backend(d) for d in graph["hrt.stores.factory"])


# what the rest of HRT may import of the pipeline: the package's public names (its one entry
# point, its trace, its configuration) and the rendering, which prompts and the CLI share
PIPELINE_DOORS = {"hrt.pipeline", "hrt.pipeline.render"}


def test_outside_the_pipeline_only_its_public_modules_are_imported() -> None:
    """No module outside ``hrt.pipeline`` (the evaluation and the bench included) imports a stage's
    internals: what it needs comes through the package (``HybridRetrievalTool.run``, its
    ``RequestTrace``)."""
    graph = hrt_imports()
    reaching = [
        f"{m} -> {d}"
        for m, targets in sorted(graph.items())
        if not m.startswith("hrt.pipeline")
        for d in sorted(targets)
        if d.startswith("hrt.pipeline.") and d not in PIPELINE_DOORS
    ]
    assert reaching == []
    assert "hrt.pipeline" in graph["hrt.eval.locomo.systems"]  # the check reads the evaluation's imports


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
        "tooling = ('hrt.devstack', 'hrt.devcluster')\n"
        "print(json.dumps(sorted(m for m in sys.modules\n"
        "                        if m in tooling or m.startswith(('hrt.bench', 'hrt.eval')))))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
