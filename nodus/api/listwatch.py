"""Lists and watches of stored objects as the API serves them: consistent snapshots and the watch cache.

A list reads one database snapshot (:meth:`ListWatch.open_list`), at a resourceVersion of the caller's choice
or the newest, paged by ``(namespace, name)``. A watch reads the process's watch cache from a resourceVersion
on (:meth:`ListWatch.stream`), or is fed by it once caught up (:meth:`ListWatch.subscribe`). Storage's
refusals become Statuses here, the same on every path: a snapshot or position older than the watch log's
retention window is a 410 ``Expired``, a resourceVersion no write has reached yet a 504
``TooLargeResourceVersion`` (kube-apiserver's "Too large resource version", with ``retryAfterSeconds``).
``nodus.api.http.lists`` and ``nodus.api.http.watches`` render them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from nodus.api.errors import APIError, expired
from nodus.storage import errors as storage_errors
from nodus.storage.listing import ListCursor, ListQuery
from nodus.storage.objects import Storage
from nodus.storage.subscribers import index_of
from nodus.storage.watchcache import Event, Subscriber

# What lists and watches are made of: a query, its cursor, an event and a watcher fed by the cache.
__all__ = ["Event", "ListCursor", "ListQuery", "ListWatch", "Subscriber", "index_of", "too_large"]


def too_large(rv: int, current: int) -> APIError:
    """The Status of a resourceVersion newer than any write (the client retries after a second)."""
    return APIError(
        "TooLargeResourceVersion",
        f"Too large resource version: {rv}, current: {current}",
        details={
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        headers={"Retry-After": "1"},
    )


def _too_old(exc: storage_errors.Expired) -> APIError:
    return expired(f"too old resource version: {exc.requested_rv} ({exc.oldest_rv})")


class ListWatch:
    """The read path of every kind on one API server (see the module docstring)."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._cache = storage.watch_cache

    async def current_rv(self) -> int:
        """The newest resourceVersion written."""
        return await self._storage.current_rv()

    @contextlib.asynccontextmanager
    async def open_list(self, query: ListQuery) -> AsyncIterator[ListCursor]:
        """A cursor over one snapshot of what ``query`` selects; its refusals as Statuses (a ``continue`` token
        too old to go on from says so)."""
        try:
            async with self._storage.open_list(query) as cursor:
                yield cursor
        except storage_errors.Expired as exc:
            if query.after is not None:
                raise expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start "
                    "a new list without the continue parameter."
                ) from exc
            raise _too_old(exc) from exc
        except storage_errors.TooLarge as exc:
            raise too_large(exc.requested_rv, exc.current_rv) from exc

    @property
    def head(self) -> int:
        """The newest resourceVersion the watch cache has read: every watch can reach it."""
        return self._cache.head

    async def wait_for_head(self, rv: int, timeout: float) -> bool:
        """Wait until the watch cache has read up to ``rv``; False when it has not within ``timeout`` seconds."""
        return await self._cache.wait_for_head(rv, timeout)

    async def check(self, start: int) -> None:
        """A 410 ``Expired`` Status when a watch from ``start`` is older than the retention window (on every
        server alike, whatever this one still holds in memory)."""
        try:
            await self._cache.check(start)
        except storage_errors.Expired as exc:
            raise _too_old(exc) from exc

    async def stream(self, start: int, idle: float) -> AsyncIterator[Event | None]:
        """Every event above ``start``, in order, forever; None after ``idle`` seconds without one, once caught
        up. A 410 ``Expired`` Status when the position falls out of the retention window."""
        try:
            async for event in self._cache.stream(start, idle):
                yield event
        except storage_errors.Expired as exc:
            raise _too_old(exc) from exc

    def subscribe(self, subscriber: Subscriber, position: int) -> bool:
        """Feed ``subscriber`` every later event of its kind; False (nothing subscribed) unless ``position`` is
        the head."""
        return self._cache.subscribe(subscriber, position)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._cache.unsubscribe(subscriber)
