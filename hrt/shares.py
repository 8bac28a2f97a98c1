"""Per-tenant shares of a bounded resource (write slots, ingest body places, export streams).

A tenant is the users a key acts for (:func:`hrt.auth.tenant_of`): every key of one tenant, child
keys included, draws on one share, so minting keys buys nothing. A tenant holds at most half of a
resource (at least one place), so whatever one tenant does, the others find the rest free.
``tenant`` None (the operator's commands, which hold no key) is held to the total alone.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator

from hrt.errors import RateLimited

# (held: by the tenant when ``mine``, else by everyone; mine) -> the refusal to raise
Refusal = Callable[[int, bool], RateLimited]


def half_share(limit: int) -> int:
    """What one tenant may hold of ``limit`` places: half, at least one (0: no limit)."""
    return max(1, limit // 2) if limit else 0


class Shares:
    """At most ``limit`` places held at once in this process (0: no limit), at most ``share`` of
    them by one tenant. Thread-safe: a place may be taken on the event loop and given back from a
    worker thread (or the other way round)."""

    def __init__(self, limit: int, share: int | None = None) -> None:
        self.limit = limit
        self.share = half_share(limit) if share is None else share
        self.total = 0
        self.by_tenant: dict[str, int] = {}
        self._lock = threading.Lock()

    def held(self, tenant: str) -> int:
        return self.by_tenant.get(tenant, 0)

    def take(self, tenant: str | None, refuse: Refusal) -> None:
        """One place for ``tenant``, or ``refuse``'s :class:`RateLimited` when the server's places
        or the tenant's share are all taken (nothing is taken then)."""
        with self._lock:
            mine = self.by_tenant.get(tenant, 0) if tenant is not None else 0
            if self.share and tenant is not None and mine >= self.share:
                raise refuse(mine, True)
            if self.limit and self.total >= self.limit:
                raise refuse(self.total, False)
            self.total += 1
            if tenant is not None:
                self.by_tenant[tenant] = mine + 1

    def give_back(self, tenant: str | None) -> None:
        with self._lock:
            self.total -= 1
            if tenant is None:
                return
            left = self.by_tenant[tenant] - 1
            if left:
                self.by_tenant[tenant] = left
            else:
                del self.by_tenant[tenant]

    @contextlib.contextmanager
    def place(self, tenant: str | None, refuse: Refusal) -> Iterator[Place]:
        """A place held for the ``with`` block (or until :meth:`Place.release`)."""
        self.take(tenant, refuse)
        held = Place(self, tenant)
        try:
            yield held
        finally:
            held.release()


class Place:
    """One place of :class:`Shares`; :meth:`release` gives it back early, once."""

    def __init__(self, shares: Shares, tenant: str | None) -> None:
        self._shares: Shares | None = shares
        self._tenant = tenant

    def release(self) -> None:
        shares, self._shares = self._shares, None
        if shares is not None:
            shares.give_back(self._tenant)


class ByteRates:
    """What one tenant may build per second (browse pages' bytes): a bucket per tenant that fills
    at ``per_s`` bytes a second up to ``burst``. A page is charged after it is built, so a tenant
    may go into debt by one page; while in debt its next page is refused (``refuse`` given the
    seconds until the debt is paid) before anything is read. Other tenants are not slowed: this
    bounds the CPU one tenant's bulk reads take, where :class:`Shares` bounds how many run at
    once. ``per_s`` 0: no bound. Thread-safe; ``clock`` is monotonic seconds."""

    def __init__(self, per_s: int, burst: int, clock: Callable[[], float]) -> None:
        self.per_s, self.burst, self._clock = per_s, max(burst, per_s), clock
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, at)
        self._lock = threading.Lock()

    def _tokens(self, tenant: str, now: float) -> float:
        tokens, at = self._buckets.get(tenant, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.per_s)

    def check(self, tenant: str | None, refuse: Callable[[float], RateLimited]) -> None:
        """Raise ``refuse(seconds)`` while ``tenant`` owes bytes."""
        if not self.per_s or tenant is None:
            return
        with self._lock:
            now = self._clock()
            tokens = self._tokens(tenant, now)
            if tokens < 0:
                raise refuse(-tokens / self.per_s)

    def charge(self, tenant: str | None, size: int) -> None:
        """``size`` bytes built for ``tenant``. Full buckets are forgotten (no state per idle tenant)."""
        if not self.per_s or tenant is None:
            return
        with self._lock:
            now = self._clock()
            tokens = self._tokens(tenant, now) - size
            self._buckets[tenant] = (tokens, now)
            full = [
                other
                for other, (t, at) in itertools.islice(self._buckets.items(), 8)  # a few at a time: bounded work
                if other != tenant and t + (now - at) * self.per_s >= self.burst
            ]
            for other in full:
                del self._buckets[other]
