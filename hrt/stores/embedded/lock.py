"""One writing process per embedded store.

The embedded store keeps per-user caches in process memory, brought up to date by the process's
own writes only; a second process writing the same SQLite file would leave them stale (its writes
invisible to the first process's reads until a restart). So ``hrt serve`` claims the file at
start, and any other process claims it before its first data write (``hrt ingest``, ``hrt mcp``'s
remember and forget); a claim while another process holds the file is refused with an error
naming the holder. Reading processes never claim: ``hrt query``, ``hrt keys``, ``hrt doctor`` and
``hrt migrate`` work beside a server (keys are re-read from the file by every server).

The claim is an exclusive ``flock`` on ``<db>.lock``, which the kernel releases when the holder
exits, however it exits; the file says who holds it (PID, what for, since when), for the error.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import IO

from hrt.errors import StoreError


class StoreInUse(StoreError):
    """Another process holds the embedded store for writing."""

    code = "store_in_use"


def lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


def holder(db_path: Path) -> dict[str, object] | None:
    """Who holds the store, as the holder wrote it (None: unknown)."""
    try:
        found = json.loads(lock_path(db_path).read_text() or "null")
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


# this process's held lock files: path -> (open file holding the flock, claims on it)
_HELD: dict[Path, tuple[IO[str], int]] = {}
_HELD_LOCK = threading.Lock()


class StoreClaim:
    """This process's claim on an embedded store file (see the module docstring). Claims are
    counted per process: stores opened twice on one file in one process (tests, a CLI command
    that opens the key store beside the service) share the process's lock."""

    def __init__(self, path: Path) -> None:
        self._path: Path | None = path

    @classmethod
    def acquire(cls, db_path: Path, purpose: str) -> StoreClaim:
        path = lock_path(db_path).resolve()
        with _HELD_LOCK:
            held = _HELD.get(path)
            if held is not None:
                _HELD[path] = (held[0], held[1] + 1)
                return cls(path)
            fh = path.open("a+")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                raise StoreInUse(refusal(db_path, holder(db_path)), store="the embedded store") from None
            fh.seek(0)
            fh.truncate()
            fh.write(json.dumps({"pid": os.getpid(), "purpose": purpose, "since": round(time.time(), 1)}))
            fh.flush()
            _HELD[path] = (fh, 1)
        return cls(path)

    def release(self) -> None:
        with _HELD_LOCK:
            path, self._path = self._path, None
            held = _HELD.get(path) if path is not None else None
            if path is None or held is None:
                return
            fh, count = held
            if count > 1:
                _HELD[path] = (fh, count - 1)
                return
            del _HELD[path]
            with contextlib.suppress(OSError):
                fh.seek(0)
                fh.truncate()
            fh.close()  # closing the descriptor drops the flock


def refusal(db_path: Path, found: dict[str, object] | None) -> str:
    who = "another process"
    if found is not None:
        who = f"process {found.get('pid')} ({found.get('purpose')})"
    command = " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv[:2])) or "this process"
    return (
        f"the embedded store {db_path} is held for writing by {who}; one process writes an embedded "
        f"store at a time, since each keeps caches of it in memory. Stop that process, or send this "
        f"work to it over HTTP (POST /v1/ingest), or use another HRT_DB_PATH ({command} refused)"
    )
