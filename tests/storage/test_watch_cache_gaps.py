"""A watch cache whose pump fell behind the log's compaction point loses events, and says so.

One process's pump is held while another process writes and compacts the log past it (as when the first could
not reach the database for longer than the retention window). On its next read the cache notices: its
subscribers are told (``lost``) and dropped, a stream from below the gap gets Expired, and it goes on from the
compaction point for everyone who starts again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta

import asyncpg
import pytest

from nodus.storage import database
from nodus.storage.errors import Expired, Key
from nodus.storage.objects import Storage
from nodus.storage.watchcache import Event
from tests.storage.conftest import job, unique_namespace


@pytest.fixture(scope="module")
def own_database(database_server: str) -> Iterator[str]:
    """A database of this module's own: compacting the log to now must not expire other tests' watches."""
    url = asyncio.run(database.create_database(database_server))
    database.migrate(url)
    yield url
    asyncio.run(database.drop_database(url))


@pytest.fixture
async def storage(own_database: str) -> AsyncIterator[Storage]:
    store = Storage(own_database, pool_size=4, compaction_interval=3600)
    await store.start()
    yield store
    await store.stop()


@pytest.fixture
async def other(own_database: str) -> AsyncIterator[Storage]:
    """Another process's storage, whose compaction keeps nothing."""
    store = Storage(own_database, pool_size=4, compaction_interval=3600, retention=timedelta(0))
    await store.start()
    yield store
    await store.stop()


class Recorder:
    kind = "Job"
    index: tuple[str, str] | None = None  # every event of the kind

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.told = 0

    def deliver(self, event: Event) -> bool:
        self.events.append(event)
        return True

    def lost(self) -> None:
        self.told += 1


@contextlib.asynccontextmanager
async def held(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """The pump of ``storage`` reads nothing inside the block; it reads what it missed once it ends."""
    gate = asyncio.Event()
    read: Callable[[asyncpg.Connection], Awaitable[None]] = storage.watch_cache._read_new

    async def gated(conn: asyncpg.Connection) -> None:
        await gate.wait()
        await read(conn)

    monkeypatch.setattr(storage.watch_cache, "_read_new", gated)
    try:
        yield
    finally:
        gate.set()


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("after", ["a-later-write", "nothing-later"])
async def test_a_pump_behind_the_compaction_point_tells_its_watchers(
    storage: Storage, other: Storage, monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    namespace = unique_namespace()
    cache = storage.watch_cache
    seen = await storage.create(Key("Job", namespace, "seen"), job(namespace, "seen"))
    assert await cache.wait_for_head(int(seen["metadata"]["resourceVersion"]), 5.0)
    recorder = Recorder()
    assert cache.subscribe(recorder, cache.head)
    position = cache.head
    async with held(storage, monkeypatch):
        missed = await other.create(Key("Job", namespace, "missed"), job(namespace, "missed"))
        compacted = await other.compact()
        assert compacted >= int(missed["metadata"]["resourceVersion"])
        if after == "a-later-write":
            await other.create(Key("Job", namespace, "later"), job(namespace, "later"))
    await until(lambda: recorder.told == 1)
    assert cache.losses == 1 and cache.head >= compacted
    assert [e.name for e in recorder.events] == [], "nothing was fed across the gap"
    assert not cache.subscribe(recorder, position), "the cache went on from the compaction point"
    with pytest.raises(Expired):
        async for _ in cache.stream(position, idle=0.1):
            pass
    # Starting again from the compaction point (as a new list would) is fed every later event.
    again = Recorder()
    assert cache.subscribe(again, cache.head)
    last = await other.create(Key("Job", namespace, "last"), job(namespace, "last"))
    await until(lambda: any(e.rv == int(last["metadata"]["resourceVersion"]) for e in again.events))
