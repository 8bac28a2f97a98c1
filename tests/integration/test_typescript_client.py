"""The TypeScript client (clients/typescript): its types are those generated from the server's
OpenAPI document as it is now, its compiled output is that of its sources, and its Node test suite
passes against a real ``hrt serve`` started here (``node --test``, Node 18+)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import ServerProcess

pytestmark = pytest.mark.integration

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
NODE = shutil.which("node")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=PACKAGE, capture_output=True, text=True, timeout=600, env=env)


def test_the_committed_openapi_document_and_generated_types_are_current(tmp_path: Path):
    assert NODE is not None, "Node 18+ is needed for the TypeScript client (clients/typescript/README.md)"
    sys.path.insert(0, str(PACKAGE / "scripts"))
    try:
        from openapi import openapi_document  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    assert (PACKAGE / "openapi.json").read_text(encoding="utf-8") == openapi_document(), (
        "clients/typescript/openapi.json is stale: run `npm run generate` in clients/typescript"
    )
    checked = run(NODE, "scripts/generate-types.mjs", "--check")
    assert checked.returncode == 0, checked.stderr


def test_the_compiled_output_is_that_of_the_sources(tmp_path: Path):
    """dist/ is committed (``npm install`` of the folder works offline); tsc, when installed
    (``npm install`` in clients/typescript), must write the same files."""
    tsc = PACKAGE / "node_modules" / ".bin" / "tsc"
    if not tsc.exists():  # a fresh checkout: TypeScript, the one devDependency, from package-lock.json
        npm = shutil.which("npm")
        assert npm is not None, "npm is needed to install TypeScript in clients/typescript"
        installed = run(npm, "ci", "--no-audit", "--no-fund", "--prefer-offline")
        assert installed.returncode == 0, installed.stderr[-3000:]
    out = tmp_path / "dist"
    built = run(str(tsc), "-p", "tsconfig.json", "--outDir", str(out))
    assert built.returncode == 0, built.stdout + built.stderr
    for path in sorted(out.rglob("*")):
        if path.is_file():
            committed = PACKAGE / "dist" / path.relative_to(out)
            assert committed.read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), (
                f"{committed} is stale: run `npm run build` in clients/typescript"
            )


def test_the_node_suite_passes_against_a_real_server(hrt_server: ServerProcess):
    assert NODE is not None, "Node 18+ is needed for the TypeScript client (clients/typescript/README.md)"
    key = hrt_server.headers["authorization"].removeprefix("Bearer ")
    env = {**os.environ, "HRT_URL": hrt_server.base_url, "HRT_API_KEY": key}
    done = run(NODE, "--test", "test/", env=env)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "# fail 0" in done.stdout and "# pass 8" in done.stdout
    example = run(NODE, "--check", "examples/agent-turn.mjs")  # it needs a chat endpoint to run
    assert example.returncode == 0, example.stderr
