"""The PostgreSQL record store's connections: the request and lease pools, opened and renewed,
run under the store's circuit, and the blocks every query runs in (:meth:`PostgresDatabase.connection`,
:meth:`PostgresDatabase.reading`). The concerns of the record store build on it: its writes
(:mod:`.writes`), outbox (:mod:`.outbox`), keys (:mod:`.keys`), state (:mod:`.state`) and reads
(:mod:`.records`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext, suppress
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from hrt.errors import StoreUnavailable
from hrt.stores.postgres.errors import translate_errors

if TYPE_CHECKING:
    from hrt.stores.circuit import StoreCircuit


log = logging.getLogger(__name__)


class _PoolReconnects(logging.Filter):
    """psycopg's pool logs a warning per failed reconnection attempt (and per dead connection it
    drops) while PostgreSQL is down; behind a circuit, the circuit's two lines (opened, closed) say
    it instead."""

    NOISE = ("error connecting in ", "discarding closed connection")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= logging.WARNING and str(record.msg).startswith(self.NOISE))


_POOL_RECONNECTS = _PoolReconnects()


def quiet_pool_reconnects() -> None:
    """Install :class:`_PoolReconnects` on psycopg's pool logger (once; a server's stores)."""
    logger = logging.getLogger("psycopg.pool")
    if _POOL_RECONNECTS not in logger.filters:
        logger.addFilter(_POOL_RECONNECTS)


class PostgresDatabase:
    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        timeout: float = 10.0,
        embedder: tuple[int, str] | None = None,
    ) -> None:
        """``embedder``: the (dimension, model id) of the vectors this process writes and reads;
        the store refuses another model's (:mod:`hrt.stores.vector_meta`), checked by ``apply_schema``."""
        self._dsn = dsn
        self._embedder = embedder
        self._timeout = timeout
        self._connecting = False  # open(keep_trying=True) failed: the pool connects in the background
        self._sizes = (min_size, max_size)
        # set by the composition root for a server (hrt.stores.factory): every connection's block
        # runs under it, so a PostgreSQL that is down is refused at once (503), not after the pool's timeout
        self.circuit: StoreCircuit | None = None
        self.pool = self._request_pool()
        # a lease holds its connection across the projector's write to Neo4j or Weaviate: the
        # leases get connections of their own (one per target, one more for `hrt doctor --repair`),
        # so a slow target never holds the connections that requests read with; none until used
        self.lease_pool = self._lease_pool()
        self._renewing: set[asyncio.Future[None]] = set()
        self._swap: asyncio.Future[None] | None = None  # the pools being renewed (_renew_pools)
        self._stale_pools: list[AsyncConnectionPool] = []  # replaced by _renew_pools, closed after

    def attach(self, circuit: StoreCircuit) -> None:
        """Run every connection's block under ``circuit``; when it closes, renew the pools."""
        self.circuit = circuit
        circuit.on_close.append(self._renew_soon)

    def _renew_soon(self) -> None:
        self._swap = self._in_background(self._renew_pools())

    def _in_background(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """A task held until it ends (and cancelled by :meth:`close`)."""
        task = asyncio.ensure_future(work)
        self._renewing.add(task)
        task.add_done_callback(self._renewing.discard)
        return task

    async def _renew_pools(self) -> None:
        """PostgreSQL answers again: fresh pools, connecting now. The old ones retry with a growing
        backoff (up to seconds after an outage of ten) during which a request would wait for
        them: a request that comes once the circuit has closed waits for this swap (it only starts
        the new pools' connections, :meth:`_current_pools`); one that took an old pool before
        the circuit closed keeps it (its pool's timeout still bounds it), and the old pools are
        closed after that timeout."""
        if self.pool.closed:  # not opened yet, or closing: nothing to renew
            return
        pool, lease_pool = self._request_pool(), self._lease_pool()
        await pool.open(wait=False)
        await lease_pool.open(wait=False)
        self._stale_pools += [self.pool, self.lease_pool]
        self.pool, self.lease_pool = pool, lease_pool
        self._in_background(self._close_stale_later())

    async def _close_stale_later(self) -> None:
        await asyncio.sleep(self._timeout)
        await self._close_stale_pools()

    async def _current_pools(self) -> None:
        """Wait for a pool swap in progress (the circuit has just closed): never take a pool
        that is being replaced."""
        swap = self._swap
        if swap is not None and not swap.done():
            with suppress(Exception):
                await asyncio.shield(swap)

    async def _close_stale_pools(self) -> None:
        stale, self._stale_pools = self._stale_pools, []
        for pool in stale:
            with suppress(Exception):
                await pool.close(timeout=1.0)

    def _lease_pool(self) -> AsyncConnectionPool:
        return AsyncConnectionPool(
            self._dsn,
            min_size=0,
            max_size=3,
            open=False,
            timeout=self._timeout,
            kwargs={"autocommit": False},
            check=AsyncConnectionPool.check_connection,
            name="hrt-outbox-leases",
        )

    def _request_pool(self) -> AsyncConnectionPool:
        return AsyncConnectionPool(
            self._dsn,
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            open=False,
            timeout=self._timeout,
            kwargs={"autocommit": False},
            check=AsyncConnectionPool.check_connection,
            name="hrt-records",
        )

    async def open(self, *, keep_trying: bool = False) -> None:
        """Open the pools, waiting until PostgreSQL answers (StoreUnavailable after the timeout).
        ``keep_trying`` (a server starting while PostgreSQL is down): the pool stays open after
        that error and keeps connecting in the background, so the store serves once PostgreSQL is
        back, without a restart; until then every call fails as StoreUnavailable, and so does
        ``open`` again, which succeeds once PostgreSQL answers."""
        try:
            await self._open(keep_trying)
        except StoreUnavailable as exc:  # not raced by the circuit: a pool's open must end by itself
            if self.circuit is not None and exc.store == self.circuit.store:
                self.circuit.trip(exc.message)
            raise

    async def _open(self, keep_trying: bool) -> None:
        if self._connecting:  # a pool left connecting in the background by an earlier open
            await self.ping()
            self._connecting = False
            await self._warn_if_superuser()
            return
        try:
            with translate_errors("connect"):
                await self.pool.open(wait=True, timeout=self._timeout)
        except StoreUnavailable:
            if keep_trying:  # a pool that timed out is closed for good: a new one, not waited for
                self.pool = self._request_pool()
                await self.pool.open(wait=False)
                await self.lease_pool.open(wait=False)
                self._connecting = True
            raise
        await self.lease_pool.open(wait=False)
        await self._warn_if_superuser()

    async def _warn_if_superuser(self) -> None:
        """A warning, not a refusal (deployments made that way keep working): HRT needs a role
        that owns its database, nothing more, and a superuser's DSN hands whoever gets it (a flaw
        in HRT, a leaked setting) the whole server, its files and programs included
        (docs/security.md)."""
        async with self.reading("role check") as conn:
            cur = await conn.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")
            row = await cur.fetchone()
        if row is not None and row[1]:
            log.warning(
                "HRT_POSTGRES_DSN connects as %s, a PostgreSQL superuser: connect as a role that owns HRT's "
                "database and nothing more (docs/deployment.md, 'The PostgreSQL role')",
                row[0],
            )

    async def close(self) -> None:
        if self.circuit is not None:
            await self.circuit.close()
        for task in list(self._renewing):
            task.cancel()
            with suppress(BaseException):
                await task
        await self._close_stale_pools()
        await self.lease_pool.close()
        await self.pool.close()

    async def ping(self) -> None:
        """Raise StoreUnavailable unless PostgreSQL answers (the record store reads its records)."""
        raise NotImplementedError

    async def probe(self) -> None:
        """The circuit's probe: one connection of its own (never the pool's, which waits for its
        timeout while PostgreSQL is down) and ``SELECT 1``; StoreUnavailable when refused."""
        with translate_errors("ping"):
            conn = await psycopg.AsyncConnection.connect(self._dsn, connect_timeout=max(1, int(self._timeout)))
            try:
                await conn.execute("SELECT 1")
            finally:
                await conn.close()

    def _guarded(self, *, gate: bool = True) -> AbstractAsyncContextManager[None]:
        return self.circuit.guarding(gate=gate) if self.circuit is not None else nullcontext()

    async def warm(self) -> None:
        """Nothing to prepare: PostgreSQL plans each statement as it comes."""

    @asynccontextmanager
    async def connection(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._guarded():
            await self._current_pools()
            with translate_errors(action):
                async with self.pool.connection() as conn:
                    yield conn

    @asynccontextmanager
    async def _leased_connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._guarded():
            await self._current_pools()
            with translate_errors("outbox lease"):
                async with self.lease_pool.connection() as conn:
                    yield conn

    @asynccontextmanager
    async def reading(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection for one read statement, in autocommit: no BEGIN and COMMIT round
        trips around it (a single SELECT is atomic either way). The pool's connections are
        transactional; the setting is a client-side flag, restored before the connection goes back."""
        async with self.connection(action) as conn:
            await conn.set_autocommit(True)
            try:
                yield conn
            finally:
                # fails only on a connection the pool then discards (closed, or mid-statement)
                with suppress(psycopg.Error):
                    await conn.set_autocommit(False)
