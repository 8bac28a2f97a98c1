"""Every script in ``scripts/`` is run by a test (issue #49): a script no test runs rots unseen.

A script counts as run when a test module (``tests/**/test_*.py``) names it in its code, a string
``"NAME.py"`` or ``"NAME"`` (the subprocess's path or the name it is imported under); a mention in a
docstring or a comment does not count."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def code_strings(path: Path) -> set[str]:
    """The string constants of a module, its docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def test_every_script_is_run_by_a_test() -> None:
    named: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        if path != Path(__file__).resolve():
            named |= code_strings(path)
    scripts = sorted(p.stem for p in (ROOT / "scripts").glob("*.py"))
    assert scripts, "no scripts found"
    untested = [s for s in scripts if f"{s}.py" not in named and s not in named]
    assert not untested, f"scripts no test runs (add a test, or delete the script): {untested}"
