"""A real ``hrt serve`` process for the bench: an API key provisioned in its record store, started
on a free loopback port, ready when constructed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from hrt.bench.host import proc_status_kb
from hrt.bench.ingest import import_object
from hrt.devstack import free_port


def provision_key(env: dict[str, str]) -> str:
    """An API key with every scope, for every user and without rate or concurrency limits, created
    in the record store that a server started with ``env`` will read: the bench measures the
    request path a user gets, authentication included."""
    from hrt.auth import SCOPES, new_key
    from hrt.config import load_settings
    from hrt.stores.factory import open_record_store

    settings = load_settings(**{k[4:].lower(): v for k, v in env.items() if k.startswith("HRT_")})
    token, record = new_key(f"bench-{os.getpid()}-{free_port()}", SCOPES, None, rate_limit=0, max_concurrency=0)

    async def store() -> None:
        async with open_record_store(settings) as keys:
            await keys.create_key(record)

    asyncio.run(store())
    return token


class Server:
    """A real ``hrt serve`` on a free loopback port, ready (``/readyz`` 200) when constructed, with an
    API key of every scope in ``headers``. ``cwd``: where it starts; ``python -m`` puts that folder
    first on ``sys.path``, so a source tree chosen with ``PYTHONPATH`` in ``env``
    (scripts/serve_ab.py) needs one that holds no other ``hrt``."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        embedder_spec: str | None,
        timeout: float = 600.0,
        cwd: Path | None = None,
    ):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        full_env = {**os.environ, **env, "HRT_LOG_LEVEL": "WARNING"}
        self.headers = {"authorization": f"Bearer {provision_key(full_env)}"}
        if embedder_spec:
            cmd = [sys.executable, "-m", "hrt.bench.run", "--serve-with-embedder", embedder_spec, "--port"]
        else:
            cmd = [sys.executable, "-m", "hrt.cli", "serve", "--host", "127.0.0.1", "--port"]
        self._log = log_path.open("wb")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [*cmd, str(self.port)], stdout=self._log, stderr=subprocess.STDOUT, env=full_env, cwd=cwd
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                self._log.close()
                raise RuntimeError(f"hrt serve exited with {self.proc.returncode}: {self.log_tail()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.base_url}/readyz", headers=self.headers, timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"hrt serve was not ready within {timeout:.0f}s: {self.log_tail()}")
            time.sleep(0.2)
        self.start_s = round(time.perf_counter() - t0, 2)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def rss_mb(self) -> float:
        return round((proc_status_kb(self.proc.pid, "VmRSS") or 0) / 1024, 1)

    def peak_rss_mb(self) -> float:
        return round((proc_status_kb(self.proc.pid, "VmHWM") or 0) / 1024, 1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def serve_with_embedder(spec: str, port: int) -> int:
    """``hrt serve`` with an embedder built from ``module:Class`` (the smoke tests' fake one). The
    service is started as ``hrt serve`` starts its own (pools, projector, preload), on the loop
    that serves it: a services deployment's connection pools belong to that loop."""
    import uvicorn

    from hrt.api import create_app
    from hrt.config import load_settings
    from hrt.service import HRTService

    settings = load_settings().model_copy(update={"host": "127.0.0.1", "port": port})

    async def serve() -> None:
        service = await HRTService(settings, embedder=import_object(spec)()).start(background_projector=True)
        try:
            app = create_app(settings, service=service)
            await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")).serve()
        finally:
            await service.close()

    asyncio.run(serve())
    return 0
