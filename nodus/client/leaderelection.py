"""Leader election on a cluster-scoped Lease, after client-go's ``leaderelection``.

One candidate at a time runs ``lead()``. The lease (``leases/<name>``) records
``spec.holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``, ``renewTime`` and
``leaseTransitions``; every write carries the resourceVersion that was read, so of two candidates
writing at once exactly one succeeds (the other gets 409 Conflict).

- **Acquire**: create the lease (AlreadyExists: read it), or update it when it is free (holder
  empty, i.e. released), already ours, or expired.
- **Expired** is judged on the candidate's own monotonic clock, never by comparing wall clocks:
  a lease is expired when its record (holder, renewTime, ...) has not changed for
  ``leaseDurationSeconds`` since this candidate first observed it. ``renewTime`` is informational.
- **Renew** every ``retry_period``. Each renewal must succeed within ``renew_deadline`` of the
  start of the last successful one; when it does not (server unreachable, lease taken), the leader
  cancels ``lead()`` and waits for it to finish before trying to acquire again.

Why two leaders never overlap: a standby can take over only after the record has been unchanged
for ``lease_duration`` *on its clock, counted from when it saw the last renewal*, which is after
the leader sent it. The leader stops by ``renew_deadline`` after sending its last successful
renewal. With ``renew_deadline < lease_duration`` the leader has stopped first, provided the two
clocks run at roughly the same rate (bounded drift over one lease duration; wall-clock skew
between hosts does not matter) and ``lead()`` finishes cancelling within the margin
``lease_duration - renew_deadline`` (5 s by default). Keep ``lead()``'s cleanup short.

On a clean shutdown (``run`` cancelled, or ``lead()`` returned) the leader releases the lease:
it writes an empty holder and ``leaseDurationSeconds: 1``, so a standby takes over at its next
poll rather than a full lease duration later.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from nodus.client import Client, errors

PLURAL = "leases"
log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(lease: dict[str, Any]) -> tuple[Any, ...]:
    spec = lease.get("spec") or {}
    return tuple(
        spec.get(field)
        for field in ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions")
    )


class LeaderElector:
    """Runs ``lead()`` only while holding the lease ``lease_name`` as ``identity`` (unique per process)."""

    def __init__(
        self,
        client: Client,
        lease_name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        if not identity:
            raise ValueError("identity must not be empty")
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        self.client = client
        self.lease_name = lease_name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._leading = False
        # Called when the lease is lost (not on shutdown): what the leader owned now belongs to the next one.
        self._on_lost = on_lost
        self._renewed_at = 0.0  # loop time at which the last successful acquire/renew was sent
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._log = log.getChild(lease_name)

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def holder(self) -> str:
        """The holder in the lease as last observed ("" when free or unknown)."""
        return str(self._observed[0] or "") if self._observed else ""

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Acquire, run ``lead()`` while leading, cancel it on loss, and try again; until cancelled.

        Returns when ``lead()`` returns (after releasing the lease); re-raises what ``lead()`` raises.
        """
        try:
            while True:
                await self._acquire()
                self._leading = True
                self._log.info("%s became the leader", self.identity)
                if await self._lead(lead):
                    return
                self._leading = False
                self._log.warning("%s lost the lease; standing by", self.identity)
                if self._on_lost is not None:
                    self._on_lost()
        finally:
            if self._leading:
                self._leading = False
                await self._release()

    async def _acquire(self) -> None:
        while True:
            started = asyncio.get_running_loop().time()
            try:
                # Bounded like a renewal: a lease won by a slow request would be lost again at once.
                async with asyncio.timeout(self.renew_deadline):
                    acquired = await self._try_acquire_or_renew()
                if acquired:
                    self._renewed_at = started
                    return
            except (errors.Conflict, errors.AlreadyExists) as exc:  # another candidate wrote first
                self._log.info("%s could not acquire the lease: %s", self.identity, exc)
            except Exception as exc:  # the server is unreachable, the kind is not served yet, ...
                self._log.warning("%s could not acquire the lease: %r", self.identity, exc)
            await asyncio.sleep(self.retry_period * random.uniform(1.0, 1.2))

    async def _lead(self, lead: Callable[[], Awaitable[None]]) -> bool:
        """Run ``lead()`` while renewing; True when ``lead()`` returned, False when the lease was lost."""
        leading = asyncio.ensure_future(lead())
        renewing = asyncio.ensure_future(self._renew_until_lost())
        lost = False
        try:
            done, _ = await asyncio.wait({leading, renewing}, return_when=asyncio.FIRST_COMPLETED)
            lost = leading not in done
        finally:
            # Stop leading first and wait until lead() has finished: on loss, and on our own cancellation.
            renewing.cancel()
            leading.cancel()
            await asyncio.wait({leading, renewing})
        if lost:
            if not leading.cancelled() and leading.exception() is not None:
                self._log.error("lead() failed while being stopped", exc_info=leading.exception())
            return False
        leading.result()  # re-raise what lead() raised
        return True

    async def _renew_until_lost(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.retry_period)
            deadline = self._renewed_at + self.renew_deadline
            while True:
                started = loop.time()
                if started >= deadline:
                    self._log.warning("%s could not renew the lease within %.1fs", self.identity, self.renew_deadline)
                    return
                try:
                    async with asyncio.timeout_at(deadline):
                        renewed = await self._try_acquire_or_renew()
                except TimeoutError:
                    continue
                except Exception as exc:
                    self._log.info("%s failed to renew the lease: %s", self.identity, exc)
                else:
                    if renewed:
                        self._renewed_at = started
                        break
                    self._log.warning("%s: the lease is held by %s", self.identity, self.holder)
                    return
                await asyncio.sleep(min(self.retry_period / 2, max(0.0, deadline - loop.time())))

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt: True when the lease is now ours (created, taken over or renewed)."""
        now = _now()
        duration = math.ceil(self.lease_duration)
        try:
            lease = await self.client.get(PLURAL, self.lease_name)
        except errors.NotFound:
            body = {
                "apiVersion": "nodus.dev/v1",
                "kind": "Lease",
                "metadata": {"name": self.lease_name},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": duration,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            }
            try:
                self._observe(await self.client.create(PLURAL, body))
                return True
            except errors.AlreadyExists:  # another candidate created it first: read what it wrote
                lease = await self.client.get(PLURAL, self.lease_name)
        self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if holder and holder != self.identity and not self._expired(spec):
            return False
        updated = copy.deepcopy(lease)  # keeps metadata.resourceVersion: the write's precondition
        new_spec = updated.setdefault("spec", {})
        if holder != self.identity:
            new_spec["acquireTime"] = now
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        new_spec.update(holderIdentity=self.identity, leaseDurationSeconds=duration, renewTime=now)
        self._observe(await self.client.update(PLURAL, updated))
        return True

    def _observe(self, lease: dict[str, Any]) -> None:
        record = _record(lease)
        if record != self._observed:
            self._observed = record
            self._observed_at = asyncio.get_running_loop().time()

    def _expired(self, spec: dict[str, Any]) -> bool:
        duration = spec.get("leaseDurationSeconds")
        duration = duration if isinstance(duration, int | float) and duration > 0 else self.lease_duration
        return asyncio.get_running_loop().time() >= self._observed_at + duration

    async def _release(self) -> None:
        """Give the lease up if it is still ours; errors are logged (the lease then simply expires)."""
        try:
            async with asyncio.timeout(self.renew_deadline):
                lease = await self.client.get(PLURAL, self.lease_name)
                spec = lease.get("spec") or {}
                if spec.get("holderIdentity") != self.identity:
                    return
                released = copy.deepcopy(lease)
                released["spec"].update(holderIdentity="", leaseDurationSeconds=1, renewTime=_now())
                self._observe(await self.client.update(PLURAL, released))
            self._log.info("%s released the lease", self.identity)
        except Exception as exc:
            self._log.warning("%s could not release the lease: %s", self.identity, exc)
