"""House rules read from the sources: short functions, and one module that decides the backend.

- No function or method in ``hrt/`` is over :data:`MAX_LINES` lines (decorators and docstring
  included), the evaluation and the bench included, and no module over :data:`MAX_FILE_LINES`.
- Only the composition root (``hrt/stores/factory.py``) reads which backend the settings choose
  (``settings.record_store``, ``.graph_store``, ``.vector_index``): every other module gets ports.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 60
MAX_FILE_LINES = 600
BACKEND_SETTINGS = {"record_store", "graph_store", "vector_index"}
COMPOSITION_ROOT = "hrt/stores/factory.py"


def sources() -> dict[str, ast.Module]:
    out = {}
    for path in sorted((ROOT / "hrt").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        out[name] = ast.parse(path.read_text(encoding="utf-8"), name)
    return out


def long_functions(tree: ast.AST, limit: int) -> list[tuple[str, int]]:
    """(name, lines) of each function in ``tree`` longer than ``limit`` lines."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - start + 1
            if lines > limit:
                found.append((node.name, lines))
    return found


def test_the_length_check_sees_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    tree = ast.parse(f"@decorated\ndef f():\n{body}\n\ndef g():\n    pass\n")
    assert long_functions(tree, 6) == [("f", 7)]
    assert long_functions(tree, 7) == []


def test_no_function_in_hrt_is_over_60_lines() -> None:
    trees = sources()
    assert len(trees) > 100
    too_long = {name: found for name, tree in trees.items() if (found := long_functions(tree, MAX_LINES))}
    assert too_long == {}


def test_no_module_in_hrt_is_over_600_lines() -> None:
    lengths = {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in (ROOT / "hrt").rglob("*.py")
    }
    assert len(lengths) > 100 and max(lengths.values()) > MAX_FILE_LINES // 2  # the check read the sources
    assert {name: n for name, n in lengths.items() if n > MAX_FILE_LINES} == {}


def test_only_the_composition_root_reads_the_backend_settings() -> None:
    trees = sources()
    readers = {
        name
        for name, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in BACKEND_SETTINGS
    }
    assert COMPOSITION_ROOT in readers  # the check sees the root's reads
    assert readers == {COMPOSITION_ROOT}


def test_every_package_ships() -> None:
    """Each folder of ``hrt/`` with Python modules is listed in pyproject.toml's packages, so a wheel
    (the Docker image, ``pip install .``) holds it as the editable install does."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    folders = {
        path.parent.relative_to(ROOT).as_posix().replace("/", ".")
        for path in (ROOT / "hrt").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert folders - listed == set()
