"""The store: get, list, watch, create, update, delete of JSON objects, and the watch log's upkeep.

This is the interface the API machinery is written against. Bodies go in and come out as the
complete object (``apiVersion``, ``kind``, ``metadata``, ...); storage assigns
``metadata.resourceVersion`` and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any

import asyncpg
import orjson

from nodus.storage import database
from nodus.storage.committing import Committer, Companion, Write
from nodus.storage.errors import Key, StorageError
from nodus.storage.listing import ListCursor, ListQuery
from nodus.storage.watchcache import WatchCache

log = logging.getLogger(__name__)

_COMPACT = """
WITH cut AS (
    SELECT max(rv) AS rv FROM events WHERE created_at < now() - make_interval(secs => $1)
), gone AS (
    DELETE FROM events WHERE rv <= (SELECT rv FROM cut) RETURNING rv
)
UPDATE counters SET value = greatest(value, coalesce((SELECT max(rv) FROM gone), 0))
WHERE key = 'compacted_rv'
RETURNING value
"""

_ORPHANS = """
SELECT o.body, ARRAY(
    SELECT u FROM unnest(o.owner_uids) AS u WHERE NOT EXISTS (SELECT 1 FROM objects p WHERE p.uid = u)
) AS missing
FROM objects o
WHERE cardinality(o.owner_uids) > 0
  AND EXISTS (
    SELECT 1 FROM unnest(o.owner_uids) AS u WHERE NOT EXISTS (SELECT 1 FROM objects p WHERE p.uid = u)
  )
"""


class Storage:
    """PostgreSQL-backed object storage for one process. ``start()`` before use, ``stop()`` after."""

    def __init__(
        self,
        url: str,
        pool_size: int = 20,
        watch_cache_capacity: int = 20_000,
        retention: timedelta = timedelta(minutes=15),
        compaction_interval: float = 60.0,
    ) -> None:
        self.url = url
        self.retention = retention
        self._compaction_interval = compaction_interval
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self.committer = Committer(self._connection)
        self.watch_cache = WatchCache(database.asyncpg_dsn(url), self._connection, watch_cache_capacity)
        self._compactor: asyncio.Task[None] | None = None

    def _connection(self) -> contextlib.AbstractAsyncContextManager[Any]:
        if self._pool is None:
            raise StorageError("storage is not started")
        return self._pool.acquire()  # type: ignore[no-any-return]

    async def start(self) -> None:
        self._pool = await database.create_pool(self.url, self._pool_size)
        self.committer.start()
        await self.watch_cache.start()
        self._compactor = asyncio.get_running_loop().create_task(self._compact_forever(), name="nodus-compactor")

    async def stop(self) -> None:
        if self._compactor is not None:
            self._compactor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._compactor
        await self.watch_cache.stop()
        await self.committer.stop()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    # --- reads ---------------------------------------------------------------------------------

    async def get(self, key: Key) -> dict[str, Any] | None:
        """The stored object, or None. A key with a NUL character names nothing (PostgreSQL text cannot hold
        one, and the query would fail): None, so a request naming one is a 404, not a 500."""
        if "\x00" in key.namespace or "\x00" in key.name:
            return None
        async with self._connection() as conn:
            body = await conn.fetchval(
                "SELECT body FROM objects WHERE kind = $1 AND namespace = $2 AND name = $3",
                key.kind,
                key.namespace,
                key.name,
            )
        return orjson.loads(body) if body is not None else None

    async def current_rv(self) -> int:
        async with self._connection() as conn:
            value: int = await conn.fetchval("SELECT value FROM counters WHERE key = 'rv'")
        return value

    @asynccontextmanager
    async def open_list(self, query: ListQuery) -> AsyncIterator[ListCursor]:
        """Open a consistent list. Raises Expired or TooLarge before yielding, never after."""
        async with AsyncExitStack() as stack:
            conn = await stack.enter_async_context(self._connection())
            transaction = conn.transaction(isolation="repeatable_read", readonly=True)
            await transaction.start()
            stack.push_async_callback(transaction.rollback)
            cursor = ListCursor(conn, query, lambda: None)
            await cursor.open()
            yield cursor

    async def dependents(self, owner_uid: str) -> list[dict[str, Any]]:
        """Objects with an ownerReference to ``owner_uid``."""
        async with self._connection() as conn:
            bodies = await conn.fetch("SELECT body FROM objects WHERE owner_uids @> ARRAY[$1::text]", owner_uid)
        return [orjson.loads(r["body"]) for r in bodies]

    async def being_deleted(self, kinds: list[str]) -> list[dict[str, Any]]:
        """Objects of these kinds with a deletionTimestamp (waiting on finalizers or dependents)."""
        async with self._connection() as conn:
            bodies = await conn.fetch("SELECT body FROM objects WHERE deleting AND kind = ANY($1::text[])", kinds)
        return [orjson.loads(r["body"]) for r in bodies]

    async def orphans(self) -> list[tuple[dict[str, Any], list[str]]]:
        """Objects with ownerReferences to uids that no longer exist, with those missing uids."""
        async with self._connection() as conn:
            records = await conn.fetch(_ORPHANS)
        return [(orjson.loads(r["body"]), list(r["missing"])) for r in records]

    async def names_containing(self, kind: str, document: Any) -> list[str]:
        """Names of cluster-scoped objects of ``kind`` whose body contains ``document`` (JSON @>)."""
        async with self._connection() as conn:
            records = await conn.fetch(
                "SELECT name FROM objects WHERE kind = $1 AND namespace = '' AND body::jsonb @> $2::jsonb",
                kind,
                orjson.dumps(document).decode(),
            )
        return [r["name"] for r in records]

    async def labelled(self, kind: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        """Objects of ``kind`` in every namespace whose labels include ``labels`` (the labels' GIN index)."""
        async with self._connection() as conn:
            bodies = await conn.fetch(
                "SELECT body FROM objects WHERE kind = $1 AND labels @> $2::jsonb ORDER BY namespace, name",
                kind,
                orjson.dumps(labels).decode(),
            )
        return [orjson.loads(r["body"]) for r in bodies]

    async def namespaced_in(self, namespace: str, kinds: list[str]) -> list[dict[str, Any]]:
        async with self._connection() as conn:
            bodies = await conn.fetch(
                "SELECT body FROM objects WHERE namespace = $1 AND kind = ANY($2::text[]) ORDER BY kind, name",
                namespace,
                kinds,
            )
        return [orjson.loads(r["body"]) for r in bodies]

    # --- writes --------------------------------------------------------------------------------

    def written_rv(self, kind: str) -> int:
        """The resourceVersion of the newest write of ``kind`` committed through this process (0: none yet). It is
        set before the write's caller resumes, so whatever this process does after a write can wait for the watch
        cache to reach it (the Projects view's read-your-writes, nodus.api.projectview)."""
        return self.committer.written.get(kind, 0)

    async def create(self, key: Key, body: dict[str, Any], companions: tuple[Companion, ...] = ()) -> dict[str, Any]:
        """Store a new object, and its ``companions`` in the same transaction. Raises AlreadyExists."""
        return await self.committer.submit(Write("create", key, body, companions=companions))

    async def update(
        self, key: Key, body: dict[str, Any], expected_rv: int, companions: tuple[Companion, ...] = ()
    ) -> dict[str, Any]:
        """Replace an object if it is still at ``expected_rv``, and write its ``companions`` in the same
        transaction. Raises NotFound or Conflict."""
        return await self.committer.submit(Write("update", key, body, expected_rv, companions))

    async def delete(self, key: Key, body: dict[str, Any], expected_rv: int) -> dict[str, Any]:
        """Remove an object if it is still at ``expected_rv``; ``body`` is what the DELETED event
        carries. Raises NotFound or Conflict."""
        return await self.committer.submit(Write("delete", key, body, expected_rv))

    # --- upkeep --------------------------------------------------------------------------------

    async def compact(self) -> int:
        """Drop events older than the retention window; returns the new compaction point."""
        async with self._connection() as conn, conn.transaction():
            if not await conn.fetchval("SELECT pg_try_advisory_xact_lock(7262022)"):
                value: int = await conn.fetchval("SELECT value FROM counters WHERE key = 'compacted_rv'")
                return value
            compacted: int = await conn.fetchval(_COMPACT, self.retention.total_seconds())
        return compacted

    async def _compact_forever(self) -> None:
        while True:
            await asyncio.sleep(self._compaction_interval)
            try:
                await self.compact()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("compacting the watch log failed; will retry")
