"""One request never stalls the others: reads beside writes, caches rebuilt while the old one
serves, and the bound on concurrent writes (the server-level test is in tests/integration)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from hrt.errors import RateLimited
from hrt.ingest import parse_jsonl
from hrt.records import Kind
from hrt.service import HRTService
from hrt.stores.user_cache import UserCache
from tests.helpers import jsonl, mu


class SlowLoads:
    """A cache loader returning the write count it saw, blocking while ``gate`` is closed."""

    def __init__(self) -> None:
        self.writes = 0
        self.loads = 0
        self.gate = threading.Event()
        self.gate.set()
        self.loading = threading.Event()

    def __call__(self, user_id: str) -> int:
        self.loads += 1
        seen = self.writes
        self.loading.set()
        self.gate.wait(10)
        return seen


def counting_cache(loads: SlowLoads, due_at: int | None = None) -> UserCache[int, int]:
    """A cache whose snapshot is the number of writes it took; compaction due at ``due_at``."""
    return UserCache(
        loads,
        lambda user_id, snapshot, change: snapshot + change,
        None if due_at is None else (lambda snapshot: snapshot >= due_at),
        threading.RLock(),
    )


def test_a_write_updates_the_snapshot_without_a_load():
    loads = SlowLoads()
    cache = counting_cache(loads)
    assert cache.get("u") == 0
    cache.update("u", 1)
    cache.update("u", 2)
    assert cache.get("u") == 3
    assert loads.loads == 1  # the first load only


def test_a_compaction_builds_beside_the_serving_snapshot_and_takes_the_writes_meanwhile():
    loads = SlowLoads()
    cache = counting_cache(loads, due_at=2)
    cache.get("u")
    loads.writes = 2  # what the file holds once the two writes below committed
    loads.gate.clear()
    loads.loading.clear()
    cache.update("u", 2)  # due: the compaction starts in the background
    assert loads.loading.wait(5)
    started = time.perf_counter()
    assert cache.get("u") == 2  # the updated snapshot serves at once while the load is held
    assert time.perf_counter() - started < 1.0
    cache.update("u", 5)  # a write committed during the compaction: the serving snapshot has it
    assert cache.get("u") == 7
    loads.gate.set()
    assert cache.wait_compacted(5)
    assert cache.compactions == 1
    # the fresh load (2) with the write that committed meanwhile applied again (5)
    assert cache.get("u") == 7


def test_an_update_of_an_unloaded_user_loads_nothing():
    loads = SlowLoads()
    cache = counting_cache(loads)
    cache.update("u", 1)
    assert loads.loads == 0 and "u" not in cache


async def test_reads_do_not_wait_for_the_write_lock(loaded_service: HRTService):
    store = loaded_service.stores.in_process.file
    assert store is not None
    held = threading.Event()
    release = threading.Event()

    def long_write() -> None:
        with store.transaction():  # a large ingest's transaction holds the write lock
            held.set()
            release.wait(10)

    writer = threading.Thread(target=long_write)
    writer.start()
    try:
        assert held.wait(5)
        started = time.perf_counter()
        found = await loaded_service.records.get_many("u1", Kind.MEMORY_UNIT, ["m1", "m2"])
        counts = await loaded_service.records.counts("u1")
        assert time.perf_counter() - started < 1.0
        assert set(found) == {"m1", "m2"} and counts["memory_unit"] > 0
    finally:
        release.set()
        writer.join(5)


async def test_a_write_is_read_by_its_writer_and_updates_the_cache(loaded_service: HRTService):
    store = loaded_service.stores.in_process.file
    assert store is not None
    store.graph.preload("u1")
    store.vectors.preload("u1")
    before = store.vectors._cache.peek("u1")
    await loaded_service.ingest(parse_jsonl(jsonl([mu("u1", "m-new", "a brand new quokka memory")])))
    after = store.vectors._cache.peek("u1")
    assert after is not None and after is not before  # a new snapshot swapped in, not dropped
    assert "m-new" in after.ids
    g = store.graph._cache.peek("u1")
    assert g is not None and g.handle("m-new") is not None


async def test_writes_over_the_limit_are_refused_with_retry_after(loaded_service: HRTService):
    limit = loaded_service.settings.max_concurrent_ingests
    assert limit >= 1
    records = parse_jsonl(jsonl([mu("u1", "m-x", "another memory")]))
    gate = asyncio.Event()
    holders = []

    async def hold() -> None:
        with loaded_service.ingest_slot():
            await gate.wait()

    for _ in range(limit):
        holders.append(asyncio.ensure_future(hold()))
    await asyncio.sleep(0)
    with pytest.raises(RateLimited) as refused:
        await loaded_service.ingest(records)
    assert refused.value.retry_after_s == loaded_service.settings.ingest_retry_after_s
    gate.set()
    await asyncio.gather(*holders)
    assert (await loaded_service.ingest(records)).upserted == 1  # a slot is free again


async def test_a_writer_in_another_process_is_refused_naming_the_holder(tmp_path):
    import subprocess
    import sys

    from hrt.stores.embedded.lock import StoreInUse
    from hrt.stores.embedded.store import EmbeddedStore

    db = tmp_path / "s.db"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from hrt.stores.embedded.lock import StoreClaim; "
            "StoreClaim.acquire(pathlib.Path(sys.argv[1]), 'hrt serve on 127.0.0.1:1'); print('held', flush=True); "
            "sys.stdin.read()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    store = EmbeddedStore(db, 64)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreInUse) as refused:
            store.claim("writes: hrt ingest")
        assert f"process {holder.pid} (hrt serve on 127.0.0.1:1)" in refused.value.message
        assert str(db) in refused.value.message
        assert await store.records.users() == []  # reading needs no claim
        again = EmbeddedStore(db, 64)  # a second store in this process: refused the same way
        with pytest.raises(StoreInUse):
            again.claim("writes")
        again.close()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()  # the holder exits: the kernel drops its lock
        holder.wait(10)
    store.claim("writes: hrt ingest")
    second = EmbeddedStore(db, 64)
    second.claim("writes: another store of this process")  # shares this process's claim
    second.close()
    probe = (
        "import sys, pathlib; from hrt.stores.embedded.lock import StoreClaim; "
        "StoreClaim.acquire(pathlib.Path(sys.argv[1]), 'x')"
    )
    assert subprocess.run([sys.executable, "-c", probe, str(db)], capture_output=True).returncode != 0  # still held
    store.close()
    assert subprocess.run([sys.executable, "-c", probe, str(db)], capture_output=True).returncode == 0  # released


def test_a_failed_update_drops_the_snapshot_instead_of_failing_the_write():
    loads = SlowLoads()
    cache: UserCache[int, int] = UserCache(loads, lambda user_id, snapshot, change: 1 // 0, None, threading.RLock())
    cache.get("u")
    cache.update("u", 1)  # does not raise: the write it follows has committed
    assert "u" not in cache  # no stale snapshot left serving
    assert cache.get("u") == 0 and loads.loads == 2  # the next read loads


def test_close_waits_for_a_read_in_progress_and_later_reads_are_refused(tmp_path):
    from hrt.errors import StoreUnavailable
    from hrt.stores.embedded.store import EmbeddedStore

    store = EmbeddedStore(tmp_path / "s.db", 64)
    reading = threading.Event()
    release = threading.Event()
    seen: list[object] = []

    def long_read() -> None:  # a user's rows streaming into a cache in a worker thread
        with store.snapshot() as db:
            reading.set()
            release.wait(10)
            seen.append(db.execute("SELECT count(*) FROM docs").fetchone()[0])  # its connection still open

    reader = threading.Thread(target=long_read)
    reader.start()
    assert reading.wait(5)
    closer = threading.Thread(target=store.close)
    closer.start()
    time.sleep(0.2)
    assert closer.is_alive()  # waiting for the read, not closing the connection under it
    release.set()
    reader.join(5)
    closer.join(5)
    assert seen == [0] and not closer.is_alive()
    with pytest.raises(StoreUnavailable), store.reading():
        pass
