"""Which writes may run now: a write slot of the tenant's share (``HRT_MAX_CONCURRENT_INGESTS``),
the tenant's write time (``HRT_TENANT_WRITE_MS_PER_S``) and one conversation write per user at a
time; each refused with a 429 and its Retry-After. :class:`WriteAdmission` is a part of
:class:`hrt.service.HRTService`, which holds the shares, the time and the locks."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import weakref
from collections.abc import AsyncIterator, Iterator

from hrt.config import Settings
from hrt.errors import RateLimited
from hrt.shares import Activity, Shares, WriteTime

# a tenant's write time: the burst, in seconds of its HRT_TENANT_WRITE_MS_PER_S; and how recent
# another tenant's request must be for the share to apply (alone on the server, a tenant is free)
WRITE_TIME_BURST_S = 4
ACTIVE_WINDOW_S = 10.0


class WriteAdmission:
    """The service's write slots, write time and per-user conversation locks, and the 429s that
    refuse a write past them."""

    settings: Settings
    write_slots: Shares
    write_time: WriteTime
    _conversation_locks: weakref.WeakValueDictionary[str, asyncio.Lock]

    def _init_admission(self, settings: Settings) -> None:
        # writes in progress (ingest_slot), per tenant
        self.write_slots = Shares(settings.max_concurrent_ingests)
        # and their time, per tenant while others are active (the server notes who is)
        self.write_time = WriteTime(
            settings.tenant_write_ms_per_s,
            WRITE_TIME_BURST_S * settings.tenant_write_ms_per_s,
            Activity(ACTIVE_WINDOW_S, time.monotonic),
            time.monotonic,
        )
        # one conversation write per user at a time in this process (others wait; replicas are
        # kept apart by the statistics' version row, WriteBatch.state_expect)
        self._conversation_locks = weakref.WeakValueDictionary()

    @contextlib.contextmanager
    def ingest_slot(self, tenant: str | None = None) -> Iterator[None]:
        """One of the ``HRT_MAX_CONCURRENT_INGESTS`` writes that may run at once, at most half of
        them (at least one) for one ``tenant`` (:mod:`hrt.shares`; None: the operator, held to
        the total alone), or :class:`RateLimited` (429 with Retry-After) when the tenant's share or
        every slot is taken: a write embeds and commits in worker threads, and more of them at
        once would only queue for the CPU and the write lock while holding their records in
        memory. Never waited for: a write that finds none is refused at once; a write takes one
        (the use case, :mod:`hrt.usecases`, or the service's write). While other tenants are
        active, the time the slot is held is charged to ``tenant``'s ``HRT_TENANT_WRITE_MS_PER_S``
        (:class:`hrt.shares.WriteTime`), and a tenant that owes time is refused before it takes a slot."""
        self.write_time.check(tenant, self._write_time_refusal)
        started = self.write_time.clock()
        try:
            with self.write_slots.place(tenant, self._slots_refusal):
                yield
        finally:
            self.write_time.charge(tenant, started)

    def _slots_refusal(self, held: int, mine: bool) -> RateLimited:
        where = "for this tenant, its share" if mine else "as many as this server runs at once"
        return RateLimited(
            f"{held} writes are in progress, {where} (HRT_MAX_CONCURRENT_INGESTS); retry later",
            retry_after_s=self.settings.ingest_retry_after_s,
            reason="ingest_concurrency",
        )

    @staticmethod
    def _write_time_refusal(seconds: float) -> RateLimited:
        return RateLimited(
            "this tenant's writes are past their share of time (HRT_TENANT_WRITE_MS_PER_S); retry later",
            retry_after_s=math.ceil(seconds),
            reason="write_time",
        )

    @contextlib.asynccontextmanager
    async def user_write(self, user_id: str) -> AsyncIterator[None]:
        """The user's conversation lock (one conversation write per user at a time in this
        process), waited for at most ``HRT_USER_WRITE_WAIT_S`` and taken BEFORE a write slot: a
        second call for a busy user waits holding no slot, so it cannot take a slot from another
        tenant while it waits; past the wait, 429 with Retry-After."""
        lock = self._conversation_locks.setdefault(user_id, asyncio.Lock())
        wait = self.settings.user_write_wait_s
        try:
            async with asyncio.timeout(wait):
                await lock.acquire()
        except TimeoutError:
            raise RateLimited(
                f"another write of this user is still running after {wait:g} s (HRT_USER_WRITE_WAIT_S); retry later",
                retry_after_s=self.settings.ingest_retry_after_s,
                reason="ingest_concurrency",
            ) from None
        try:
            yield
        finally:
            lock.release()
