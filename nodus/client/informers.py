"""Informers: a local cache of one kind kept current by list-then-watch, with indexes and handlers.

An informer lists the objects it covers, then watches from the list's resourceVersion with
bookmarks, so every change after the list arrives exactly once and in resourceVersion order.
When the watch cannot go on (410 Expired, an ERROR event, a dropped connection, a server that is
down) it lists again, with jittered exponential backoff, and replaces its cache: it emits what
differs between the old cache and the new list, including deletions it never saw as events. A
watch the server ends at its timeout is simply resumed from the last resourceVersion seen.

Handlers are called synchronously in the informer's task with ``(old, new)``: ``(None, obj)`` when
an object appears, ``(old, obj)`` when it changes, ``(last, None)`` when it goes. They must be fast
and must not block (typically: put a key on a work queue). With ``resync`` every cached object is
re-emitted as ``(obj, obj)`` periodically, a level-triggered safety net for missed work.

Cached objects are shared, not copied: treat what ``get``, ``items`` and ``by_index`` return, and
what handlers receive, as read-only (copy before changing one to write it back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import Any

from nodus.client import Client, errors

Object = dict[str, Any]
Key = tuple[str | None, str]
Handler = Callable[[Object | None, Object | None], None]
IndexFunc = Callable[[Object], list[str]]

log = logging.getLogger(__name__)


def object_key(obj: Object) -> Key:
    """``(namespace, name)`` of an object; namespace is None for cluster-scoped kinds."""
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or None, str(metadata.get("name") or "")


def _resource_version(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Informer:
    """A list-watch cache of ``plural`` (in one project, or all with ``namespace=None``)."""

    def __init__(
        self,
        client: Client,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resync: float | None = None,
        watch_timeout: int = 300,
        initial_backoff: float = 0.5,
        max_backoff: float = 30.0,
    ) -> None:
        self.client = client
        self.plural = plural
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.resync = resync
        self.watch_timeout = watch_timeout  # each watch asks for between this and twice this, in seconds
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self._cache: dict[Key, Object] = {}
        self._handlers: list[Handler] = []
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[Key]]] = {}
        self._synced = asyncio.Event()
        self._resource_version = ""
        self._progressed = False

    def __repr__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        selector = f" {self.label_selector}" if self.label_selector else ""
        return f"<Informer {self.plural}{where}{selector}>"

    # Reading the cache

    @property
    def has_synced(self) -> bool:
        """True once the first list has been stored (and ever after)."""
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        """The resourceVersion the cache reflects (the last list, event or bookmark)."""
        return self._resource_version

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def get(self, namespace: str | None, name: str) -> Object | None:
        return self._cache.get((namespace or None, name))

    def items(self) -> list[Object]:
        return list(self._cache.values())

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Index the cache by ``fn(obj)`` (a list of values, e.g. ``[owner uid]``); queried by :meth:`by_index`."""
        if name in self._indexers:
            raise ValueError(f"{self!r} already has an index named {name!r}")
        self._indexers[name] = fn
        self._indices[name] = {}
        for key, obj in self._cache.items():
            self._index_one(name, key, obj)

    def by_index(self, name: str, value: str) -> list[Object]:
        """The cached objects whose index ``name`` includes ``value``."""
        try:
            keys = self._indices[name].get(value, ())
        except KeyError:
            raise KeyError(f"{self!r} has no index named {name!r}") from None
        return [self._cache[key] for key in keys]

    def add_handler(self, fn: Handler) -> None:
        """Call ``fn(old, new)`` on every change; objects already cached are replayed to it as ``(None, obj)``."""
        self._handlers.append(fn)
        for obj in list(self._cache.values()):
            self._call(fn, None, obj)

    # Running

    async def run(self) -> None:
        """List and watch until cancelled; never returns otherwise."""
        async with asyncio.TaskGroup() as tasks:
            if self.resync:
                tasks.create_task(self._resync_loop(self.resync))
            await self._list_and_watch_forever()

    async def _list_and_watch_forever(self) -> None:
        failures = 0
        while True:
            try:
                await self._list_and_watch()
            except Exception as exc:
                if self._progressed:  # the last watch worked for a while: start the backoff afresh
                    failures, self._progressed = 0, False
                failures += 1
                if isinstance(exc, errors.Gone) and failures == 1:
                    log.info("%r: %s; listing again", self, exc.message)
                    continue
                delay = min(self.max_backoff, self.initial_backoff * 2 ** min(failures - 1, 30))
                delay *= random.uniform(0.8, 1.2)
                log.warning("%r: %s; listing again in %.1fs", self, _describe(exc), delay)
                await asyncio.sleep(delay)

    async def _list_and_watch(self) -> None:
        listing = await self.client.list(
            self.plural, self.namespace, label_selector=self.label_selector, field_selector=self.field_selector
        )
        self._replace(listing.get("items") or [])
        self._resource_version = str((listing.get("metadata") or {}).get("resourceVersion") or "")
        if not self._synced.is_set():
            log.debug("%r: synced at resourceVersion %s", self, self._resource_version)
        self._synced.set()
        while True:
            timeout = random.randint(self.watch_timeout, 2 * self.watch_timeout)
            stream = self.client.watch(
                self.plural,
                self.namespace,
                resource_version=self._resource_version,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                timeout_seconds=timeout,
                allow_bookmarks=True,
            )
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    self._progressed = True
                    if event.type != "BOOKMARK":
                        self._apply(event.type, event.object)
                    self._resource_version = event.resource_version or self._resource_version
            # The server ended the watch at its timeout: resume from where it stopped.

    async def _resync_loop(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            if self.has_synced:
                for obj in list(self._cache.values()):
                    self._emit(obj, obj)

    # Changing the cache

    def _apply(self, kind: str, obj: Object) -> None:
        key = object_key(obj)
        old = self._cache.get(key)
        if kind == "DELETED":
            self._remove(key)
            self._emit(obj, None)  # the object's final state, as the server sent it
        else:
            self._store(key, obj)
            self._emit(old, obj)

    def _replace(self, items: list[Object]) -> None:
        fresh = {object_key(obj): obj for obj in items}
        for key, gone in list(self._cache.items()):
            if key not in fresh:
                self._remove(key)
                self._emit(gone, None)
        for key, obj in fresh.items():
            old = self._cache.get(key)
            if old is not None and _resource_version(old) == _resource_version(obj):
                continue
            self._store(key, obj)
            self._emit(old, obj)

    def _store(self, key: Key, obj: Object) -> None:
        self._remove(key)
        self._cache[key] = obj
        for name in self._indexers:
            self._index_one(name, key, obj)

    def _remove(self, key: Key) -> None:
        old = self._cache.pop(key, None)
        if old is None:
            return
        for name, index in self._indices.items():
            for value in self._index_values(name, old):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _index_one(self, name: str, key: Key, obj: Object) -> None:
        index = self._indices[name]
        for value in self._index_values(name, obj):
            index.setdefault(value, set()).add(key)

    def _index_values(self, name: str, obj: Object) -> list[str]:
        try:
            return list(self._indexers[name](obj))
        except Exception:
            log.exception("%r: index %s failed on %s", self, name, object_key(obj))
            return []

    def _emit(self, old: Object | None, new: Object | None) -> None:
        for fn in self._handlers:
            self._call(fn, old, new)

    def _call(self, fn: Handler, old: Object | None, new: Object | None) -> None:
        try:
            fn(old, new)
        except Exception:
            log.exception("%r: handler %r failed on %s", self, fn, object_key(new or old or {}))


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
