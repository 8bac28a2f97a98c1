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


class Activity:
    """Whether a tenant other than a given one made a request in the last ``window_s`` seconds.
    Keeps two entries whatever the number of tenants: the newest tenant seen, and the newest one
    seen that is not it (so the newest tenant other than any given one is one of the two).
    Thread-safe; ``clock`` is monotonic seconds."""

    def __init__(self, window_s: float, clock: Callable[[], float]) -> None:
        self.window_s, self._clock = window_s, clock
        self._last: tuple[str, float] | None = None
        self._other: tuple[str, float] | None = None  # the newest of a tenant other than _last's
        self._lock = threading.Lock()

    def note(self, tenant: str) -> None:
        with self._lock:
            now = self._clock()
            if self._last is not None and self._last[0] != tenant:
                self._other = self._last
            self._last = (tenant, now)

    def others(self, tenant: str) -> bool:
        with self._lock:
            newest = self._last if self._last is not None and self._last[0] != tenant else self._other
            return newest is not None and self._clock() - newest[1] < self.window_s


class WriteTime:
    """The milliseconds of writes (a write slot held) one tenant may use per second while another
    tenant is active: a bucket of ``per_s`` milliseconds a second up to ``burst``, checked before a
    write takes its slot and charged with the slot's time once it is given back, so a tenant may
    go into debt by one write. Work-conserving: a tenant alone on the server (no other tenant's
    request within :attr:`Activity.window_s`) is neither charged nor refused. Write slots bound
    how many writes run at once; this bounds the cores one tenant's writes take from the others
    (a write embeds in parallel threads: one slot can take every core). ``per_s`` 0: no bound."""

    def __init__(self, per_s: int, burst: int, activity: Activity, clock: Callable[[], float]) -> None:
        self.activity, self.clock = activity, clock
        self._rates = ByteRates(per_s, burst, clock)

    def check(self, tenant: str | None, refuse: Callable[[float], RateLimited]) -> None:
        if tenant is not None and self._rates.per_s and self.activity.others(tenant):
            self._rates.check(tenant, refuse)

    def charge(self, tenant: str | None, since: float) -> None:
        """A write of ``tenant`` that took its slot at ``since`` (:attr:`clock`) is done."""
        if tenant is not None and self._rates.per_s and self.activity.others(tenant):
            self._rates.charge(tenant, round((self.clock() - since) * 1000))


class Tarpit:
    """How long to hold a refusal (429) to a tenant that came back before the ``Retry-After`` of
    its previous one: until that time, at most ``max_delay_s``. A client that waits as told never
    waits here; one that retries at once gets its refusals about once per ``Retry-After`` on each
    of its connections instead of thousands a second, each of which costs the server its key
    check and answer. At most ``max_held`` refusals of one tenant (and ``max_total`` of all) are
    held at once; past that one is answered at once, its connection closed. ``max_delay_s`` 0:
    never held. Thread-safe; ``clock`` is monotonic seconds."""

    def __init__(
        self, max_delay_s: float, clock: Callable[[], float], max_held: int = 64, max_total: int = 1024
    ) -> None:
        self.max_delay_s, self.max_held, self.max_total, self._clock = max_delay_s, max_held, max_total, clock
        self._until: dict[str, float] = {}  # tenant -> when it may retry (its last Retry-After)
        self._held: dict[str, int] = {}
        self._total = 0
        self._lock = threading.Lock()

    def hold(self, tenant: str, retry_after_s: float) -> float | None:
        """The seconds to hold this refusal (0: answer now), taking a held place when above 0, or
        None: answer now and close the connection (too many held). Give the place back with
        :meth:`release` after the answer."""
        if not self.max_delay_s:
            return 0.0
        with self._lock:
            now = self._clock()
            until = self._until.get(tenant, 0.0)
            delay = min(until - now, self.max_delay_s) if until > now else 0.0
            if delay > 0 and (self._held.get(tenant, 0) >= self.max_held or self._total >= self.max_total):
                return None
            self._until[tenant] = max(until, now + delay + retry_after_s)
            if delay > 0:
                self._held[tenant] = self._held.get(tenant, 0) + 1
                self._total += 1
            stale = [t for t, u in itertools.islice(self._until.items(), 8) if u <= now and t not in self._held]
            for t in stale:  # a few at a time: bounded work, no state per tenant long gone
                del self._until[t]
            return delay

    def release(self, tenant: str) -> None:
        with self._lock:
            self._total -= 1
            left = self._held[tenant] - 1
            if left:
                self._held[tenant] = left
            else:
                del self._held[tenant]
