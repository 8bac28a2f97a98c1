"""A small circuit breaker for a remote server (the reranker, the LLM extractor).

    closed ──(``failures`` consecutive failed calls)──► open
    open ──(``reset_s`` elapsed; the next call is the probe)──► half-open
    half-open ──(probe succeeds)──► closed        half-open ──(probe fails)──► open (timer restarts)

While open, and while a half-open probe is in flight, :meth:`allow` says no: callers fail at once,
without touching the network. Single event loop, no locks needed: every transition happens between
awaits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    def __init__(self, failures: int = 3, reset_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        if failures < 1:
            raise ValueError("breaker failures must be >= 1")
        if reset_s < 0:
            raise ValueError("breaker reset_s must be >= 0")
        self._threshold = failures
        self._reset_s = reset_s
        self._clock = clock
        self._consecutive = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return "closed"
        if self._probing or self._clock() - self._opened_at >= self._reset_s:
            return "half_open"
        return "open"

    @property
    def consecutive_failures(self) -> int:
        return self._consecutive

    def retry_in(self) -> float:
        """Seconds until a probe is allowed (0 when closed or already due)."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self._reset_s - (self._clock() - self._opened_at))

    def allow(self) -> bool:
        """May a call go out now? In half-open, only the first caller (the probe) gets a yes."""
        if self._opened_at is None:
            return True
        if self._probing or self._clock() - self._opened_at < self._reset_s:
            return False
        self._probing = True
        return True

    def record_success(self) -> None:
        self._consecutive = 0
        self._opened_at = None
        self._probing = False

    def record_abandoned(self) -> None:
        """A call ended with neither verdict (cancelled): free the probe slot, keep the state."""
        self._probing = False

    def record_failure(self) -> None:
        self._consecutive += 1
        if self._probing or self._consecutive >= self._threshold:
            self._opened_at = self._clock()
        self._probing = False
