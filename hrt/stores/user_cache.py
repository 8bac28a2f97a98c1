"""The embedded adapters' per-user read caches: loaded on first use, then updated by each write
in place of a rebuild, and built afresh in the background once they gathered many writes.

One load of a user at a time (a background preload and a request never both load the same data),
and a first load that a write raced is returned but not kept, so the next read sees the write.
A write, once committed and still holding the store's write lock, makes the next snapshot from the
loaded one and what it changed (:meth:`UserCache.update`: milliseconds, whatever the user's size),
so snapshots follow commits in order, each write whole, and the writer reads its write. Reads
take whichever snapshot is there, never wait for an update, and see one consistent snapshot. When a
snapshot has gathered enough changes (``due``), a background thread loads the user afresh (the
*compaction*) while the updated snapshots keep serving and taking writes; under the write lock it
then applies the writes that committed meanwhile and swaps the fresh one in. For as long as a
compaction runs, the user's cache is held twice in memory. Loaded caches are moved out of the
cyclic garbage collector's reach (see :func:`keep_out_of_gc`).
"""

from __future__ import annotations

import atexit
import gc
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Generic, TypeVar

T = TypeVar("T")
C = TypeVar("C")  # what a write changed, as :meth:`UserCache.update` is given it

log = logging.getLogger(__name__)

_unfreeze_at_exit = False


def keep_out_of_gc() -> None:
    """Move everything alive now, a freshly loaded user cache included, out of the cyclic garbage
    collector's reach: with a million cached objects a full collection is slow and lands on a
    random request. Refcounting still frees them when a write
    drops the cache; they hold no reference cycles. At exit they are handed back, so libraries
    that check for leaks at shutdown do not report them."""
    global _unfreeze_at_exit
    gc.freeze()
    if not _unfreeze_at_exit:
        atexit.register(gc.unfreeze)
        _unfreeze_at_exit = True


class UserCache(Generic[T, C]):
    """Per user, a snapshot and the write generation it was made at. Reads take whatever snapshot
    is there (loading one only when there is none); a write, once committed, calls
    :meth:`update`. Loads and updates of one user are serialised by that user's lock; other users'
    reads and loads never wait for them."""

    def __init__(
        self,
        load: Callable[[str], T],
        change: Callable[[str, T, C], T] | None = None,
        due: Callable[[T], bool] | None = None,
        write_lock: AbstractContextManager[object] | None = None,
    ) -> None:
        """``load`` builds a user's snapshot from the store; ``change`` makes the next snapshot
        from one and what a write changed (reading the changed rows as they are now, so applying
        a change twice, or to a snapshot that already has it, is harmless); ``due`` says when a
        snapshot has gathered enough changes to be built afresh in the background; ``write_lock``
        is the store's, held by every write while it commits and calls :meth:`update`."""
        self._load = load
        self._change = change
        self._due = due
        self._write_lock = write_lock
        self._compacting: dict[str, list[C]] = {}  # user -> changes since its compaction began
        self.compactions = 0  # snapshots built afresh in the background (tests, metrics)
        self._items: dict[str, tuple[int, T]] = {}  # user -> (generation loaded at, snapshot)
        self._lock = threading.Lock()  # guards the dicts, never held while loading
        self._generation: dict[str, int] = {}  # bumped by every committed write of the user
        self._user_locks: dict[str, threading.Lock] = {}

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

    def update(self, user_id: str, change: C) -> None:
        """A write of the user committed, and holds the store's write lock: make the next
        snapshot from the loaded one and ``change`` (milliseconds, whatever the user's size), so
        the writer and every read after it see the write. Not loaded: nothing to do. When the
        snapshot has gathered enough changes, a background thread builds it afresh (the
        compaction) while this one keeps taking writes."""
        assert self._change is not None
        with self._lock:
            self._generation[user_id] = self._generation.get(user_id, 0) + 1
            entry = self._items.get(user_id)
            pending = self._compacting.get(user_id)
            if pending is not None:
                pending.append(change)
        if entry is None:
            return
        try:
            with self._user_lock(user_id):
                current = self.peek(user_id)
                if current is None:
                    return
                nxt = self._change(user_id, current, change)
                with self._lock:
                    self._items[user_id] = (self._generation[user_id], nxt)
        except Exception:  # the write committed: its caller must not see an error, nor reads stale data
            log.exception("updating the cache of user %r failed; dropped, the next read loads it", user_id)
            self.invalidate(user_id)
            return
        # no gc.freeze here (loads and compactions do it): what an update makes is small, and a
        # freeze per write would also pin every cycle of the requests in flight, for good
        if self._due is not None and self._due(nxt):
            self._start_compaction(user_id)

    def _start_compaction(self, user_id: str) -> None:
        with self._lock:
            if user_id in self._compacting:
                return
            self._compacting[user_id] = []
        threading.Thread(target=self._compact, args=(user_id,), name=f"hrt-compact-{user_id}", daemon=True).start()

    def _compact(self, user_id: str) -> None:
        """Build the user's snapshot afresh from the store, then, under the write lock, apply the
        changes that committed meanwhile and swap it in. A failure leaves the current one."""
        try:
            fresh = self._load(user_id)
            with self._write_lock or nullcontext(), self._user_lock(user_id):
                with self._lock:
                    changes = self._compacting.pop(user_id, [])
                    still = user_id in self._items
                if not still:  # dropped meanwhile (the user deleted): the next read loads
                    return
                assert self._change is not None
                for change in changes:
                    fresh = self._change(user_id, fresh, change)
                with self._lock:
                    if user_id in self._items:
                        self._items[user_id] = (self._generation.get(user_id, 0), fresh)
                        self.compactions += 1
            keep_out_of_gc()
        except Exception:
            log.exception("compacting the cache of user %r failed; the current snapshot keeps serving", user_id)
        finally:
            with self._lock:
                self._compacting.pop(user_id, None)

    def wait_compacted(self, timeout: float = 60.0) -> bool:
        """Until no compaction runs (tests, benchmarks); False on the timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._compacting:
                    return True
            time.sleep(0.01)
        return False
