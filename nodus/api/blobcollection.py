"""The blob collector: references stamped, a project's storage charged, unreferenced blobs deleted (ADR 0034).

It runs in the API server, beside the garbage collector (ADR 0005), under a leadership of its own
(``nodus-blob-collector``): one API server process at a time passes, every ``interval``. It needs what
only the API server has: the ``blobs`` rows and the object store (controllers are API clients), and the
ledger, into which it posts a project's storage hours itself. Level-triggered: each pass reads what is
true now and converges, and every step may be repeated or interrupted (a second collector, a crash)
without losing a referenced blob or charging an hour twice. Per project, in this order:

1. **References** (``nodus.storage.blobcollection.references``): every digest its Jobs, Attempts and
   Volumes name, and the chunks of the checkpoint manifests among them. ``referenced_at`` of those rows
   is refreshed (at most every tenth of the grace period); ``attributed_until`` of its Jobs' committed
   outputs is kept more than an hour and a pass ahead (``nodus.billing.storage``).
2. **Billing** (``nodus.billing.storage``): every hour of the project that ended is sampled, before step
   3 can delete anything in the hour after it, and every sampled hour not yet charged is charged, in
   order, until one cannot be paid. ``status.storage`` of the Project and ``status.credits`` (after a
   charge) are display copies written here.
3. **Collection**: rows nothing has referenced for longer than the grace period are deleted one at a
   time under the per-digest lock (``blobcollection.collect``), each only while the project's current
   hour has not ended (else the next pass samples it first). If a referenced manifest cannot be read,
   nothing of that project is collected in this pass: what it names is unknown.

Then, every half grace period, objects no row names are swept once older than the grace period.

Why nothing referenced is lost, and what the grace period covers:

* An upload in flight has no row until it registers, and its object is young: the sweep takes only
  objects older than the grace period. Bytes uploaded again (the same digest) refresh the existing row
  under the digest lock, so a collection either happened before (the upload then registers anew) or
  finds the row fresh.
* A blob uploaded and then named by a Job: it is younger than the grace period until the Job names it;
  once the Job exists, every pass finds it. An Attempt pinning a blob of another object (an output of
  a Job being deleted, a Volume revision) gets a grace period from the last pass that saw that object.
* Checkpoint chunks are uploaded before their manifest: new chunks are young; chunks the agent skips
  because the project had them are refreshed when the manifest is uploaded (``nodus.api.http.blobs``),
  which refuses a manifest naming a chunk that is gone, so a committed manifest never names a missing one.
* Left open: a Job created at the very moment a blob it names is collected, a blob unreferenced for the
  whole grace period. The Job then fails as it would have a moment later, naming a blob no longer there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from nodus.api import credits
from nodus.api.auth.principal import ADMIN_GROUP, Principal
from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.api.store import GenericStore
from nodus.apimachinery import units
from nodus.billing import money
from nodus.billing import storage as charging
from nodus.storage import blobcollection, blobs, storagehours
from nodus.storage import ledger as tables
from nodus.storage.errors import Key, StorageError
from nodus.storage.leadership import Leadership
from nodus.storage.objects import Storage
from nodus.storage.objectstore import ObjectStore

log = logging.getLogger(__name__)

COLLECTOR = Principal(user="system:nodus-blob-collector", groups=(ADMIN_GROUP,))
CACHED_CHUNKS = 500_000
"""Chunk digests of manifests kept between passes (about 60 MB); a manifest is read again once evicted."""
Object = dict[str, Any]


@dataclass(frozen=True)
class CollectionSettings:
    """``grace``: how long a blob nothing references is kept; ``interval``: between passes; ``hour``: a
    billed hour of storage (``--storage-charge-interval``); ``quota``: the per-project quota, shown."""

    grace: timedelta
    interval: timedelta
    hour: timedelta
    quota: int | None
    price: charging.Price

    @property
    def freshness(self) -> timedelta:
        """How stale ``referenced_at`` may be before a pass (or an upload) writes it again."""
        return self.grace / 10


@dataclass
class PassReport:
    """What one pass did (for logs and tests)."""

    collected: int = 0
    objects_deleted: int = 0
    swept: int = 0
    hours_charged: int = 0


class BlobCollector:
    """Passes over every project that stores blobs or owes storage (see the module docstring)."""

    def __init__(self, storage: Storage, store: ObjectStore, projects: GenericStore, settings: CollectionSettings):
        self._storage = storage
        self._store = store
        self._projects = projects
        self.settings = settings
        self._leadership = Leadership(storage.url, "nodus-blob-collector")
        self._task: asyncio.Task[None] | None = None
        self._manifests: OrderedDict[str, frozenset[str] | None] = OrderedDict()
        self._cached = 0
        self._swept_at = float("-inf")
        self.passes = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="nodus-blob-collector")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._leadership.release()

    async def _run(self) -> None:
        while True:
            try:
                if await self._leadership.try_acquire():
                    report = await self.collect()
                    if report.collected or report.swept or report.hours_charged:
                        log.info("blob collection: %s", report)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("blob collection pass failed; retrying")
                await self._leadership.release()
            await asyncio.sleep(self.settings.interval.total_seconds())

    async def collect(self) -> PassReport:
        """One pass over every project that stores blobs, owes storage hours, or shows either."""
        report = PassReport()
        now = await storagehours.now(self._storage)
        names = set(await blobcollection.namespaces(self._storage))
        names |= {namespace for namespace, _ in await storagehours.owing(self._storage)}
        names |= set(await storagehours.displaying(self._storage))
        for namespace in sorted(names):
            try:
                await self._project(namespace, now, report)
            except Exception:  # one project's trouble (its manifest, its status) must not stop the others
                log.exception("blob collection of project %s failed; next pass", namespace)
        if time.monotonic() - self._swept_at >= self.settings.grace.total_seconds() / 2:
            self._swept_at = time.monotonic()
            report.swept = await blobcollection.sweep(
                self._storage, self._store, datetime.now(UTC) - self.settings.grace
            )
        self.passes += 1
        return report

    async def _project(self, namespace: str, now: datetime, report: PassReport) -> None:
        references = await blobcollection.references(self._storage, namespace)
        named, complete = await self._with_chunks(namespace, references.digests)
        await blobs.refresh(self._storage, namespace, named, self.settings.freshness)
        ahead = self.settings.hour + self.settings.interval
        await blobcollection.attribute(self._storage, namespace, references.outputs, now + 2 * ahead, now + ahead)
        project = await self._storage.get(Key("Project", "", namespace))
        boundary = await self._bill(namespace, project, now, report) if project is not None else None
        if not complete:
            return
        while candidates := await blobcollection.candidates(self._storage, namespace, self.settings.grace):
            collected = 0
            for digest in candidates:
                deleted = await blobcollection.collect(
                    self._storage, self._store, namespace, digest, self.settings.grace, boundary
                )
                if deleted is not None:
                    collected += 1
                    report.objects_deleted += deleted.object_deleted
            report.collected += collected
            if not collected:
                return  # the hour ended (sampled next pass first), or each was named again meanwhile

    async def _with_chunks(self, namespace: str, digests: frozenset[str]) -> tuple[set[str], bool]:
        """``digests`` and the chunks of the checkpoint manifests among them; False when a manifest could
        not be read (what it names is then unknown)."""
        named, complete = set(digests), True
        for info in await blobcollection.manifests(self._storage, namespace, digests):
            chunks = self._manifests.get(info.digest)
            if info.digest in self._manifests:
                self._manifests.move_to_end(info.digest)
            else:
                try:
                    chunks = await blobcollection.read_manifest(self._store, info)
                except (StorageError, OSError):
                    log.warning("project %s: checkpoint manifest %s cannot be read", namespace, info.digest)
                    complete = False
                    continue
                self._keep(info.digest, chunks)
            named |= chunks or frozenset()
        return named, complete

    def _keep(self, digest: str, chunks: frozenset[str] | None) -> None:
        """Cache what a manifest names (it never changes), within :data:`CACHED_CHUNKS` digests in all."""
        self._manifests[digest] = chunks
        self._cached += len(chunks or ())
        while self._cached > CACHED_CHUNKS and len(self._manifests) > 1:
            _, evicted = self._manifests.popitem(last=False)
            self._cached -= len(evicted or ())

    async def _bill(self, namespace: str, project: Object, now: datetime, report: PassReport) -> datetime:
        """Sample and charge the project's ended hours and show them; returns when its current hour ends."""
        uid = str(project["metadata"]["uid"])
        clock = charging.Clock(units.parse_time(str(project["metadata"]["creationTimestamp"])), self.settings.hour)
        await charging.sample(self._storage, namespace, uid, clock, self.settings.price, now)
        charged, unpaid = await charging.charge_owed(self._storage, namespace, uid)
        report.hours_charged += charged
        if unpaid is not None:
            log.info(
                "project %s: storage hour %d (%s USD) unpaid: %s USD available",
                namespace,
                unpaid.hour.hour,
                money.text(unpaid.hour.amount),
                money.text(unpaid.available),
            )
        await self._show(namespace, project, uid, now, charged > 0)
        return clock.end(clock.ended(now))

    async def _show(self, namespace: str, project: Object, uid: str, now: datetime, moved: bool) -> None:
        """Write the Project's ``status.storage`` (and ``status.credits`` after a charge) when it changed."""
        [billed] = await storagehours.unattributed_bytes(self._storage, namespace, [now])
        owed = await storagehours.owed(self._storage, uid)
        shown: dict[str, Any] = {
            "bytes": await blobs.usage(self._storage, namespace),
            "billedBytes": billed,
            "chargedUSD": money.text((await tables.numbered_charges(self._storage, uid, charging.SEGMENT)).amount),
        }
        if self.settings.quota is not None:
            shown["quotaBytes"] = self.settings.quota
        if owed > Decimal(0):
            shown["owedUSD"] = money.text(owed)
        ctx = RequestContext(principal=COLLECTOR, request_id="blob-collector", field_manager="nodus-blob-collector")
        with contextlib.suppress(APIError):  # the project went away: nothing to show
            if (project.get("status") or {}).get("storage") != shown:

                def update(current: Object) -> Object:
                    if current["metadata"]["uid"] == uid:
                        current["status"] = {**(current.get("status") or {}), "storage": shown}
                    return current

                await self._projects.patch(None, namespace, update, ctx, subresource="status")
            if moved:
                await credits.show(self._projects, self._storage, namespace, ctx)
