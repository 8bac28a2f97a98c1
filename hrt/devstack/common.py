"""What every part of the dev stack shares: versions, names and sizes of its servers, its error,
the cache folder, free loopback ports, and starting, watching and stopping processes."""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import random
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hrt.config import default_cache_dir

log = logging.getLogger("hrt.devstack")

POSTGRES_MAJOR = "15"
NEO4J_VERSION = "5.26.28"
NEO4J_BROWSER_VERSION = "5.24.0"
WEAVIATE_VERSION = "v1.38.11"
JAVA17 = Path("/usr/lib/jvm/java-17-openjdk-amd64/bin/java")
PG_BIN = Path(f"/usr/lib/postgresql/{POSTGRES_MAJOR}/bin")
SERVICES = ("postgres", "neo4j", "weaviate")
# Memory of the dev stack's servers: enough for the tests and 100k entities; a million entities
# need more (Weaviate refuses writes near its GOMEMLIMIT: "not enough memory"), see hrt bench
NEO4J_PAGE_CACHE = "256m"
WEAVIATE_MEMORY = "1GiB"
_NEO4J_SIZE = re.compile(r"^[1-9][0-9]*[kmg]$")
_GO_SIZE = re.compile(r"^[1-9][0-9]*(MiB|GiB)$")
POSTGRES_USER = "postgres"  # the superuser initdb makes: the dev stack's tooling, never HRT
HRT_POSTGRES_ROLE = "hrt"  # the role HRT connects as: owns HRT_POSTGRES_DB, no superuser
HRT_POSTGRES_DB = "hrt"
NEO4J_USER = "neo4j"  # the initial admin user, the one `dbms set-initial-password` sets
WEAVIATE_USER = "hrt"  # the user Weaviate's one API key authenticates as (no authorization module: full access)
REDACTED = "<secret: see stack.env>"


class DevStackError(RuntimeError):
    pass


def cache_dir() -> Path:
    """``$HRT_CACHE_DIR``, default ``~/.cache/hrt`` (``Settings.cache_dir``: the ONNX export lives there too)."""
    return Path(os.environ.get("HRT_CACHE_DIR", default_cache_dir()))


# Servers listen below the kernel's ephemeral range (32768-60999 by default), from which outgoing
# connections take their local ports: a port picked there can be the local end of some connection
# by the time a stopped server starts again on it ("address already in use", seen with Weaviate's
# Raft port while its peers kept dialling).
_LISTEN_PORTS = range(20000, 32000)


def free_port() -> int:
    return free_port_block(1)


def free_port_block(n: int) -> int:
    """A base port B with B..B+n-1 all free (Weaviate derives cluster ports by +1 convention),
    outside the ephemeral range."""
    rng = random.SystemRandom()
    for _ in range(500):
        base = rng.randrange(_LISTEN_PORTS.start, _LISTEN_PORTS.stop - n)
        if all(not port_open(base + i) and _bindable(base + i) for i in range(n)):
            return base
    raise DevStackError(f"no block of {n} free ports found")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _reusable(port: int) -> bool:
    """Nothing listens on ``port``: a server may bind it again (connections of its previous run
    left in TIME_WAIT do not count, as for the servers themselves, which set SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    log.info("running %s", " ".join(cmd)[:300])
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def wait_until(
    check: Callable[[], bool], what: str, timeout: float, proc: subprocess.Popen[bytes] | None, logfile: Path
) -> None:
    """Poll ``check`` until it is true. It may raise anything while the server starts, except a
    DevStackError: that is a definite answer (wrong credentials), which no waiting changes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise DevStackError(f"{what} exited with {proc.returncode}; log tail:\n{tail(logfile)}")
        try:
            if check():
                return
        except DevStackError:
            if proc is not None:
                stop_pid(proc.pid, grace=10)
            raise
        except Exception:  # not up yet
            pass
        time.sleep(0.3)
    if proc is not None:
        stop_pid(proc.pid, grace=10)
    raise DevStackError(f"{what} was not ready within {timeout:.0f}s; log tail:\n{tail(logfile)}")


def tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read: created 0600 under a temporary name, then renamed
    over ``path``, so the secrets in it are never readable by others, not even for a moment."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _spawn(
    cmd: list[str], logfile: Path, env: dict[str, str] | None = None, user: str | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    out = logfile.open("ab")
    kwargs: dict[str, Any] = {}
    if user is not None:
        pw = pwd.getpwnam(user)
        kwargs.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
    return subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True, **kwargs
    )


def stop_pid(pid: int, grace: float = 30.0, first: signal.Signals | None = signal.SIGTERM) -> None:
    """``first`` (SIGTERM) to the process group, then SIGKILL after ``grace``."""
    if not _alive(pid):
        return
    if first is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, first)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not _alive(pid):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
