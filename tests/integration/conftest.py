"""Fixtures that start real processes. Everything here uses the real embedding model."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hrt.bench.server import provision_key
from hrt.config import Settings
from hrt.devstack import free_port
from hrt.embedder import Embedder
from hrt.service import load_embedder


@pytest.fixture(scope="session")
def real_embedder() -> Embedder:
    return load_embedder(Settings())


class ServerProcess:
    """``headers`` carry an API key with every scope for every user (``provision_key``)."""

    def __init__(self, proc: subprocess.Popen[bytes], base_url: str, log: Path, headers: dict[str, str]) -> None:
        self.proc = proc
        self.base_url = base_url
        self.log = log
        self.headers = headers

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=self.headers, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_hrt_server(
    db_path: Path, log_path: Path, timeout: float = 120.0, env: dict[str, str] | None = None
) -> ServerProcess:
    """``hrt serve`` as a real process (uvicorn) on a free loopback port, with a key of every scope
    created in its store first; returns once /readyz is 200."""
    port = free_port()
    env = {**os.environ, "HRT_DB_PATH": str(db_path), "HRT_LOG_LEVEL": "WARNING", **(env or {})}
    headers = {"authorization": f"Bearer {provision_key(env)}"}
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "hrt.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", log_path, headers)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"hrt serve exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"{server.base_url}/readyz", headers=headers, timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"hrt serve was not ready within {timeout}s: {log_path.read_text()[-2000:]}")


@pytest.fixture
def hrt_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = start_hrt_server(tmp_path / "srv.db", tmp_path / "server.log")
    yield server
    server.stop()
