"""When the garbage collector passes (ADR 0036), in-process on a database of its own (its leadership is an
advisory lock per database: the session's API server holds the session database's).

The end-to-end tests in tests/e2e/test_garbage_collection.py play the same through a real server; this one
makes the moment exact: a deletion committed while a pass runs, after the pass read what it acts on.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from nodus.api.auth.principal import ADMIN_GROUP, Principal
from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.api.garbagecollection import GarbageCollector
from nodus.api.kinds import catalog
from nodus.api.store import GenericStore
from nodus.storage import database
from nodus.storage.objects import Storage

ADMIN = Principal(user="admin", groups=(ADMIN_GROUP,))


def _ctx() -> RequestContext:
    return RequestContext(principal=ADMIN, request_id="test", field_manager="test")


@pytest.fixture
async def stores(database_server: str) -> AsyncIterator[dict[str, GenericStore]]:
    url = await database.create_database(database_server)
    try:
        await database.migrate_async(url)
        storage = Storage(url, pool_size=4, compaction_interval=3600)
        await storage.start()
        try:
            yield {info.plural: GenericStore(storage, info) for info in catalog.registry()}
        finally:
            await storage.stop()
    finally:
        await database.drop_database(url)


class _DeletingDuringAPass(GarbageCollector):
    """The real collector, with ``during`` run once at the end of a pass: after the pass read everything it acts
    on, before it returns."""

    def __init__(self, stores: dict[str, GenericStore], resync: float, during: Callable[[], Awaitable[None]]):
        super().__init__(stores, resync=resync)
        self._during: Callable[[], Awaitable[None]] | None = during

    async def collect(self) -> None:
        await super().collect()
        if self._during is not None:
            during, self._during = self._during, None
            await during()


async def _project(stores: dict[str, GenericStore]) -> str:
    name = f"p-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": name}, "spec": {}}
    await stores["projects"].create(None, body, _ctx())
    return name


async def _gone(stores: dict[str, GenericStore], project: str, timeout: float) -> bool:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        try:
            await stores["projects"].get(None, project)
        except APIError:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_deletion_during_a_pass_wakes_the_next(stores: dict[str, GenericStore]) -> None:
    """The collector used to watch from the newest event *after* a pass: a project deleted while the pass ran
    (already in the watch cache when it ended) waited for the next periodic pass, here an hour away."""
    doomed = await _project(stores)
    storage = stores["projects"].storage

    async def delete() -> None:
        marked, _ = await stores["projects"].delete(None, doomed, {}, _ctx())
        # The old collector read the cache's head after the pass: make sure that head includes this deletion.
        assert await storage.watch_cache.wait_for_head(int(marked["metadata"]["resourceVersion"]), 5.0)

    collector = _DeletingDuringAPass(stores, resync=3600, during=delete)
    collector.start()
    try:
        assert await _gone(stores, doomed, 10.0), "the project deleted during a pass is still there"
    finally:
        await collector.stop()
