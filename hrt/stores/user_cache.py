"""The embedded adapters' per-user read caches: loaded on first use, rebuilt after writes while
the old snapshot serves, then swapped in.

One load of a user at a time (a background preload and a request never both load the same data),
and a first load that a write raced is returned but not kept, so the next read sees the write.
A write's refresh rebuilds in the writer's thread and returns once the snapshot holds the write, so
the writer reads its write, while every other read keeps the previous snapshot meanwhile: a read
sees one consistent snapshot, old or new, and never waits for a rebuild. For as long as a rebuild
runs, the user's cache is held twice in memory. Loaded caches are moved out of the cyclic garbage
collector's reach (see :func:`keep_out_of_gc`).
"""

from __future__ import annotations

import atexit
import gc
import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)

_unfreeze_at_exit = False


def keep_out_of_gc() -> None:
    """Move everything alive now, a freshly loaded user cache included, out of the cyclic garbage
    collector's reach: with a million cached objects a full collection took 100-150 ms and landed
    on a random request (measured at 100k entities). Refcounting still frees them when a write
    drops the cache; they hold no reference cycles. At exit they are handed back, so libraries
    that check for leaks at shutdown do not report them."""
    global _unfreeze_at_exit
    gc.freeze()
    if not _unfreeze_at_exit:
        atexit.register(gc.unfreeze)
        _unfreeze_at_exit = True


class UserCache(Generic[T]):
    """Per user, a snapshot loaded at some write generation. Reads take whatever snapshot is there
    (loading one only when there is none); a write, once committed, calls :meth:`refresh`, which
    builds the next snapshot in the writer's thread while the old one keeps serving, then swaps
    it in. Loads and rebuilds of one user are serialised by that user's lock; other users' reads
    and loads never wait for them."""

    def __init__(self, load: Callable[[str], T]) -> None:
        self._load = load
        self._items: dict[str, tuple[int, T]] = {}  # user -> (generation loaded at, snapshot)
        self._lock = threading.Lock()  # guards the dicts, never held while loading
        self._generation: dict[str, int] = {}  # bumped by every committed write of the user
        self._user_locks: dict[str, threading.Lock] = {}
        self.rebuilds = 0  # snapshots rebuilt after writes (tests, metrics)

    def __contains__(self, user_id: str) -> bool:
        with self._lock:
            return user_id in self._items

    def peek(self, user_id: str) -> T | None:
        """The user's cache if it is loaded, else None (never loads)."""
        with self._lock:
            entry = self._items.get(user_id)
        return None if entry is None else entry[1]

    def _user_lock(self, user_id: str) -> threading.Lock:
        with self._lock:
            return self._user_locks.setdefault(user_id, threading.Lock())

    def invalidate(self, user_id: str) -> None:
        """Drop the user's snapshot: the next read loads one (a user deleted, a projector write)."""
        with self._lock:
            self._items.pop(user_id, None)
            self._generation[user_id] = self._generation.get(user_id, 0) + 1

    def get(self, user_id: str) -> T:
        with self._lock:
            entry = self._items.get(user_id)
        if entry is not None:
            return entry[1]
        with self._user_lock(user_id):
            with self._lock:
                entry = self._items.get(user_id)
                generation = self._generation.get(user_id, 0)
            if entry is not None:
                return entry[1]
            loaded = self._load(user_id)
            with self._lock:
                if self._generation.get(user_id, 0) == generation:  # no write landed while loading
                    self._items[user_id] = (generation, loaded)
        keep_out_of_gc()
        return loaded

    def refresh(self, user_id: str) -> None:
        """A write of the user committed: bring a loaded snapshot up to it before returning. Not
        loaded: nothing to do (the next read loads). A rebuild that started after this write's
        commit (another writer's) covers it, so writes arriving during a rebuild share the next."""
        with self._lock:
            mine = self._generation[user_id] = self._generation.get(user_id, 0) + 1
        with self._user_lock(user_id):
            with self._lock:
                entry = self._items.get(user_id)
                generation = self._generation.get(user_id, 0)
            if entry is None or entry[0] >= mine:
                return
            try:
                loaded = self._load(user_id)
            except Exception:  # the write committed: its caller must not see an error, nor reads stale data
                log.exception("rebuilding the cache of user %r failed; dropped, the next read loads it", user_id)
                self.invalidate(user_id)
                return
            with self._lock:
                current = self._items.get(user_id)
                if current is not None and current[0] < generation:  # not dropped meanwhile
                    self._items[user_id] = (generation, loaded)
                    self.rebuilds += 1
        keep_out_of_gc()
