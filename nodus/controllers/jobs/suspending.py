"""Suspending and resuming a Job (``spec.state``): stops with a checkpoint first, and the suspended period.

A suspend stops every live attempt; a Checkpointed Job's take a checkpoint first (``spec.stop.checkpoint``),
until :data:`SUSPEND_DEADLINE` after the suspend (``spec.stop.deadline``): a checkpoint still not committed
then is given up and the attempt stops without it, so a suspend always releases the capacity (ADR 0037).
A checkpoint that fails is tried :data:`SUSPEND_TRIES` times in all; then the attempt keeps running and the
Job says ``SuspendFailed`` until ``spec.state`` leaves Suspended. While attempts still run the Job reads
``Suspending``, naming what it waits for and when it ends at the latest; ``Suspended`` once nothing runs.
Resuming withdraws a stop not carried out yet and adds the suspended period to ``status.suspendedDuration``
(the timeout clock excludes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1.jobspec import JobSpec
from nodus.controllers.jobs import conditions
from nodus.controllers.jobs.slots import phase_of, view

Object = dict[str, Any]
Stop = tuple[Object, str]

# A suspend's checkpoint is tried this many times (the first try and two retries) before the Job keeps running.
SUSPEND_TRIES = 3
# How long a suspend waits for its checkpoints: then an attempt stops without one (it restores the one before).
SUSPEND_DEADLINE = timedelta(minutes=10)
# SIGTERM, then SIGKILL this much later (nodus.controllers.jobs.reconciling.stop_attempt's default).
STOP_GRACE = timedelta(seconds=30)


@dataclass(frozen=True)
class Suspension:
    """What a suspend asks of the live attempts: stop (for ``Suspended``), a checkpoint first or not, and the
    deadline of that checkpoint (``spec.stop.deadline`` of each new stop)."""

    stops: list[Stop]
    checkpoint_first: bool
    deadline: str | None


def suspend(status: Object, spec: JobSpec, live: list[Object], now: datetime) -> Suspension:
    """Stop every live attempt, a Checkpointed Job's with a checkpoint first, by :data:`SUSPEND_DEADLINE` from
    now for the stops asked now. A checkpoint that fails is retried twice; then the attempt keeps running and
    the Job says ``SuspendFailed`` (``suspendFailures``)."""
    stops: list[Stop] = [(a, "Suspended") for a in live]
    checkpoint_first = spec.recovery.continuity == "Checkpointed"
    deadline = now + SUSPEND_DEADLINE if checkpoint_first else None
    suspension = Suspension(stops, checkpoint_first, units.format_time(deadline) if deadline else None)
    failures = max((_stop_failures(a) for a in live), default=0)
    if suspended_since(status) is None:
        conditions.set(status, "Suspended", "True", "Suspended", "spec.state is Suspended.", now)
    if failures:
        status["suspendFailures"] = failures
    if failures >= SUSPEND_TRIES:
        status["phase"] = "Running"
        message = (
            f"The suspend's checkpoint failed {failures} times, so the Job keeps running: {_stop_failure_message(live)}"
        )
        conditions.set(status, "SuspendFailed", "True", "SuspendFailed", message, now)
        conditions.explain(status, "SuspendFailed", message)
        return suspension
    if live:
        status["phase"] = "Suspending"
        conditions.explain(status, "Suspending", _suspending_message(live, checkpoint_first, deadline, now))
    else:
        status["phase"] = "Suspended"
        conditions.explain(status, "Suspended", "The Job is suspended; set spec.state to Running to resume.")
    return suspension


def _suspending_message(live: list[Object], checkpoint_first: bool, deadline: datetime | None, now: datetime) -> str:
    """What a suspend waits for, and the latest moment its attempts are gone (a deadline, or SIGKILL)."""
    ends = [_stopped_by(a, checkpoint_first, deadline, now) for a in live]
    checkpointing = sum(1 for a in live if _checkpoints(a, checkpoint_first))
    count = f"{len(live)} running attempt{'s' if len(live) != 1 else ''}"
    if checkpointing:
        waits = f"waiting for {count} to take {'a checkpoint' if len(live) == 1 else 'their checkpoints'} and stop"
    else:
        waits = f"waiting for {count} to stop"
    known = [end for end in ends if end is not None]
    if known and len(known) == len(ends):
        by = units.format_time(max(known))
        after = "; a checkpoint not committed by then is given up" if checkpointing else ""
        waits += f", by {by} at the latest{after}"
    return f"The Job is suspending: {waits}. It reads Suspended once nothing runs."


def _checkpoints(attempt: Object, checkpoint_first: bool) -> bool:
    stop = view(attempt).spec.stop
    if stop is not None:
        return bool(stop.checkpoint)
    return checkpoint_first and phase_of(attempt) == "Running"


def _stopped_by(attempt: Object, checkpoint_first: bool, deadline: datetime | None, now: datetime) -> datetime | None:
    """When ``attempt`` is gone at the latest: its stop's deadline with a checkpoint (None: an older stop without
    one), else the stop's SIGKILL; an attempt not asked yet is asked now, as :func:`suspend` asks it."""
    spec = view(attempt).spec
    stop = spec.stop
    if stop is not None:
        if stop.checkpoint:
            return units.time_or_none(stop.deadline)
        requested = units.time_or_none(stop.requested_time) or now
        return requested + timedelta(seconds=stop.grace_period_seconds or STOP_GRACE.total_seconds())
    if _checkpoints(attempt, checkpoint_first):
        return deadline
    return now + STOP_GRACE if spec.node else now


def _stop_failures(attempt: Object) -> int:
    checkpoint = view(attempt).status.checkpoint
    return (checkpoint.stop_failures or 0) if checkpoint is not None else 0


def _stop_failure_message(live: list[Object]) -> str:
    for attempt in live:
        checkpoint = view(attempt).status.checkpoint
        if checkpoint is not None and checkpoint.last_failure is not None and checkpoint.last_failure.message:
            return checkpoint.last_failure.message
    return "no checkpoint could be taken."


def resume(status: Object, live: list[Object], now: datetime) -> list[tuple[Object, Object]]:
    """``spec.state`` is Running: withdraw the stop of a suspend that has not stopped its attempt yet (its
    checkpoint failed, or is still being taken), and close the suspended period. Returns the spec patches."""
    withdrawn: list[tuple[Object, Object]] = [(a, {"stop": None}) for a in live if _stop_reason(a) == "Suspended"]
    status.pop("suspendFailures", None)
    if (conditions.get(status, "SuspendFailed") or {}).get("status") == "True":
        conditions.set(status, "SuspendFailed", "False", "Resumed", "spec.state is Running.", now)
    since = suspended_since(status)
    if since is None:
        return withdrawn
    if status.get("timeoutStartTime"):
        total = units.parse_duration(status.get("suspendedDuration") or "0s") + max(now - since, timedelta(0))
        status["suspendedDuration"] = units.format_duration(total)
    conditions.set(status, "Suspended", "False", "Resumed", "spec.state is Running.", now)
    conditions.explain(status, None, None)
    return withdrawn


def _stop_reason(attempt: Object) -> str | None:
    stop = view(attempt).spec.stop
    return stop.reason if stop is not None else None


def suspended_since(status: Object) -> datetime | None:
    condition = conditions.get(status, "Suspended")
    if condition is None or condition.get("status") != "True":
        return None
    return units.time_or_none(condition.get("lastTransitionTime"))
