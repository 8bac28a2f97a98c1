"""Start and stop a real llama.cpp server (llama-cpp-python's OpenAI-compatible ``llama_cpp.server``) for
tests, as a plain subprocess on a free loopback port. ``scripts/install-llama.sh`` installs the server and
assembles the small GGUF this module looks for.

Usage (from a fixture)::

    model = require_llama()                 # skips locally, fails under CI, when not installed
    with llama_server(model) as server:     # waits until GET /v1/models answers 200
        ...server.base_url, server.api_key...

The server always runs with an API key (``--api_key``, a fresh one per server unless given), as a
reranker should: every endpoint answers 401 to a request without ``Authorization: Bearer <key>``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from hrt.devstack import free_port

MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_ENV = "HRT_LLAMA_MODEL"  # an explicit GGUF path overrides the cache location
INSTALL_HINT = "run scripts/install-llama.sh"


def default_model_path() -> Path:
    """Where ``scripts/install-llama.sh`` assembles the GGUF (``$HRT_CACHE_DIR/models/…``)."""
    explicit = os.environ.get(MODEL_ENV)
    if explicit:
        return Path(explicit)
    cache = os.environ.get("HRT_CACHE_DIR") or str(Path.home() / ".cache" / "hrt")
    return Path(cache) / "models" / MODEL_FILE


def missing_requirement(model: Path | None = None) -> str | None:
    """Why a llama.cpp server cannot be started here, or None when it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return f"llama-cpp-python is not installed ({INSTALL_HINT})"
    for module in ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"):
        if importlib.util.find_spec(module) is None:
            return f"llama-cpp-python's [server] extra is not installed: no {module} ({INSTALL_HINT})"
    path = model or default_model_path()
    if not path.is_file():
        return f"the test model {path} is missing ({INSTALL_HINT}, or set {MODEL_ENV})"
    return None


def require_llama(model: Path | None = None) -> Path:
    """The model path; otherwise skip (local runs) or FAIL (under CI: a missing install step is a bug)."""
    reason = missing_requirement(model)
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"llama.cpp integration test cannot run under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    return model or default_model_path()


def _server_env() -> dict[str, str]:
    """Our environment minus what llama_cpp.server would read as settings (MODEL, PORT, CONFIG_FILE, …):
    the command line must be the whole configuration."""
    try:
        from llama_cpp.server.settings import ModelSettings, ServerSettings
    except ImportError:  # pragma: no cover - checked by missing_requirement()
        names: set[str] = set()
    else:
        names = set(ModelSettings.model_fields) | set(ServerSettings.model_fields)
    names |= {"config_file"}
    return {k: v for k, v in os.environ.items() if k.lower() not in names}


@dataclass
class LlamaServer:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    command: list[str] = field(default_factory=list)
    api_key: str = ""

    @property
    def headers(self) -> dict[str, str]:
        """What a client must send: the server refuses every request without it."""
        return {"Authorization": f"Bearer {self.api_key}"}

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, no clean shutdown: what a crash looks like to clients."""
        if self.alive():
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM (uvicorn shuts down cleanly), then SIGKILL after ``grace_s``."""
        if not self.alive():
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def _wait_ready(server: LlamaServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if not server.alive():
                raise RuntimeError(
                    f"llama.cpp server exited with code {server.process.returncode} before it was ready\n"
                    f"command: {' '.join(server.command).replace(server.api_key, '<api key>')}\n"
                    f"--- log tail ---\n{server.log_tail()}"
                )
            try:
                response = client.get(f"{server.base_url}/v1/models", headers=server.headers)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}"
            time.sleep(0.2)
    raise TimeoutError(
        f"llama.cpp server not ready after {timeout_s:.0f}s ({last})\n--- log tail ---\n{server.log_tail()}"
    )


@contextlib.contextmanager
def llama_server(
    model: Path,
    *,
    n_ctx: int = 2048,
    n_threads: int = 2,
    startup_timeout_s: float = 120.0,
    log_dir: Path | None = None,
    extra_args: Sequence[str] = (),
    api_key: str | None = None,
    port: int | None = None,
) -> Iterator[LlamaServer]:
    """A running ``python -m llama_cpp.server`` on 127.0.0.1; stopped (SIGTERM, then SIGKILL) on exit.
    ``api_key``: the key it demands (default: a fresh random one, in ``server.api_key``); ``port``:
    where it listens (default: a free one; a given one brings a killed server back at its address).

    ``logits_all`` defaults to True in the server, which logprobs need.
    """
    port = port or free_port()
    api_key = api_key or secrets.token_urlsafe(24)
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(n_threads),
        f"--api_key={api_key}",  # one token: a key starting with "-" would read as an option
        *extra_args,
    ]
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="hrt-llama-"))
    log_path = log_dir / f"llama-server-{port}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**_server_env(), "PYTHONUNBUFFERED": "1"},  # a traceback reaches the log before a kill
            start_new_session=True,  # a Ctrl-C in the test terminal does not hit the server first
        )
    server = LlamaServer(f"http://127.0.0.1:{port}", process, log_path, command, api_key)
    try:
        _wait_ready(server, startup_timeout_s)
        yield server
    finally:
        server.stop()
