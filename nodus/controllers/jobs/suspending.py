"""Suspending and resuming a Job (``spec.state``): stops with a checkpoint first, and the suspended period.

A suspend stops every live attempt; a Checkpointed Job's take a checkpoint first (``spec.stop.checkpoint``).
A checkpoint that fails is tried :data:`SUSPEND_TRIES` times in all; then the attempt keeps running and the
Job says ``SuspendFailed`` until ``spec.state`` leaves Suspended. Resuming withdraws a stop not carried out
yet and adds the suspended period to ``status.suspendedDuration`` (the timeout clock excludes it).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.controllers.jobs import conditions, recovering

Object = dict[str, Any]
Stop = tuple[Object, str]

# A suspend's checkpoint is tried this many times (the first try and two retries) before the Job keeps running.
SUSPEND_TRIES = 3


def suspend(status: Object, spec: Object, live: list[Object], now: datetime) -> tuple[list[Stop], bool]:
    """Stop every live attempt, a Checkpointed Job's with a checkpoint first: (the stops, checkpoint first). A
    checkpoint that fails is retried twice; then the attempt keeps running and the Job says ``SuspendFailed``
    (``suspendFailures``)."""
    stops: list[Stop] = [(a, "Suspended") for a in live]
    checkpoint_first = recovering.continuity(spec) == "Checkpointed"
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
        return stops, checkpoint_first
    status["phase"] = "Suspending" if live else "Suspended"
    conditions.explain(status, "Suspended", "The Job is suspended; set spec.state to Running to resume.")
    return stops, checkpoint_first


def _stop_failures(attempt: Object) -> int:
    return int(((attempt.get("status") or {}).get("checkpoint") or {}).get("stopFailures") or 0)


def _stop_failure_message(live: list[Object]) -> str:
    for attempt in live:
        failure = ((attempt.get("status") or {}).get("checkpoint") or {}).get("lastFailure") or {}
        if failure.get("message"):
            return str(failure["message"])
    return "no checkpoint could be taken."


def resume(status: Object, live: list[Object], now: datetime) -> list[tuple[Object, Object]]:
    """``spec.state`` is Running: withdraw the stop of a suspend that has not stopped its attempt yet (its
    checkpoint failed, or is still being taken), and close the suspended period. Returns the spec patches."""
    withdrawn: list[tuple[Object, Object]] = [
        (a, {"stop": None}) for a in live if ((a.get("spec") or {}).get("stop") or {}).get("reason") == "Suspended"
    ]
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


def suspended_since(status: Object) -> datetime | None:
    condition = conditions.get(status, "Suspended")
    if condition is None or condition.get("status") != "True":
        return None
    return units.time_or_none(condition.get("lastTransitionTime"))
