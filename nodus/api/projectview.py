"""Projects served from memory: each API server process's view of every Project, kept current by its watch cache.

Nearly every request reads a Project: authorisation (the caller's role in it), admission (a namespaced object's
project must exist and not be on its way out), a user's cluster-wide list (the projects naming them), and running
watches' re-checks. The view answers all of these from memory (ADR 0057).

**How it stays current.** It subscribes to the watch cache's Project events (holding them back), lists every
Project in one snapshot at resourceVersion R, applies the held events above R, and from then on applies each
Project event as the cache's pump reads it: synchronously, in resourceVersion order, with nothing in between. Its
state is therefore the database's Projects as of the cache's ``head``.

**What a reader sees** (the contract of :meth:`ProjectView.get` and :meth:`ProjectView.names_with_member`):

- *Writes through this process are read back.* Storage records the newest Project write this process committed
  (:meth:`~nodus.storage.objects.Storage.written_rv`) before the writer resumes; a read first waits until the
  cache has read up to it (the pump wakes on the commit's NOTIFY, within milliseconds). One that does not within
  ``catch_up`` seconds is answered by the database instead, as is every read until the cache gets there.
- *Writes by another API server process arrive through the watch*: eventually, as in a Kubernetes informer,
  usually within milliseconds (the NOTIFY) and at worst the pump's poll interval. A member removed through
  another server may act here for that long.
- *A miss is checked in the database* before it is an answer, so a Project another server created a moment ago
  is never a false NotFound (as kube-apiserver's namespace lifecycle admission looks a namespace up live when
  its informer does not know it).
- *The view never answers unless it saw every event*: until its first list, after the cache lost events (it read
  past the log's compaction point, :meth:`lost`; the view lists again in the background), and while the pump has
  not read the log to its end for ``stale_after`` seconds, the database answers every read.

Documents are shared, not copied: callers must not mutate what :meth:`ProjectView.get` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import Any

import orjson

from nodus.storage.errors import Key
from nodus.storage.listing import ListQuery
from nodus.storage.objects import Storage
from nodus.storage.watchcache import Event

log = logging.getLogger(__name__)

Object = dict[str, Any]
KIND = "Project"
# How long a read waits for the cache to reach this process's own Project write before asking the database.
CATCH_UP_SECONDS = 1.0
# A pump that has not read the log to its end for this long (it does every second) is failing: the database answers.
STALE_SECONDS = 5.0
_RESYNC_PAUSE = 1.0


class ProjectView:
    """Every Project, by name and by member name (see the module docstring). ``start()`` once storage is started.

    ``synced`` says whether the view answers from memory; ``lists`` counts the lists it synced from and
    ``database_reads`` the reads the database answered instead (misses included): figures for tests and metrics.
    """

    kind = KIND  # the watch cache feeds a subscriber the events of its kind
    index: tuple[str, str] | None = None  # every Project event

    def __init__(
        self, storage: Storage, catch_up: float = CATCH_UP_SECONDS, stale_after: float = STALE_SECONDS
    ) -> None:
        self._storage = storage
        self._cache = storage.watch_cache
        self._catch_up = catch_up
        self._stale_after = stale_after
        self._projects: dict[str, Object] = {}
        self._members: dict[str, set[str]] = {}  # a spec.members[].name -> the projects that name it
        self._rv = 0  # the newest event applied (or the list's version)
        self._held: list[Event] | None = None  # events that arrive while the view lists
        self._losses = 0  # lost() calls: a sync during which the cache lost events must list again
        self._late = 0  # a write of this process the cache did not reach in time: the database answers until it does
        self._resync: asyncio.Task[None] | None = None
        self._syncing = asyncio.Lock()  # one list at a time (start's and a resync's would share what is held)
        self.synced = False
        self.lists = 0
        self.database_reads = 0

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """List and subscribe; on failure the view lists again in the background (the database answers meanwhile)."""
        try:
            await self._sync()
        except Exception:
            log.exception("the Projects view could not list Projects; the database answers until it can")
            self._schedule_resync()

    async def stop(self) -> None:
        if self._resync is not None:
            self._resync.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resync
        self._cache.unsubscribe(self)
        self.synced = False

    async def _sync(self) -> None:
        """Subscribe first, then list: every event after the subscription is held, so none above the list's version
        (which is at least the head subscribed at) can be missed; those at or below it are in the list."""
        async with self._syncing:
            await self._list_and_subscribe()

    async def _list_and_subscribe(self) -> None:
        self.synced = False
        losses = self._losses
        self._held = []
        self._cache.unsubscribe(self)
        self._cache.subscribe(self, self._cache.head)  # always succeeds: the position is the head
        try:
            projects: dict[str, Object] = {}
            async with self._storage.open_list(ListQuery(KIND)) as cursor:
                async for batch in cursor.batches():
                    for _, name, body in batch:
                        projects[name] = orjson.loads(body)
                rv = cursor.resource_version
        except BaseException:
            self._cache.unsubscribe(self)
            self._held = None
            raise
        held, self._held = self._held, None
        if self._losses != losses:  # the cache lost events while the view listed: what it held is incomplete
            raise RuntimeError("the watch cache lost events while the Projects view listed")
        self._projects, self._members, self._rv = {}, {}, rv
        for name, project in projects.items():
            self._put(name, project)
        for event in held:
            self._apply(event)
        self.lists += 1
        self.synced = True

    def _schedule_resync(self) -> None:
        if self._resync is None or self._resync.done():
            self._resync = asyncio.get_running_loop().create_task(self._resync_until_synced(), name="nodus-projects")

    async def _resync_until_synced(self) -> None:
        while not self.synced:
            try:
                await self._sync()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the Projects view could not list Projects again; retrying")
                await asyncio.sleep(_RESYNC_PAUSE)

    # --- the watch cache's subscriber ----------------------------------------------------------

    def deliver(self, event: Event) -> bool:
        """Take one Project event, in the pump's loop (see ``Subscriber``)."""
        if self._held is not None:
            self._held.append(event)
            return True
        try:
            self._apply(event)
        except Exception:  # a view that skipped an event must not answer: list again
            log.exception("the Projects view could not apply event %d; listing again", event.rv)
            self.lost()
            return False
        return True

    def lost(self) -> None:
        """The cache lost events (or the view could not apply one): stop answering and list again."""
        self._losses += 1
        self.synced = False
        self._schedule_resync()

    def _apply(self, event: Event) -> None:
        if event.rv <= self._rv:  # already in the list the view started from
            return
        self._drop(event.name)
        if event.type != "DELETED":
            # Decoded for the view alone: the event's shared object is read by watchers, whose hands it stays in.
            self._put(event.name, orjson.loads(event.body))
        self._rv = event.rv

    def _put(self, name: str, project: Object) -> None:
        self._projects[name] = project
        for member in _member_names(project):
            self._members.setdefault(member, set()).add(name)

    def _drop(self, name: str) -> None:
        old = self._projects.pop(name, None)
        if old is None:
            return
        for member in _member_names(old):
            names = self._members.get(member)
            if names is not None:
                names.discard(name)
                if not names:
                    del self._members[member]

    # --- reads ---------------------------------------------------------------------------------

    async def get(self, name: str) -> Object | None:
        """The Project ``name`` (shared: do not mutate), or None when the database has none either."""
        if await self._current():
            found = self._projects.get(name)
            if found is not None:
                return found
        # Unknown here: maybe created by another server a moment ago. NotFound is the database's answer only.
        self.database_reads += 1
        return await self._storage.get(Key(KIND, "", name))

    async def names_with_member(self, members: Iterable[str]) -> frozenset[str]:
        """The Projects whose ``spec.members`` has an entry named one of ``members`` (whatever its role)."""
        if await self._current():
            found: set[str] = set()
            for member in members:
                found.update(self._members.get(member, ()))
            return frozenset(found)
        self.database_reads += 1
        names: set[str] = set()
        for member in members:
            # JSON containment, as the view's index: an entry that is an object whose name is this string.
            names.update(await self._storage.names_containing(KIND, {"spec": {"members": [{"name": member}]}}))
        return frozenset(names)

    async def _current(self) -> bool:
        """Whether the view may answer: synced, its pump alive, and up to this process's own Project writes."""
        if not self.synced or time.monotonic() - self._cache.read_at > self._stale_after:
            return False
        wanted = self._storage.written_rv(KIND)
        if self._cache.head >= wanted:
            return True
        if wanted <= self._late:  # a read already waited for this write in vain: do not wait again
            return False
        if not await self._cache.wait_for_head(wanted, self._catch_up):
            log.warning("the watch cache has not read this process's Project write %d; the database answers", wanted)
            self._late = max(self._late, wanted)
            return False
        return self.synced


def _member_names(project: Object) -> set[str]:
    """The names the database's JSON containment would match (``names_containing``): string names of member
    entries that are objects."""
    spec = project.get("spec")
    members = spec.get("members") if isinstance(spec, dict) else None
    if not isinstance(members, list):
        return set()
    return {m["name"] for m in members if isinstance(m, dict) and isinstance(m.get("name"), str)}
