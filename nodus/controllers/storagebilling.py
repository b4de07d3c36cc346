"""Storage billing: the bytes a Job keeps above the free inclusion, charged by the hour while it exists.

Keyed by Job; level-triggered. The rule (ADR 0023):

* A Job keeps the bytes of its committed outputs (``status.outputs``, each with its ``committedTime``).
  Billing starts when the first non-empty output is committed (``start``) and lasts while the Job
  exists, in hours counted from ``start``: hour ``n`` is ``[start + n h, start + (n + 1) h)``. Every
  other byte of a project (checkpoints, uploads, Volume revisions, a gone Job's outputs) is charged to
  the project by the API server's blob collector (ADR 0034), which leaves a Job's outputs to the Job
  while it exists and for more than an hour after, so that no hour is charged twice.
* Hour ``n`` is charged once it has ended (post-paid), for the bytes committed before its end above the
  free inclusion (its ``billedBytes``): ``billedBytes / 2^30 x rateUSDPerGiBMonth / 730``, rounded half-up
  to the micro-dollar (:func:`hourly_charge`). An hour that rounds to nothing is not posted.
* The hour in which the Job is deleted is charged whole: the hours up to ``deletionTimestamp`` rounded
  up, at least one. This controller puts the finalizer ``nodus.dev/storage-charges``
  (``labels.STORAGE_CHARGES``) on every Job with billed bytes, and lifts it once every hour up to the
  deletion is charged.
* Each hour is a ``Charge`` through the ledger door keyed ``storage:<job uid>:<n>``. Its amount depends
  only on the Job's outputs, the price and ``n``, so any reconcile (a retry, a second controller after a
  failover, the deletion) posts the same charge for the same hour, and the ledger makes it once. The
  ledger says the highest hour charged (``lastHour``); only later hours are posted, in order.
* A charge the project's available credit cannot pay is refused (402 ``InsufficientCredits``): nothing is
  charged, the hour stays owed, and the Job shows the condition ``StoragePaid=False`` with the amounts.
  The owed hours are charged in order once credit allows (a grant tries at once, else every minute).
  Nothing is deleted for it: a deleted Job keeps its finalizer, so its outputs too, until it is paid.
* The price (``rateUSDPerGiBMonth``, ``freeBytes``) is the API server's price book, served with the
  ledger's state by ``GET .../namespaces/{project}/ledger/storage/{job uid}``.

``status.storage.billedBytes`` (the bytes above the free inclusion now) and
``status.cost.bySegment.storageUSD`` (what the ledger says storage was charged, also counted in
``totalUSD``; the Job controller keeps it when it sums the attempts) are display copies written here.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from nodus.apimachinery import money, units
from nodus.apimachinery.money import text as usd
from nodus.apis.v1 import labels, objects
from nodus.client import Client, errors
from nodus.client.informers import Handler, Informer
from nodus.client.workqueue import WorkQueue
from nodus.controllers.jobs import conditions
from nodus.controllers.manager import Result

Object = dict[str, Any]
log = logging.getLogger("nodus.controllers.storagebilling")

API = "/apis/nodus.dev/v1"
SEGMENT = "Storage"
CONDITION: Final = "StoragePaid"
HOUR = timedelta(hours=1)
GIB = money.GIB
SECONDS_BILLED = Decimal(3600)  # an hour is billed as an hour, however long a test makes it
RETRY_SECONDS = 60.0
UNPAID_INDEX = "storage-unpaid"


# --- the arithmetic: pure --------------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """The storage price the ledger door serves: USD per GiB for ``hours_per_month`` hours, above
    ``free_bytes`` per Job."""

    rate_per_gib_month: Decimal
    free_bytes: int
    hours_per_month: int = 730

    @classmethod
    def of(cls, wire: Object) -> Price:
        return cls(
            Decimal(str(wire["rateUSDPerGiBMonth"])), int(wire["freeBytes"]), int(wire.get("hoursPerMonth") or 730)
        )


def billed_bytes(stored: int, free: int) -> int:
    """The bytes above the free inclusion."""
    return max(0, stored - free)


def hourly_charge(billed: int, price: Price) -> Decimal:
    """What one hour of ``billed`` bytes costs, rounded half-up to the micro-dollar (once)."""
    return money.storage_hour(billed, price.rate_per_gib_month, price.hours_per_month)


@dataclass(frozen=True)
class Commit:
    """Bytes the Job started keeping at ``time``."""

    time: datetime
    size: int


def commits(job: objects.Job) -> list[Commit]:
    """The Job's non-empty outputs with their commit times, oldest first. An output without
    ``committedTime`` (written before it existed) counts from the Job's ``completionTime``."""
    fallback = job.status.completion_time or job.metadata.creation_timestamp
    out = []
    for output in job.status.outputs or ():
        size = output.size or 0
        when = output.committed_time or fallback
        if size > 0 and when:
            out.append(Commit(units.parse_time(when), size))
    return sorted(out, key=lambda c: c.time)


def hour_bytes(kept: list[Commit], start: datetime, hour: timedelta, n: int) -> int:
    """The bytes kept at the end of hour ``n`` (committed before it ended)."""
    end = start + hour * (n + 1)
    return sum(c.size for c in kept if c.time < end)


def hours_due(start: datetime, now: datetime, hour: timedelta, deleted: datetime | None = None) -> int:
    """How many hours from ``start`` are owed: those that ended by ``now``; once deleted, every hour
    up to the deletion, the last rounded up (at least one)."""
    if deleted is not None:
        return max(1, math.ceil((deleted - start) / hour))
    return max(0, math.floor((now - start) / hour))


def hour_key(uid: str, n: int) -> str:
    return f"storage:{uid}:{n}"


# --- the controller ---------------------------------------------------------------------------------


def unpaid_in(obj: Object) -> list[str]:
    """Index of Jobs whose storage could not be charged, by project: a grant there tries them at once."""
    job = objects.read(objects.Job, obj)
    paid = next((c for c in job.status.conditions or () if c.type == CONDITION), None)
    if paid is None or paid.status != "False":
        return []
    return [job.metadata.namespace or ""]


def enqueue_unpaid(queue: WorkQueue[Any], jobs: Informer) -> Handler:
    """A Project changed (its credits, after a grant): its Jobs owing storage try again now."""

    def handler(old: Object | None, new: Object | None) -> None:
        if new is not None:
            project = str(new["metadata"]["name"])
            for job in jobs.by_index(UNPAID_INDEX, project):
                queue.add((project, str(job["metadata"]["name"])))

    return handler


@dataclass
class _Owed:
    """What a reconcile found: the state the ledger answered, and the hour it could not charge."""

    ledger: Object
    unpaid: tuple[int, Decimal, str] | None = None  # (hour, amount, the door's message)


class StorageBilling:
    """Charges one Job's storage (see the module docstring)."""

    def __init__(self, client: Client, jobs: Informer, hour: timedelta = HOUR) -> None:
        self._client = client
        self._jobs = jobs
        self._hour = hour
        self._retry = min(RETRY_SECONDS, hour.total_seconds())

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        namespace, name = key
        obj = self._jobs.get(namespace, name) if namespace is not None else None
        if obj is None or namespace is None:
            return None
        job = objects.read(objects.Job, obj)
        kept = commits(job)
        held = labels.STORAGE_CHARGES in job.metadata.finalizers
        deleted = units.time_or_none(job.metadata.deletion_timestamp)
        if not kept:
            if held and deleted is not None:
                await self._lift(job)  # nothing was ever kept: nothing is owed
            return None
        uid = job.metadata.uid
        ledger = await self._get(namespace, uid)
        price = Price.of(ledger["price"])
        billed_now = billed_bytes(sum(c.size for c in kept), price.free_bytes)
        if billed_now > 0 and not held and deleted is None:
            obj = await self._hold(job)  # from now on its deletion waits for the last hour's charge
            job = objects.read(objects.Job, obj)
        # A Job deleted without the finalizer (deleted before this controller saw its bytes, while another
        # finalizer keeps it a moment) is charged all the same while it is still there: best effort.
        owed = await self._charge(job, kept, price, ledger, deleted)
        if deleted is not None and owed.unpaid is None:
            if held:
                await self._lift(job)
            return None
        await self._show(obj, billed_now, owed)
        if owed.unpaid is not None:
            return Result(requeue_after=self._retry)
        if billed_now == 0:
            return None  # bytes only grow: a new output (an event) is what could make it billable
        start = kept[0].time
        now = units.now()
        next_end = start + self._hour * (hours_due(start, now, self._hour) + 1)
        return Result(requeue_after=(next_end - now).total_seconds() + min(1.0, self._hour.total_seconds() / 20))

    async def _charge(
        self, job: objects.Job, kept: list[Commit], price: Price, ledger: Object, deleted: datetime | None
    ) -> _Owed:
        """Post every owed hour after the last one charged, in order; stop at the first the project
        cannot pay."""
        namespace, uid = job.metadata.namespace or "", job.metadata.uid
        start = kept[0].time
        due = hours_due(start, units.now(), self._hour, deleted)
        last = ledger.get("lastHour")
        stale = False
        for n in range(int(last) + 1 if last is not None else 0, due):
            billed = billed_bytes(hour_bytes(kept, start, self._hour, n), price.free_bytes)
            amount = hourly_charge(billed, price)
            if amount <= 0:
                continue
            body = {
                "operation": "Charge",
                "key": hour_key(uid, n),
                "subject": uid,
                "segment": SEGMENT,
                "seconds": str(SECONDS_BILLED),
                "rateUSDPerHour": usd(amount),
                "amountUSD": usd(amount),
                "memo": f"job {job.metadata.name}: hour {n} of storage, {billed} bytes above the free inclusion",
            }
            try:
                ledger = await self._post(namespace, body)
            except errors.Conflict as exc:
                # The hour was charged already at another amount (the outputs or the price changed in between):
                # what was charged stands.
                log.info("job %s: storage hour %d charged before: %s", uid, n, exc.message)
                stale = True
            except errors.APIError as exc:
                if exc.reason != "InsufficientCredits":
                    raise
                log.info("job %s: storage hour %d (%s USD) unpaid: %s", uid, n, usd(amount), exc.message)
                return _Owed(ledger if not stale else await self._get(namespace, uid), (n, amount, exc.message))
        return _Owed(ledger if not stale else await self._get(namespace, uid))

    async def _show(self, job: Object, billed_now: int, owed: _Owed) -> None:
        """Write the display copies: ``storage.billedBytes``, ``cost.bySegment.storageUSD`` (and the total),
        and ``StoragePaid`` when an hour could not be charged (and once it is again). ``job`` is the Job as
        stored: its status is copied and edited as JSON, so that fields this version does not know are kept."""
        old = job.get("status") or {}
        status = copy.deepcopy(old)
        status["storage"] = {**(status.get("storage") or {}), "billedBytes": billed_now}
        charged = Decimal(str(owed.ledger.get("chargedUSD") or "0"))
        cost = status.setdefault("cost", {})
        segments = cost.setdefault("bySegment", {})
        before = Decimal(str(segments.get("storageUSD") or "0"))
        if charged > 0 or billed_now > 0 or "storageUSD" in segments:
            segments["storageUSD"] = usd(charged)
            cost["totalUSD"] = usd(Decimal(str(cost.get("totalUSD") or "0")) - before + charged)
        if not segments:
            cost.pop("bySegment")
        if not cost:
            status.pop("cost")
        elif billed_now > 0:
            cost["final"] = False  # more hours will be charged while the Job exists
        now = units.now()
        if owed.unpaid is not None:
            n, amount, why = owed.unpaid
            message = (
                f"Hour {n} of storage ({usd(amount)} USD) could not be charged: {why}. The Job's outputs are kept; "
                "the hours owed are charged as soon as the project's credit allows."
            )
            conditions.set(status, CONDITION, "False", "InsufficientCredits", message, now)
        elif (conditions.get(status, CONDITION) or {}).get("status") == "False":
            conditions.set(status, CONDITION, "True", "Paid", "Every hour of storage due is charged.", now)
        if status == old:
            return
        with contextlib.suppress(errors.NotFound):
            await self._client.update(
                "jobs", {**job, "status": status}, job["metadata"]["namespace"], subresource="status"
            )

    async def _hold(self, job: objects.Job) -> Object:
        meta = job.metadata
        finalizers = [*meta.finalizers, labels.STORAGE_CHARGES]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta.resource_version}}
        return await self._client.patch("jobs", meta.name, patch, meta.namespace)

    async def _lift(self, job: objects.Job) -> None:
        meta = job.metadata
        finalizers = [f for f in meta.finalizers if f != labels.STORAGE_CHARGES]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta.resource_version}}
        with contextlib.suppress(errors.NotFound):
            await self._client.patch("jobs", meta.name, patch, meta.namespace)

    async def _get(self, namespace: str, uid: str) -> Object:
        response = await self._client.request("GET", f"{API}/namespaces/{namespace}/ledger/storage/{uid}")
        return dict(response.json())

    async def _post(self, namespace: str, body: Object) -> Object:
        response = await self._client.request("POST", f"{API}/namespaces/{namespace}/ledger/postings", json=body)
        return dict(response.json())
