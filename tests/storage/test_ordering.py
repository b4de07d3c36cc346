"""Commit order equals resourceVersion order: a watcher never receives an event below one it saw.

Two storage instances (two independent group committers, as in two API server processes) write
concurrently with many writers each, while a watcher follows the log. If any transaction committed
after a later resourceVersion was visible, the watch cache (which reads "everything after the last
version seen") would skip it: the watcher would miss an event or see versions out of order.
"""

from __future__ import annotations

import asyncio

from nodus.storage.errors import Conflict, Key
from nodus.storage.objects import Storage
from tests.storage.conftest import job, unique_namespace

WRITERS = 24
WRITES_EACH = 20


async def _writer(store: Storage, namespace: str, writer: int) -> list[int]:
    versions = []
    key = Key("Job", namespace, f"w{writer}")
    body = await store.create(key, job(namespace, key.name))
    versions.append(int(body["metadata"]["resourceVersion"]))
    for step in range(WRITES_EACH - 1):
        while True:
            current = await store.get(key)
            assert current is not None
            current["spec"]["step"] = step
            try:
                body = await store.update(key, current, int(current["metadata"]["resourceVersion"]))
                break
            except Conflict:  # pragma: no cover - one writer per key; kept for safety
                continue
        versions.append(int(body["metadata"]["resourceVersion"]))
    return versions


async def test_watcher_sees_every_write_in_increasing_order(storage: Storage, database_url: str) -> None:
    other = Storage(database_url, pool_size=8, compaction_interval=3600)
    await other.start()
    try:
        namespace = unique_namespace()
        start = storage.watch_cache.head
        seen: list[int] = []
        expected_total = 2 * WRITERS * WRITES_EACH

        async def watch() -> None:
            async for event in storage.watch_cache.stream(start, idle=0.5):
                if event is not None and event.namespace == namespace:
                    seen.append(event.rv)
                    if len(seen) == expected_total:
                        return

        watcher = asyncio.create_task(watch())
        results = await asyncio.gather(
            *(_writer(storage, namespace, i) for i in range(WRITERS)),
            *(_writer(other, namespace, WRITERS + i) for i in range(WRITERS)),
        )
        await asyncio.wait_for(watcher, timeout=60)
    finally:
        await other.stop()
    committed = sorted(v for versions in results for v in versions)
    assert seen == sorted(seen), "the watcher received a resourceVersion below one it had already received"
    assert len(set(seen)) == len(seen)
    assert seen == committed, "the watcher missed or invented writes"
    assert storage.committer.batches < WRITERS * WRITES_EACH, "writes were not grouped into batches"
