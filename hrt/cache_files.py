"""Files of HRT's cache ($HRT_CACHE_DIR) that several processes may write at once: written whole
(temp file, then rename) under an advisory lock, so racing processes build or fetch a file once."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so racing processes build a file once (the rename keeps it whole anyway)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: the atomic rename alone keeps the file whole
        yield
        return
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole: a temp file beside it, renamed over it."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, path)
    finally:
        Path(tmp_name).unlink(missing_ok=True)
