"""A circuit per store behind a server (Neo4j, Weaviate): fail fast while it is down, notice at
once when it is back.

    closed ──(a call fails as StoreUnavailable, or a suspicion probe does)──► open
    open ──(a background probe succeeds)──► closed

- **Closed**: calls go through. A call still running after ``suspect_after_s`` makes the circuit
  ping the store once (``probe_timeout_s``): a store that answers is slow, not down, and nothing
  happens; a store that refuses (connection refused, not ready) opens the circuit, and every call
  still waiting on it ends at once with :class:`~hrt.errors.StoreDown`. So a store killed under
  load is known down within about ``suspect_after_s`` plus one refused connection, not after the
  driver's own retries (Neo4j's 5 s, Weaviate's 10 s deadline).
- **Open**: every call raises :class:`~hrt.errors.StoreDown` without touching the network
  (microseconds; ``Retry-After`` is the probe interval). A background task pings the store every
  ``probe_every_s``; the first ping that succeeds closes the circuit and runs the ``on_close``
  callbacks (the projector catches up from the outbox at once).
- One log line per transition (open, with the reason; closed, with how long it was open), never
  one per refused call; ``hrt_store_circuit_open{store}`` says which is open.

The state machine is :class:`hrt.breaker.CircuitBreaker` (threshold 1: the first failure that
means "unreachable" opens it); requests never take its half-open probe slot, the background task
does. One event loop: every transition happens between awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from hrt.breaker import CircuitBreaker
from hrt.errors import StoreDown, StoreUnavailable

if TYPE_CHECKING:
    from hrt.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_S = 1.0
SUSPECT_AFTER_S = 0.5


class StoreCircuit:
    """The circuit of one store. ``probe``: a cheap call that raises unless the store answers
    (the adapter's ``ping``, after ``open`` for a client that never connected)."""

    def __init__(
        self,
        store: str,
        probe: Callable[[], Awaitable[None]],
        *,
        probe_every_s: float = PROBE_EVERY_S,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
        suspect_after_s: float = SUSPECT_AFTER_S,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._probe = probe
        self.probe_every_s = probe_every_s
        self.probe_timeout_s = probe_timeout_s
        self.suspect_after_s = suspect_after_s
        self.metrics = metrics
        self._clock = clock
        self._breaker = CircuitBreaker(failures=1, reset_s=probe_every_s, clock=clock)
        self._reason = ""
        self._opened_at = 0.0
        self._opened = asyncio.Event()  # set while open: calls in flight stop waiting
        self._prober: asyncio.Task[None] | None = None
        self._suspicion: asyncio.Task[None] | None = None
        self._suspected_at = -math.inf  # the last suspicion ping's start
        # the blocks running under :meth:`guarding`, by task: ended at once when the circuit opens
        self._blocks: dict[asyncio.Timeout, asyncio.Task[Any] | None] = {}
        self.on_close: list[Callable[[], None]] = []
        if metrics is not None:
            metrics.circuit_open.labels(store=store).set(0)

    # --- state ----------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._breaker.state != "closed"

    @property
    def reason(self) -> str:
        """Why it opened (the log's text: it may name an address), empty while closed."""
        return self._reason if self.is_open else ""

    @property
    def retry_after_s(self) -> int:
        return max(1, math.ceil(self.probe_every_s))

    def refusal(self) -> StoreDown:
        return StoreDown(
            f"{self.store}'s circuit is open ({self._reason})",
            store=self.store,
            retry_after_s=self.retry_after_s,
        )

    def check(self) -> None:
        """Raise :class:`StoreDown` at once while the circuit is open."""
        if self.is_open:
            if self.metrics is not None:
                self.metrics.circuit_refused.labels(store=self.store).inc()
            raise self.refusal()

    def trip(self, reason: str) -> None:
        """The store is known down: open (once; a second trip while open changes nothing)."""
        if self.is_open:
            return
        self._breaker.record_failure()
        self._reason = reason
        self._opened_at = self._clock()
        self._opened.set()
        log.warning(
            "%s is unavailable: circuit open, calls that need it fail at once (%s); probing every %gs",
            self.store,
            reason,
            self.probe_every_s,
        )
        if self.metrics is not None:
            self.metrics.circuit_open.labels(store=self.store).set(1)
        self._end_blocks()
        if self._prober is None or self._prober.done():
            self._prober = asyncio.ensure_future(self._probe_until_back())

    def _close(self) -> None:
        if not self.is_open:
            return
        self._breaker.record_success()
        self._opened = asyncio.Event()
        log.warning("%s answers again: circuit closed after %.1fs", self.store, self._clock() - self._opened_at)
        if self.metrics is not None:
            self.metrics.circuit_open.labels(store=self.store).set(0)
        for callback in list(self.on_close):
            try:
                callback()
            except Exception:  # a listener's bug must not keep the circuit open
                log.exception("a listener of %s's circuit failed", self.store)

    # --- calls ----------------------------------------------------------------------------------

    async def call(self, call: Callable[[], Awaitable[T]], *, gate: bool = True) -> T:
        """Run one call of the store under the circuit. ``gate``: refuse at once while open (the
        lifecycle's calls pass ``False``: they run, and a failure still opens it)."""
        if gate:
            self.check()
        task = asyncio.ensure_future(call())
        try:
            done, _ = await asyncio.wait({task}, timeout=self.suspect_after_s)
            if not done:
                self._suspect()
                await self._race(task)
            return task.result()
        except StoreUnavailable as exc:
            if not isinstance(exc, StoreDown):
                self.trip(exc.message)
            raise
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    @contextlib.asynccontextmanager
    async def guarding(self, *, gate: bool = True) -> AsyncIterator[None]:
        """The block under the circuit, for a store whose calls are blocks (PostgreSQL: a pooled
        connection and the statements on it). As :meth:`call`: refused at once while open (unless
        ``gate`` is False); a :class:`StoreUnavailable` of this store raised inside opens it; a
        block still running after ``suspect_after_s`` has the store pinged once, and ends with
        :class:`StoreDown` as soon as the circuit opens (a pool waiting for a connection to a
        server that is gone, a statement on a dead socket)."""
        if gate:
            self.check()
        loop = asyncio.get_running_loop()
        deadline = asyncio.timeout(None)

        timers: list[asyncio.TimerHandle] = []

        def suspect() -> None:  # again when a ping was too soon after the last one
            wait = self._suspect()
            if wait > 0:
                timers.append(loop.call_later(wait, suspect))

        timers.append(loop.call_later(self.suspect_after_s, suspect))
        try:
            async with deadline:
                self._blocks[deadline] = asyncio.current_task()
                try:
                    yield
                except StoreUnavailable as exc:
                    self._blocks.pop(deadline, None)  # this block ends by itself
                    if not isinstance(exc, StoreDown) and exc.store == self.store:
                        self.trip(exc.message)
                    raise
        except TimeoutError:
            if deadline.expired() and self.is_open:  # ended by the circuit opening
                raise self.refusal() from None
            raise
        finally:
            for timer in timers:
                timer.cancel()
            self._blocks.pop(deadline, None)

    def _end_blocks(self) -> None:
        """End every block running under :meth:`guarding` in another task (the circuit opened)."""
        now, current = asyncio.get_running_loop().time(), asyncio.current_task()
        for deadline, task in list(self._blocks.items()):
            if task is not current and not deadline.expired():
                with contextlib.suppress(RuntimeError):  # a block leaving at this moment
                    deadline.reschedule(now)

    async def _race(self, task: asyncio.Future[T]) -> None:
        """Wait for ``task`` unless the circuit opens first (then :class:`StoreDown`)."""
        opened: asyncio.Future[Any] = asyncio.ensure_future(self._opened.wait())
        racing: set[asyncio.Future[Any]] = {task, opened}
        try:
            done, _ = await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
        finally:
            opened.cancel()
        if task not in done:
            raise self.refusal()

    def _suspect(self) -> float:
        """One ping at a time, at most one per ``suspect_after_s``, while calls run long (a pool
        short of connections under load must not turn into a connection per call): a store that
        refuses it opens the circuit. Returns 0, or how long until a ping may start (too soon)."""
        if self.is_open or (self._suspicion is not None and not self._suspicion.done()):
            return 0.0
        wait = self._suspected_at + self.suspect_after_s - self._clock()
        if wait > 0:
            return wait
        self._suspected_at = self._clock()
        self._suspicion = asyncio.ensure_future(self._ping_once())
        return 0.0

    async def _ping_once(self) -> None:
        try:
            async with asyncio.timeout(self.probe_timeout_s):
                await self._probe()
        except StoreUnavailable as exc:
            self.trip(exc.message)
        except Exception:  # slow (a timeout) or another failure: not known down
            return

    async def _probe_until_back(self) -> None:
        while self.is_open:
            await asyncio.sleep(self.probe_every_s)
            try:
                async with asyncio.timeout(self.probe_timeout_s):
                    await self._probe()
            except Exception:  # still down (or slow): the next probe tries again
                continue
            self._close()

    async def probe_now(self) -> bool:
        """Ping within ``probe_timeout_s`` (``/readyz``): True when the store answers. A refusal
        opens the circuit; an answer while open closes it."""
        try:
            async with asyncio.timeout(self.probe_timeout_s):
                await self._probe()
        except StoreUnavailable as exc:
            self.trip(exc.message)
            return False
        except Exception:
            return False
        self._close()
        return True

    async def close(self) -> None:
        """Stop the background tasks (the service closing)."""
        for task in (self._prober, self._suspicion):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
