"""Billing of attempts: a hold when capacity is ordered, charges as it bills, the release at the end.

Keyed by Attempt; level-triggered: every reconcile reads what the Attempt says (its times, its frozen
rate) and what the ledger says (the hold, what was charged per segment, through the API's ledger
door, ``nodus/api/http/billing.py``) and posts only the difference, under keys derived from the
attempt and the amounts, so a retry, a crash or a second reconcile never charges twice.

The rules, per attempt (one allocation of capacity):

* Billing starts when capacity is assigned (``status.provisioningTime``, written by the provisioner;
  an attempt that waited for its hold was not billing meanwhile) at the rate frozen at placement
  (``status.placement.rateUSDPerHour``), and ends at its ``finishTime``. An attempt that never got
  capacity is never charged.
* Segments: ``Boot`` from the start of billing to ``startTime`` (``Restore`` instead when the attempt
  restores a checkpoint or replaces one that lost its capacity), ``Running`` from ``startTime`` to ``finishTime``, and
  ``Teardown``: the rounding of the whole billed time up to the billing increment (60 s), charged
  once at the end. Each segment is charged ``rate x seconds / 3600`` rounded half-up to the
  micro-dollar (:func:`nodus.apimachinery.money.charge`, the ledger's own rule).
* Time lost to a fault of Nodus (an attempt ``Lost`` with ``BootFailed``, ``CapacityBusy`` or ``NodeLost``) is covered:
  posted as ``Cover``, never taken from the project, listed in ``coveredByNodus``; a segment charged
  before the fault was known (a ``Boot`` closed at the start) is refunded. A preempted attempt is
  charged to its stop.
* The hold: the rate for ``FUNDED_WINDOW`` plus the minimum charge (one increment), placed when the
  attempt is bound and extended by the same amount whenever less than half a window is left. An
  attempt whose hold the project cannot fund waits without capacity (``reason: InsufficientCredits``,
  the Job's ``Funded=False``) and is tried again every ``CAPTURE_INTERVAL``: credit granted meanwhile
  starts it (ADR 0046 §15); nothing is charged while it waits. The same holds for the Job's
  ``maxCostUSD`` (``MaxCostReached``, tried again at once when it is raised) and for the project's
  Budgets (``BudgetExceeded``: the hold and each extension name the Job, whose labels select the
  Budgets it must fit; tried again at once when a Budget of the project changes or goes).
* A segment is captured once it is closed (its end is known: ``Boot`` at ``startTime``, the others at
  ``finishTime``), never estimated: the Attempt's times are whole seconds, written by the agent, and
  a charge computed from "now" could exceed the time that turns out to have been billed. Meanwhile the
  hold keeps ahead of what accrues (checked every ``CAPTURE_INTERVAL``), so the money is reserved as
  it accrues. At the end the hold is released and ``status.cost.final`` is set.

``status.cost`` of the Attempt is a display copy of the ledger; the Job's is the sum of its
attempts' (``jobs/reporting.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

from nodus.apimachinery import units
from nodus.apimachinery.money import MICRO, charge
from nodus.apimachinery.money import text as usd
from nodus.apis.v1 import objects, phases
from nodus.apis.v1.attempt import AttemptStatus
from nodus.client import Client, errors
from nodus.client.informers import Handler, Informer
from nodus.client.workqueue import WorkQueue
from nodus.controllers.jobs.reconciling import stop_attempt
from nodus.controllers.manager import Result

Object = dict[str, Any]
log = logging.getLogger("nodus.controllers.billing")

FUNDED_WINDOW = timedelta(minutes=10)
CAPTURE_INTERVAL = 30.0
INCREMENT_SECONDS = 60
COVERED_REASONS = frozenset({"BootFailed", "CapacityBusy", "NodeLost"})
API = "/apis/nodus.dev/v1"


CREDIT_WAIT_INDEX = "waiting-for-credit"
BUDGET_WAIT_INDEX = "waiting-for-budget"
# Why an attempt may wait for money, unfunded: the project's credit, the Job's maxCostUSD, or a Budget.
WAITS = frozenset({"InsufficientCredits", "MaxCostReached", "BudgetExceeded"})
STOP_GRACE_SECONDS = 30


def waiting_for_credit(obj: Object) -> list[str]:
    """Index of live attempts waiting for credit, by project: a grant there should try them at once."""
    return _waiting_for(objects.read(objects.Attempt, obj), "InsufficientCredits")


def waiting_for_budget(obj: Object) -> list[str]:
    """Index of live attempts waiting for room in a Budget, by project: a Budget's change there tries them."""
    return _waiting_for(objects.read(objects.Attempt, obj), "BudgetExceeded")


def _waiting_for(attempt: objects.Attempt, reason: str) -> list[str]:
    status = attempt.status
    if status.reason != reason or status.phase in phases.ATTEMPT_FINISHED:
        return []
    return [attempt.metadata.namespace or ""]


def enqueue_attempts_of_job(queue: WorkQueue[Any], attempts: Informer, index: str) -> Handler:
    """A Job changed (its maxCostUSD raised, its labels and so its Budgets changed): its attempts look at
    their funding again."""

    def handler(old: Object | None, new: Object | None) -> None:
        if new is None:
            return
        job = objects.read(objects.Job, new)
        if old is not None:
            before = objects.read(objects.Job, old)
            if before.spec.max_cost_usd == job.spec.max_cost_usd and before.metadata.labels == job.metadata.labels:
                return
        for attempt in attempts.by_index(index, job.metadata.uid):
            queue.add((str(attempt["metadata"]["namespace"]), str(attempt["metadata"]["name"])))

    return handler


def enqueue_waiting(queue: WorkQueue[Any], attempts: Informer) -> Handler:
    """A Project changed (its credits, after a grant): its attempts waiting for credit try again now."""

    def handler(old: Object | None, new: Object | None) -> None:
        if new is not None:
            project = objects.read(objects.Project, new).metadata.name
            for attempt in attempts.by_index(CREDIT_WAIT_INDEX, project):
                queue.add((project, str(attempt["metadata"]["name"])))

    return handler


def enqueue_waiting_for_budget(queue: WorkQueue[Any], attempts: Informer) -> Handler:
    """A Budget's spec changed (its limit raised, its selector narrowed) or it went: the attempts of its
    project waiting for a Budget try again now."""

    def handler(old: Object | None, new: Object | None) -> None:
        before = objects.read(objects.Budget, old) if old is not None else None
        after = objects.read(objects.Budget, new) if new is not None else None
        if before is not None and after is not None and before.spec == after.spec:
            return  # only its status copy moved
        budget = after or before
        if budget is None:
            return
        project = budget.metadata.namespace or ""
        for attempt in attempts.by_index(BUDGET_WAIT_INDEX, project):
            queue.add((project, str(attempt["metadata"]["name"])))

    return handler


@dataclass(frozen=True)
class Bill:
    """What an attempt owes per segment at a moment, from its own times. ``closed`` are the segments
    whose end is known (their seconds will not change): only those are captured."""

    seconds: dict[str, Decimal]
    rate: Decimal
    covered: bool
    final: bool
    closed: tuple[str, ...] = ()
    window: timedelta = FUNDED_WINDOW

    def amounts(self) -> dict[str, Decimal]:
        return {segment: charge(self.rate, s) for segment, s in self.seconds.items()}

    @property
    def step(self) -> Decimal:
        """One funded window at the rate: what a hold is extended by."""
        return (self.rate * Decimal(self.window.total_seconds()) / 3600).quantize(MICRO, rounding=ROUND_CEILING)


def bill(attempt: objects.Attempt, now: datetime, restore: bool) -> Bill | None:
    """The attempt's billed seconds per segment at ``now`` (None: it never billed)."""
    status = attempt.status
    rate_text = status.placement.rate_usd_per_hour if status.placement is not None else None
    if not status.scheduled_time or not rate_text:
        return None
    final = status.phase in phases.ATTEMPT_FINISHED
    if not attempt.spec.node:
        # No capacity yet (it may wait for its hold), or never: nothing bills; only the hold matters.
        return Bill({}, Decimal(rate_text), False, final)
    ordered = billing_start(status)
    end = units.time_or_none(status.finish_time) or now if final else now
    started = units.time_or_none(status.start_time)
    boot_end = min(started, end) if started is not None else end
    boot = _seconds(boot_end - ordered)
    running = _seconds(end - started) if started is not None and end > started else Decimal(0)
    seconds = {("Restore" if restore else "Boot"): boot, "Running": running}
    if final:
        total = boot + running
        billed = max(
            (total / INCREMENT_SECONDS).to_integral_value(rounding=ROUND_CEILING) * INCREMENT_SECONDS,
            Decimal(INCREMENT_SECONDS),
        )
        seconds["Teardown"] = billed - total
    covered = status.phase == "Lost" and status.reason in COVERED_REASONS
    first = "Restore" if restore else "Boot"
    closed = tuple(seconds) if final else ((first,) if started is not None else ())
    return Bill(seconds, Decimal(rate_text), covered, final, closed)


def billing_start(status: AttemptStatus) -> datetime:
    """When an attempt with capacity started billing: ``provisioningTime`` (``scheduledTime`` for attempts
    assigned before it was written). Only for an attempt that was scheduled (:func:`bill` is not None)."""
    start = status.provisioning_time or status.scheduled_time
    if start is None:
        raise ValueError("an attempt that was never scheduled has no billing start")
    return units.parse_time(start)


def funded_until(attempt: objects.Attempt, rate: Decimal, charged: Decimal, held: Decimal, now: datetime) -> str:
    """The funded edge of a billing attempt (``status.cost.fundedUntilTime``): when what accrues from
    :func:`billing_start` at ``rate`` reaches what was charged plus what is held. It moves only when the ledger
    does (an extension, a capture), never with the clock, so the Attempt and its Job are not rewritten on every
    look (``kubectl get jobs -w``, issue 16). Without capacity nothing accrues yet: the edge first shown (``now``
    plus what is held) stays until capacity is assigned."""
    status = attempt.status
    if not attempt.spec.node:
        shown = status.cost.funded_until_time if status.cost is not None else None
        return shown or units.format_time(now + timedelta(seconds=float(held / rate * 3600)))
    return units.format_time(billing_start(status) + timedelta(seconds=float((charged + held) / rate * 3600)))


def _seconds(delta: timedelta) -> Decimal:
    return max(Decimal(str(delta.total_seconds())).quantize(Decimal("0.001")), Decimal(0))


class AttemptBilling:
    """Reconciles the money of one attempt (see the module docstring)."""

    def __init__(
        self, client: Client, attempts: Informer, jobs: Informer, funded_window: timedelta = FUNDED_WINDOW
    ) -> None:
        self._client = client
        self._attempts = attempts
        self._jobs = jobs
        self._window = funded_window
        # Looked at this often while an attempt lives: often enough that a hold never runs dry between two looks.
        self._interval = min(CAPTURE_INTERVAL, funded_window.total_seconds() / 4)

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        namespace, name = key
        obj = self._attempts.get(namespace, name) if namespace is not None else None
        if obj is None or namespace is None:
            return None
        attempt = objects.read(objects.Attempt, obj)
        status = attempt.status
        if status.cost is not None and status.cost.final:
            return None
        now = units.now()
        owed = bill(attempt, now, self._restores(attempt))
        if owed is None:
            return None
        owed = dataclasses.replace(owed, window=self._window)
        uid = attempt.metadata.uid
        # On first sight (no cost shown yet) the hold is posted straight away: the posting is idempotent
        # and answers the ledger's state, so the read before it would only add a round trip to the start.
        ledger = {"exists": False} if status.cost is None else await self._get(namespace, uid)
        if not ledger["exists"]:
            if owed.final and not owed.seconds:
                return await self._write_cost(attempt, ledger, owed)  # it ended without capacity: nothing billed
            hold = owed.rate * Decimal(self._window.total_seconds()) / 3600 + charge(
                owed.rate, Decimal(INCREMENT_SECONDS)
            )
            hold = hold.quantize(MICRO, rounding=ROUND_CEILING)
            body = {"operation": "Hold", "key": f"hold:{uid}", "hold": uid, "amountUSD": usd(hold)}
            body["subject"] = attempt.spec.job_uid
            body["job"] = attempt.spec.job  # its labels select the Budgets the hold must fit
            if (cap := self._cap(attempt)) is not None:
                body["capUSD"] = cap
            try:
                ledger = await self._post(namespace, body)
            except errors.APIError as exc:
                if exc.reason not in WAITS:
                    raise
                return await self._refuse(obj, exc.reason, exc.message)
            if status.reason in WAITS:  # funded at last: the wait is over
                patch = {"status": {"reason": None, "message": None}}
                await self._client.patch("attempts", name, patch, namespace, subresource="status")
        ledger = await self._capture(obj, owed, ledger)
        if owed.final:
            if not ledger.get("settled"):
                ledger = await self._post(namespace, {"operation": "Release", "key": f"release:{uid}", "hold": uid})
            await self._write_cost(attempt, ledger, owed)
            return None
        await self._write_cost(attempt, ledger, owed)
        return Result(requeue_after=self._interval)

    def _restores(self, attempt: objects.Attempt) -> bool:
        """Its bring-up is a Restore: it restores a checkpoint, or replaces an attempt that lost its capacity."""
        spec = attempt.spec
        if spec.restore is not None:
            return True
        if spec.number <= 1:
            return False
        earlier = f"{spec.job}-{spec.index}-{spec.number - 1}"
        # A gang's new epoch replaces every rank of the last one: a loss of any of them makes it a Restore.
        size = spec.gang.size if spec.gang is not None else 0
        names = [f"{earlier}-r{rank}" for rank in range(size)] if size else [earlier]
        for name in names:
            previous = self._attempts.get(attempt.metadata.namespace, name)
            if previous is not None and objects.read(objects.Attempt, previous).status.phase == "Lost":
                return True
        return False

    async def _capture(self, obj: Object, owed: Bill, ledger: Object) -> Object:
        """Capture every closed segment's charge not captured yet; keep the hold ahead of what accrues.
        ``obj`` is the Attempt as stored (a stop for want of money is asked with it)."""
        attempt = objects.read(objects.Attempt, obj)
        namespace, uid = attempt.metadata.namespace or "", attempt.metadata.uid
        charged = {**ledger.get("chargedUSD", {}), **ledger.get("coveredUSD", {})}
        if owed.covered:
            # Nodus's fault, found at the end: what was charged before (a Boot closed at the start) goes back.
            ledger = await self._refund(namespace, uid, owed, ledger)
            charged = dict(ledger.get("coveredUSD") or {})
        for segment in owed.closed:
            seconds = owed.seconds[segment]
            due = charge(owed.rate, seconds) - Decimal(str(charged.get(segment, "0")))
            if due <= 0:
                continue
            held = Decimal(str(ledger.get("amountUSD") or "0"))
            if not owed.covered and due > held:
                ledger = await self._extend(namespace, uid, ledger, max(owed.step, due - held))
            body = {
                "operation": "Cover" if owed.covered else "Capture",
                "key": f"{'cover' if owed.covered else 'capture'}:{uid}:{segment}:{seconds}",
                "hold": uid,
                "segment": segment,
                "seconds": str(seconds),
                "rateUSDPerHour": usd(owed.rate),
                "amountUSD": usd(due),
            }
            ledger = await self._post(namespace, body)
        if not owed.final and not owed.covered:
            ledger = await self._keep_funded(obj, owed, ledger)
        return ledger

    async def _refund(self, namespace: str, uid: str, owed: Bill, ledger: Object) -> Object:
        for segment, paid in (ledger.get("chargedUSD") or {}).items():
            amount = Decimal(str(paid))
            if amount <= 0:
                continue
            body = {
                "operation": "Refund",
                "key": f"refund:{uid}:{segment}",
                "hold": uid,
                "segment": segment,
                "seconds": str(owed.seconds.get(segment, Decimal(0))),
                "rateUSDPerHour": usd(owed.rate),
                "amountUSD": usd(amount),
            }
            ledger = await self._post(namespace, body)
        return ledger

    async def _keep_funded(self, obj: Object, owed: Bill, ledger: Object) -> Object:
        """Extend the hold by a window once less than half a window (or the stop margin) is left beyond what
        has accrued; when the project or the Job's cap cannot fund it, stop the attempt (``obj``, as stored)
        before the hold runs out."""
        attempt = objects.read(objects.Attempt, obj)
        if not attempt.spec.node:
            # No capacity yet: nothing accrues, so there is nothing to extend and nothing to stop. (Stopping
            # it would only start a replacement that holds the same funds: with a window shorter than the
            # stop margin, a loop.)
            return ledger
        charged = sum((Decimal(str(v)) for v in (ledger.get("chargedUSD") or {}).values()), Decimal(0))
        accrued_open = sum(owed.amounts().values(), Decimal(0)) - charged
        left = Decimal(str(ledger.get("amountUSD") or "0")) - accrued_open
        # What stopping takes, paid from the hold: the time until the stop lands (a look, the grace) and
        # the rounding up to the next increment. With less than that left, the attempt must stop now.
        margin = charge(owed.rate, Decimal(self._interval + STOP_GRACE_SECONDS + INCREMENT_SECONDS))
        if owed.rate <= 0 or left >= max(owed.step / 2, margin):
            return ledger
        namespace, uid = attempt.metadata.namespace or "", attempt.metadata.uid
        job = attempt.spec.job
        # Enough windows at once to be past the threshold again: one posting and one status write, where a
        # window shorter than the margin (a test's) would otherwise take one window per look.
        steps = max(1, math.ceil((max(owed.step / 2, margin) - left) / owed.step)) if owed.step > 0 else 1
        try:
            extended = await self._extend_windows(namespace, uid, ledger, owed.step, steps, self._cap(attempt), job)
        except errors.APIError as exc:
            if exc.reason not in WAITS:
                raise
            if left <= margin:
                # ADR 0046 §15: a Checkpointed Job's attempt checkpoints before it stops, but only while what is
                # held lasts (the deadline: the end of the funded time); it resumes from there once funds allow.
                log.info("attempt %s stops: %s", uid, exc.message)
                funded_end = units.now() + timedelta(seconds=float(max(left, Decimal(0)) / owed.rate * 3600))
                await stop_attempt(
                    self._client,
                    obj,
                    exc.reason,
                    checkpoint=_checkpointed(attempt),
                    deadline=units.format_time(funded_end),
                )
            else:
                # It runs on what is held, and says until when: the Job shows Funded=False and stopByTime.
                edge = units.now() + timedelta(seconds=float((left - margin) / owed.rate * 3600))
                await self._mark_unfunded(attempt, exc.reason, exc.message, units.format_time(edge))
            return ledger
        await self._mark_unfunded(attempt, None, None, None)
        return extended

    async def _extend_windows(
        self, namespace: str, uid: str, ledger: Object, step: Decimal, steps: int, cap: str | None, job: str | None
    ) -> Object:
        """Extend the hold by ``steps`` windows of ``step``; when money refuses that, by one window, as a single
        window always was, so that money running short stops the attempt no earlier than it did."""
        if steps > 1:
            try:
                return await self._extend(namespace, uid, ledger, step * steps, cap, job)
            except errors.APIError as exc:
                if exc.reason not in WAITS:
                    raise
        return await self._extend(namespace, uid, ledger, step, cap, job)

    async def _mark_unfunded(
        self, attempt: objects.Attempt, reason: str | None, message: str | None, edge: str | None
    ) -> None:
        """Write (or clear, all None) a running attempt's money wait: reason, message and ``stopByTime``."""
        status = attempt.status
        if reason is None and status.reason not in WAITS and not status.stop_by_time:
            return
        if reason is not None and status.reason == reason and status.stop_by_time:
            return  # the edge was written when the wait began; moving it on every look would churn
        meta = attempt.metadata
        patch = {"status": {"reason": reason, "message": message, "stopByTime": edge}}
        with contextlib.suppress(errors.NotFound):
            await self._client.patch("attempts", meta.name, patch, meta.namespace, subresource="status")

    def _cap(self, attempt: objects.Attempt) -> str | None:
        """The Job's ``maxCostUSD``, if it has one (the Job read from the informer, matched by uid)."""
        obj = self._jobs.get(attempt.metadata.namespace, attempt.spec.job)
        if obj is None:
            return None
        job = objects.read(objects.Job, obj)
        return job.spec.max_cost_usd if job.metadata.uid == attempt.spec.job_uid else None

    async def _extend(
        self, namespace: str, uid: str, ledger: Object, amount: Decimal, cap: str | None = None, job: str | None = None
    ) -> Object:
        """Extend the hold by ``amount``; funding ahead, with ``cap`` the Job's maxCostUSD applies and with
        ``job`` the Budgets its labels select; without them (time already billed, being captured) neither
        does: consumed time is owed either way."""
        amount = amount.quantize(MICRO, rounding=ROUND_CEILING)
        # The key names the hold's total after the extension: two reconciles extending from the same
        # state post the same key (one extension), a later extension a new one.
        total = Decimal(str(ledger.get("capturedUSD") or "0")) + Decimal(str(ledger.get("amountUSD") or "0")) + amount
        body = {"operation": "Extend", "key": f"extend:{uid}:{usd(total)}", "hold": uid, "amountUSD": usd(amount)}
        if cap is not None:
            body["capUSD"] = cap
        if job is not None:
            body["job"] = job
        return await self._post(namespace, body)

    async def _refuse(self, obj: Object, reason: str, message: str) -> Result | None:
        """The project's credit, the Job's cap or a Budget cannot fund the hold: the attempt waits, unfunded
        and without capacity, saying why (``reason``: InsufficientCredits, MaxCostReached or BudgetExceeded);
        it is tried again every ``CAPTURE_INTERVAL``, at once after a grant, a raised cap or a Budget's
        change (ADR 0046 §15). ``obj`` is the Attempt as stored."""
        attempt = objects.read(objects.Attempt, obj)
        meta = attempt.metadata
        if attempt.spec.node:
            # Capacity was assigned before billing saw it (a provisioner of an older release): stop it.
            await stop_attempt(self._client, obj, reason, grace_seconds=0)
            return None
        if attempt.status.reason != reason or attempt.status.message != message:
            log.info("attempt %s/%s waits: %s", meta.namespace, meta.name, message)
            patch = {"status": {"reason": reason, "message": message}}
            with contextlib.suppress(errors.NotFound):
                await self._client.patch("attempts", meta.name, patch, meta.namespace, subresource="status")
        return Result(requeue_after=self._interval)

    async def _write_cost(self, attempt: objects.Attempt, ledger: Object, owed: Bill) -> Result | None:
        charged = {k: Decimal(str(v)) for k, v in (ledger.get("chargedUSD") or {}).items()}
        covered = sorted((ledger.get("coveredUSD") or {}).keys())
        # Every closed segment is shown, a zero one too (a warm start has no boot to charge).
        shown = {
            s: charged.get(s, Decimal(0))
            for s in (*owed.closed, *charged)
            if s not in set(ledger.get("coveredUSD") or {})
        }
        # Every key is written, null where absent: the copy is a merge patch, and a segment charged once
        # and refunded since (a Boot before a Nodus fault) must disappear, not keep its old amount.
        segments: Object = {
            f"{s.lower()}USD": usd(shown[s]) if s in shown else None for s in ("Boot", "Running", "Restore", "Teardown")
        }
        segments["coveredByNodus"] = covered or None
        cost: Object = {
            "totalUSD": usd(sum(charged.values(), Decimal(0))),
            "heldUSD": usd(Decimal(str(ledger.get("amountUSD") or "0"))),
            "rateUSDPerHour": usd(Decimal(0) if owed.final else owed.rate),
            "bySegment": segments,
            "final": owed.final,
            "fundedUntilTime": None,
        }
        held = Decimal(str(ledger.get("amountUSD") or "0"))
        if not owed.final and owed.rate > 0:
            total = sum(charged.values(), Decimal(0))
            cost["fundedUntilTime"] = funded_until(attempt, owed.rate, total, held, units.now())
        shown_now = attempt.status.cost
        if shown_now is not None and shown_now.to_json() == _without_nulls(cost):
            return None
        meta = attempt.metadata
        with contextlib.suppress(errors.NotFound):
            await self._client.patch(
                "attempts", meta.name, {"status": {"cost": cost}}, meta.namespace, subresource="status"
            )
        return None

    async def _get(self, namespace: str, uid: str) -> Object:
        response = await self._client.request("GET", f"{API}/namespaces/{namespace}/ledger/holds/{uid}")
        return dict(response.json())

    async def _post(self, namespace: str, body: Object) -> Object:
        response = await self._client.request("POST", f"{API}/namespaces/{namespace}/ledger/postings", json=body)
        return dict(response.json())


def _checkpointed(attempt: objects.Attempt) -> bool:
    recovery = attempt.spec.recovery
    return recovery is not None and recovery.continuity == "Checkpointed"


def _without_nulls(value: Any) -> Any:
    """``value`` as stored after a merge patch: keys whose value is None removed."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value
