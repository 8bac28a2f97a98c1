"""Embedded, two processes on one SQLite file: one process writes it (the server); a second server
or a writing CLI is refused at start with an error naming the holder, while reading commands work
beside it and see the server's writes (hrt/stores/embedded/lock.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hrt.cli import sample_data_path
from tests.integration.conftest import free_port, start_hrt_server
from tests.integration.test_server import ingest_sample

pytestmark = pytest.mark.integration


def run_hrt(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hrt.cli", *args], capture_output=True, text=True, timeout=300, env=env
    )


def test_a_second_writer_is_refused_naming_the_holder_and_readers_work(tmp_path):
    db = tmp_path / "one.db"
    env = {**os.environ, "HRT_DB_PATH": str(db), "HRT_LOG_LEVEL": "WARNING"}
    server = start_hrt_server(db, tmp_path / "a.log")
    try:
        ingest_sample(server)
        pid = server.proc.pid

        port = free_port()
        second = subprocess.run(
            [sys.executable, "-m", "hrt.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert second.returncode != 0
        out = second.stdout + second.stderr
        assert f"held for writing by process {pid} (hrt serve on 127.0.0.1:" in out, out[-3000:]

        ingest = run_hrt("ingest", str(sample_data_path()), env=env)
        assert ingest.returncode == 2
        assert f"process {pid} (hrt serve" in ingest.stderr and str(db) in ingest.stderr, ingest.stderr

        # a reading process works beside the server, and sees what the server wrote
        query = run_hrt(
            "query",
            "--user",
            "u-maya",
            "--phrase",
            "Project Phoenix timeline",
            "--as-of",
            "2025-12-31",
            "--json",
            env=env,
        )
        assert query.returncode == 0, query.stderr
        assert any(m["muid"].startswith("maya-") for m in json.loads(query.stdout)["retrieved_memory_units"])
        keys = run_hrt("keys", "create", "--name", "beside", "--scope", "retrieve", "--user", "u-maya", env=env)
        assert keys.returncode == 0, keys.stderr
    finally:
        server.stop()
    # the holder gone (however it exited, the kernel drops its lock), a writer may start
    after = run_hrt("ingest", str(sample_data_path()), env=env)
    assert after.returncode == 0, after.stderr
