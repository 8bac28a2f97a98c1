"""The embedded adapters' per-user read caches: loaded on first use, dropped by writes.

One load at a time (a background preload and a request never both load the same data), and a
load that a write raced is returned but not kept, so the next read sees the write. Loaded caches
are moved out of the cyclic garbage collector's reach (see :func:`keep_out_of_gc`).
"""

from __future__ import annotations

import atexit
import gc
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

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
    def __init__(self, load: Callable[[str], T]) -> None:
        self._load = load
        self._items: dict[str, T] = {}
        self._lock = threading.Lock()
        self._generation: dict[str, int] = {}  # bumped by every write, so a load racing it is not kept
        self._load_lock = threading.Lock()

    def __contains__(self, user_id: str) -> bool:
        with self._lock:
            return user_id in self._items

    def peek(self, user_id: str) -> T | None:
        """The user's cache if it is loaded, else None (never loads)."""
        with self._lock:
            return self._items.get(user_id)

    def invalidate(self, user_id: str) -> None:
        with self._lock:
            self._items.pop(user_id, None)
            self._generation[user_id] = self._generation.get(user_id, 0) + 1

    def get(self, user_id: str) -> T:
        with self._lock:
            cached = self._items.get(user_id)
        if cached is not None:
            return cached
        with self._load_lock:
            with self._lock:
                cached = self._items.get(user_id)
                generation = self._generation.get(user_id, 0)
            if cached is not None:
                return cached
            loaded = self._load(user_id)
            with self._lock:
                if self._generation.get(user_id, 0) == generation:  # no write landed while loading
                    self._items[user_id] = loaded
        keep_out_of_gc()
        return loaded
