"""A project's storage: the bytes no Job bills, charged by the hour through the ledger (ADR 0034).

A Job is charged for its committed outputs while it exists (ADR 0023, the storage billing controller).
Every other byte a project keeps is charged here, to the project: uploaded blobs, Volume revisions,
checkpoints, and the outputs of Jobs that are gone, until the collector deletes them. The rule:

* A project's hours are counted from its ``creationTimestamp`` (``origin``): hour ``n`` is
  ``[origin + n h, origin + (n + 1) h)`` (``h`` is an hour; ``--storage-charge-interval`` shortens it
  for tests, and it is billed as 3600 s all the same).
* Hour ``n`` is charged once it has ended (post-paid), for the bytes kept at its end that no Job bills:
  the project's blobs (each digest once, however many times it was uploaded) created before the end
  whose ``attributed_until`` is not after it (:mod:`nodus.storage.storagehours`). No free inclusion: the
  price book has one per Job only. The price is the price book's ``storage`` rate, as for Jobs
  (``money.storage_hour``).
* Each ended hour is sampled once, at the first collection pass after it ended and before that pass
  deletes anything (:func:`sample`); the amount is written with the sample, so every later try of the
  hour posts the same amount under the same key, ``storage:<project uid>:<n>``, and the ledger makes it
  once. An hour that rounds to nothing is sampled and never posted.
* A charge is post-paid, without a hold, never below zero available credit (``ledger.charge``). An hour
  the project cannot pay stays owed (:func:`charge_owed` stops at it, in order) and is tried again at
  every pass; the project's status shows what is owed. Unlike a deleted Job's outputs, bytes are not kept
  for want of credit: collection goes on, and the hours already sampled stay owed.

``attributed_until``: a Job bills its committed outputs hour by hour from its own first commit, and
the hour of its deletion whole, so after a Job is gone its bytes are still billed to it until at most an
hour after the last collection pass that saw it. The collector keeps ``attributed_until`` of a Job's
outputs at least an hour and a pass interval ahead of every pass that sees the Job, so no instant is
billed both to a Job and to its project; the price is up to two hours in which a gone Job's outputs
are billed to neither.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from nodus.apimachinery import money
from nodus.billing import ledger
from nodus.storage import storagehours
from nodus.storage.ledger import Charge, KeyReused, Overdrawn
from nodus.storage.objects import Storage
from nodus.storage.storagehours import Hour

log = logging.getLogger(__name__)

SEGMENT = "Storage"
KEY_PREFIX = "storage"
SECONDS_BILLED = Decimal(3600)
MAX_HOURS_PER_PASS = 10_000
"""Hours sampled at most in one pass: a server down for longer catches up over several passes."""


def hour_key(project_uid: str, n: int) -> str:
    """The ledger key of the project's hour ``n``: the door's shape for post-paid storage."""
    return f"{KEY_PREFIX}:{project_uid}:{n}"


@dataclass(frozen=True)
class Price:
    """USD per GiB for ``hours_per_month`` hours (the price book's ``storage`` rate)."""

    rate_per_gib_month: Decimal
    hours_per_month: int

    def hour(self, billed_bytes: int) -> Decimal:
        return money.storage_hour(billed_bytes, self.rate_per_gib_month, self.hours_per_month)


@dataclass(frozen=True)
class Clock:
    """A project's storage hours: ``hour`` long, counted from ``origin`` (its creation)."""

    origin: datetime
    hour: timedelta

    def ended(self, now: datetime) -> int:
        """How many hours have ended by ``now``."""
        return max(0, math.floor((now - self.origin) / self.hour))

    def end(self, n: int) -> datetime:
        return self.origin + self.hour * (n + 1)

    def of(self, when: datetime) -> int:
        """The hour ``when`` falls in (0 for anything before the origin)."""
        return max(0, math.floor((when - self.origin) / self.hour))


async def sample(storage: Storage, namespace: str, project_uid: str, clock: Clock, price: Price, now: datetime) -> None:
    """Sample every hour of the project that has ended by ``now`` and is not sampled yet: from the one after
    the last sample, or the one its oldest blob was created in if later, at most :data:`MAX_HOURS_PER_PASS`."""
    due = clock.ended(now)
    oldest = await storagehours.first_created(storage, namespace)
    if oldest is None:
        return  # nothing stored: every hour until a blob arrives is nothing
    last = await storagehours.last_hour(storage, project_uid)
    # After a time without blobs, the hours before the oldest one held nothing: the project was passed over
    # only while it stored nothing (a row is deleted only in an hour already sampled).
    start = max(last + 1 if last is not None else 0, clock.of(oldest))
    hours = list(range(start, min(due, start + MAX_HOURS_PER_PASS)))
    kept = await storagehours.unattributed_bytes(storage, namespace, [clock.end(n) for n in hours])
    await storagehours.record(
        storage, namespace, project_uid, [Hour(n, b, price.hour(b)) for n, b in zip(hours, kept, strict=True)]
    )
    await storagehours.prune(storage, project_uid)


@dataclass(frozen=True)
class Unpaid:
    """The first hour the project's available credit could not pay, and the ledger's figures."""

    hour: Hour
    available: Decimal


async def charge_owed(storage: Storage, namespace: str, project_uid: str) -> tuple[int, Unpaid | None]:
    """Charge the project's sampled hours that are not charged yet, oldest first, until one cannot be paid;
    returns how many were charged (replays included) and the one that could not be."""
    charged = 0
    for hour in await storagehours.unpaid(storage, project_uid):
        charge = Charge(SEGMENT, SECONDS_BILLED, hour.amount, hour.amount)
        memo = f"project {namespace}: hour {hour.hour} of storage, {hour.bytes} bytes no Job bills"
        try:
            await ledger.charge(storage, namespace, project_uid, charge, hour_key(project_uid, hour.hour), memo)
        except Overdrawn as exc:
            return charged, Unpaid(hour, exc.balance)
        except KeyReused:
            # Charged before at another amount (a sample lost and taken again): what was charged stands.
            log.warning("project %s: storage hour %d was charged before at another amount", namespace, hour.hour)
        await storagehours.mark_charged(storage, project_uid, hour.hour)
        charged += 1
    return charged, None
