"""The host: machine and versions, and the memory and CPU of process trees (read from ``/proc``)."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "os": platform.platform(),
        "python": platform.python_version(),
        "loadavg_at_start": list(os.getloadavg()),
        "calibration_ms": calibration_ms(),
    }


def calibration_ms(rounds: int = 5) -> dict[str, float]:
    """Best of ``rounds`` timings of a fixed pure-Python loop and a fixed numpy product: the same
    code on a slower (or busier) host takes longer, so runs from different days can be compared."""

    def best(fn: Any) -> float:
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1000)
        return round(min(times), 2)

    def python_loop() -> None:
        total = 0
        for i in range(1_000_000):
            total += i * i

    a = np.random.default_rng(0).standard_normal((384, 4096), dtype=np.float32)
    return {"python_loop_1m": best(python_loop), "numpy_matmul_384x4096x384": best(lambda: a @ a.T)}


def versions() -> dict[str, Any]:
    from hrt import devstack

    out: dict[str, Any] = {
        d: _version(d)
        for d in (
            "hrt",
            "numpy",
            "torch",
            "sentence-transformers",
            "onnxruntime",
            "fastapi",
            "uvicorn",
            "httpx",
            "psycopg",
            "neo4j",
            "weaviate-client",
            "neo4j-graphrag",
        )
    }
    out["sqlite"] = __import__("sqlite3").sqlite_version
    out["servers"] = {
        "postgresql": devstack.POSTGRES_MAJOR,
        "neo4j": devstack.NEO4J_VERSION,
        "weaviate": devstack.WEAVIATE_VERSION,
    }
    return out


def proc_status_kb(pid: int, key: str) -> int | None:
    """A ``/proc/<pid>/status`` value in kB (``VmRSS``, ``VmHWM``), None when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def process_tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_rss_mb(pid: int) -> float:
    return round(sum(proc_status_kb(p, "VmRSS") or 0 for p in process_tree(pid)) / 1024, 1)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) that a process tree has used so far, children it
    has reaped included (a PostgreSQL backend that exits moves its time into the postmaster's)."""
    ticks = 0
    for p in process_tree(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(
    pids: dict[str, int], idle_cores: float = 0.1, window_s: float = 2.0, timeout_s: float = 180.0
) -> tuple[float, bool]:
    """Wait until these process trees together use under ``idle_cores`` of CPU over ``window_s``:
    after a bulk ingest the stores compact and index in the background for a minute or more, and a
    measurement then would count that work as the requests'. Returns the seconds waited and whether
    they settled within ``timeout_s``."""
    t0 = time.monotonic()
    last = sum(tree_cpu_s(pid) for pid in pids.values())
    while time.monotonic() - t0 < timeout_s:
        time.sleep(window_s)
        now = sum(tree_cpu_s(pid) for pid in pids.values())
        if now - last < idle_cores * window_s:
            return round(time.monotonic() - t0, 1), True
        last = now
    return round(time.monotonic() - t0, 1), False


def cpu_ms_per_request(before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
    """Each process's CPU per request between two ``tree_cpu_s`` readings, and their ``total``:
    on ``os.cpu_count()`` cores, ``total / cores`` is the least wall time a request can take even if
    every process's share ran in parallel (the floor under the sequential p50)."""
    out = {name: round((after[name] - before[name]) * 1000 / max(requests, 1), 1) for name in before}
    out["total"] = round(sum(out.values()), 1)
    return out
