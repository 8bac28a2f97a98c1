"""Per-row columns that grow without a copy: storage with room past the rows, shared down the
snapshots made from one base (the embedded vector index's columns, its BM25 lengths).

Each snapshot reads a view of its own first rows (``buf[:n]``), and the rows of a view never
change. A snapshot that only adds rows writes them past its own, in place, when its view ends
where the storage was last written and there is room (the common case: one successor per
snapshot, each write adding a memory). Otherwise (a second successor of one snapshot, a row
rewritten, no room left) the column is copied into new storage with room for more. At a million
rows each copy was 1-8 MB, ~7 ms of every write for the columns together (2026-11-29).
"""

from __future__ import annotations

import threading

import numpy as np

_LOCK = threading.Lock()


class Room:
    """A column's storage: ``buf``, written up to ``used`` by some snapshot."""

    __slots__ = ("buf", "used")

    def __init__(self, buf: np.ndarray, used: int) -> None:
        self.buf = buf
        self.used = used


def grown(rooms: dict[str, Room], name: str, values: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``values`` and ``new`` after it: in place past ``values`` when its storage allows, else
    copied into storage with room (then the column's storage from now on)."""
    n, k = len(values), len(new)
    with _LOCK:
        room = rooms.get(name)
        if room is not None and room.used == n and values.base is room.buf and len(room.buf) >= n + k:
            room.buf[n : n + k] = new
            room.used = n + k
            out: np.ndarray = room.buf[: n + k]
            return out
    return copied(rooms, name, values, new)


def copied(rooms: dict[str, Room], name: str, values: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``values`` and ``new`` after it in new storage with room for more (the caller may set rows
    of the result before any other snapshot sees it)."""
    n, k = len(values), len(new)
    buf = np.empty(n + k + max(1_024, (n + k) // 8), dtype=values.dtype)
    buf[:n] = values
    buf[n : n + k] = new
    with _LOCK:
        rooms[name] = Room(buf, n + k)
    out: np.ndarray = buf[: n + k]
    return out
