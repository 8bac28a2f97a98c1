"""Per-key limits in one process (:class:`KeyLimiter`): a token bucket of requests per second and a
cap on requests in flight."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from hrt.auth.keys import MAX_RATE_LIMIT, MIN_RATE_LIMIT
from hrt.auth.ring import Principal
from hrt.errors import RateLimited


@dataclass
class _Bucket:
    tokens: float
    updated: float
    in_flight: int = 0


class KeyLimiter:
    """A token bucket (``rate`` requests per second, bursts up to two seconds' worth) and a cap on
    requests in flight, per key and per process: N replicas allow N times the rate."""

    def __init__(self, rate: float, max_concurrency: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.max_concurrency = max_concurrency
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def _limits(self, p: Principal) -> tuple[float, int]:
        rate = self.rate if p.rate_limit is None else p.rate_limit
        conc = self.max_concurrency if p.max_concurrency is None else p.max_concurrency
        if rate != 0:  # a row stored before the bounds (5e-324, inf) is held to them here
            rate = min(max(rate, MIN_RATE_LIMIT), MAX_RATE_LIMIT) if math.isfinite(rate) else MAX_RATE_LIMIT
        return rate, conc

    def acquire(self, p: Principal) -> None:
        """Take one request's place, or raise :class:`RateLimited` (with a Retry-After)."""
        rate, conc = self._limits(p)
        now = self.clock()
        burst = max(1.0, 2.0 * rate)
        b = self._buckets.get(p.key_id)
        if b is None:
            b = self._buckets[p.key_id] = _Bucket(tokens=burst, updated=now)
        if conc > 0 and b.in_flight >= conc:
            raise RateLimited(
                f"this API key has {b.in_flight} requests in flight, its limit", retry_after_s=1, reason="concurrency"
            )
        if rate > 0:
            b.tokens = min(burst, b.tokens + (now - b.updated) * rate)
            b.updated = now
            if b.tokens < 1.0:
                wait = math.ceil((1.0 - b.tokens) / rate)
                raise RateLimited(
                    f"this API key is over its {rate:g} requests per second", retry_after_s=wait, reason="rate"
                )
            b.tokens -= 1.0
        b.in_flight += 1

    def release(self, p: Principal) -> None:
        b = self._buckets.get(p.key_id)
        if b is not None and b.in_flight > 0:
            b.in_flight -= 1
