"""Garbage collection: ownerReferences, propagation policies and project contents.

Level-triggered: every pass reads what is true now and converges, so a pass may be repeated or
interrupted at any point. Only one API server process collects at a time (leadership). When passes
run (ADR 0036):

- After a pass, the collector reads the watch cache from the version it noted *before* the pass, so a
  deletion committed while the pass ran (after it read the objects being deleted) wakes the next pass
  instead of waiting for a later one. Its own writes wake it too: the next pass finds nothing to do,
  writes nothing, and the stream goes quiet.
- A pass also runs at most ``resync`` seconds after the last one ended, on a timer that events do not
  reset: unrelated writes (Lease renewals, heartbeats every few seconds) never postpone it. That pass
  catches what no event announces (an object created naming an owner already gone).

What a pass does:

- Background: an object whose owners are all gone is deleted; references to owners that are gone
  are removed from an object that still has a live owner.
- Foreground: an owner marked with the ``foregroundDeletion`` finalizer has its dependents deleted;
  the finalizer is lifted (and the owner removed) once no dependent with ``blockOwnerDeletion``
  remains.
- Orphan: an owner with the ``orphan`` finalizer has its references removed from its dependents,
  then the finalizer lifted.
- Project: a project being deleted has everything it holds deleted, then its blobs (every one: a
  project created later under the same name must not read them by digest), then its credit closed
  (nor may that project spend it, ADR 0037), then its ``nodus.dev/project-contents`` finalizer lifted.

Every change goes through the generic store, as a write by ``system:nodus-garbage-collector``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nodus.api.auth.principal import ADMIN_GROUP, Principal
from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.api.store import FOREGROUND, ORPHAN, GenericStore
from nodus.apis.v1 import labels
from nodus.storage.errors import Expired
from nodus.storage.leadership import Leadership
from nodus.storage.watchcache import Event

log = logging.getLogger(__name__)

COLLECTOR = Principal(user="system:nodus-garbage-collector", groups=(ADMIN_GROUP,))
Object = dict[str, Any]


def _announces_work(event: Event) -> bool:
    """A write the collector may have to act on: an object gone (its dependents may be orphans now), or one
    marked for deletion (finalizers to honour, a project to empty)."""
    return event.type == "DELETED" or (event.type == "MODIFIED" and b'"deletionTimestamp"' in event.body)


class GarbageCollector:
    def __init__(
        self,
        stores: dict[str, GenericStore],
        resync: float = 5.0,
        purge_blobs: Callable[[str], Awaitable[int]] | None = None,
        close_credit: Callable[[str, str], Awaitable[None]] | None = None,
    ) -> None:
        """``purge_blobs(project)`` deletes a deleted project's blobs (None: the server stores none);
        ``close_credit(project, uid)`` closes its credit in the ledger (ADR 0037)."""
        self._stores = {store.info.kind: store for store in stores.values()}
        self._purge_blobs = purge_blobs
        self._close_credit = close_credit
        any_store = next(iter(stores.values()))
        self._storage = any_store.storage
        self._resync = resync
        self._leadership = Leadership(self._storage.url, "nodus-garbage-collector")
        self._task: asyncio.Task[None] | None = None
        self.passes = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="nodus-garbage-collector")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._leadership.release()

    def _context(self) -> RequestContext:
        return RequestContext(
            principal=COLLECTOR, request_id="garbage-collector", field_manager="nodus-garbage-collector"
        )

    async def _run(self) -> None:
        cache = self._storage.watch_cache
        while True:
            try:
                if not await self._leadership.try_acquire():
                    await asyncio.sleep(self._resync)
                    continue
                # Noted before the pass reads anything: every write the pass may not have seen is above it.
                seen = cache.head
                await self.collect()
                await self._wait_for_work(seen)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("garbage collection pass failed; retrying")
                await self._leadership.release()
                await asyncio.sleep(1.0)

    async def _wait_for_work(self, after: int) -> None:
        """Return when a deletion was committed after resourceVersion ``after``, or ``resync`` seconds from now,
        whichever comes first; however many other writes stream meanwhile."""
        cache = self._storage.watch_cache
        with contextlib.suppress(TimeoutError, Expired):  # Expired: ``after`` was compacted away; pass again
            async with asyncio.timeout(self._resync):
                # A stream holds nothing but its cursor: leaving it unfinished releases nothing.
                async for event in cache.stream(after, self._resync):
                    if event is not None and _announces_work(event):
                        await asyncio.sleep(0.02)  # let a burst of deletions land, then converge once
                        return

    async def collect(self) -> None:
        """One pass over everything that needs collecting."""
        for obj in await self._storage.being_deleted(list(self._stores)):
            await self._finalize(obj)
        for obj, missing in await self._storage.orphans():
            await self._orphaned(obj, set(missing))
        self.passes += 1

    def _store(self, obj: Object) -> GenericStore | None:
        return self._stores.get(obj.get("kind", ""))

    async def _finalize(self, obj: Object) -> None:
        metadata = obj["metadata"]
        finalizers = list(metadata.get("finalizers") or [])
        uid = metadata["uid"]
        if ORPHAN in finalizers:
            for dependent in await self._storage.dependents(uid):
                await self._drop_owner(dependent, {uid})
            await self._lift(obj, ORPHAN)
        if FOREGROUND in finalizers:
            blocking = 0
            for dependent in await self._storage.dependents(uid):
                refs = dependent["metadata"].get("ownerReferences") or []
                if any(ref.get("uid") == uid and ref.get("blockOwnerDeletion") for ref in refs):
                    blocking += 1
                if not dependent["metadata"].get("deletionTimestamp"):
                    await self._delete(dependent, "Foreground")
            if blocking == 0:
                await self._lift(obj, FOREGROUND)
        if labels.PROJECT_CONTENTS in finalizers and obj.get("kind") == "Project":
            kinds = [kind for kind, store in self._stores.items() if store.info.namespaced]
            contents = await self._storage.namespaced_in(metadata["name"], kinds)
            for item in contents:
                if not item["metadata"].get("deletionTimestamp"):
                    await self._delete(item, "Background")
            if not contents:
                if self._purge_blobs is not None:
                    purged = await self._purge_blobs(metadata["name"])
                    if purged:
                        log.info("project %s: deleted its %d blobs", metadata["name"], purged)
                if self._close_credit is not None:
                    await self._close_credit(metadata["name"], metadata["uid"])
                await self._lift(obj, labels.PROJECT_CONTENTS)

    async def _orphaned(self, obj: Object, missing: set[str]) -> None:
        refs = obj["metadata"].get("ownerReferences") or []
        if all(ref.get("uid") in missing for ref in refs):
            if not obj["metadata"].get("deletionTimestamp"):
                await self._delete(obj, "Background")
        else:
            await self._drop_owner(obj, missing)

    async def _delete(self, obj: Object, policy: str) -> None:
        store = self._store(obj)
        if store is None:
            return
        metadata = obj["metadata"]
        with contextlib.suppress(APIError):
            await store.delete(
                metadata.get("namespace"),
                metadata["name"],
                {"propagationPolicy": policy, "preconditions": {"uid": metadata["uid"]}},
                self._context(),
            )

    async def _drop_owner(self, obj: Object, uids: set[str]) -> None:
        store = self._store(obj)
        if store is None:
            return

        def without_refs(current: Object) -> Object:
            refs = [r for r in current["metadata"].get("ownerReferences") or [] if r.get("uid") not in uids]
            if refs:
                current["metadata"]["ownerReferences"] = refs
            else:
                current["metadata"].pop("ownerReferences", None)
            return current

        metadata = obj["metadata"]
        with contextlib.suppress(APIError):
            await store.patch(metadata.get("namespace"), metadata["name"], without_refs, self._context())

    async def _lift(self, obj: Object, finalizer: str) -> None:
        store = self._store(obj)
        if store is None:
            return

        def without_finalizer(current: Object) -> Object:
            current["metadata"]["finalizers"] = [
                f for f in current["metadata"].get("finalizers") or [] if f != finalizer
            ]
            return current

        metadata = obj["metadata"]
        with contextlib.suppress(APIError):
            await store.patch(metadata.get("namespace"), metadata["name"], without_finalizer, self._context())
