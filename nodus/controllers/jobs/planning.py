"""The Job controller's decision: from a Job, its attempts and the time, what to write.

``plan`` is a pure function (the clock is an argument), so every rule of the Job's lifecycle is
tested without a server. The reconciler (``reconciling``) reads the Job and its attempts from its
informers, calls ``plan`` and applies the result: creating attempts (deterministic names, so a retry
hits AlreadyExists rather than making a duplicate), asking attempts to stop, writing ``/status``,
and adding or lifting the finalizer. Level-triggered: ``plan`` never looks at what changed, only at
what is, so running it twice in a row is harmless.

The order of the rules is the order of precedence: deletion, a terminal phase (and TTL), admission,
requested restart, cancel, timeout, suspend, queue timeout, failure limits, success, then creating
attempts for the indexes that need one and deriving the phase.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from nodus.apimachinery import imagerefs, units
from nodus.apis.v1 import labels, objects, phases, statusreasons
from nodus.apis.v1.jobspec import JobSpec
from nodus.apis.v1.jobstatus import ImageStatus
from nodus.controllers.jobs import (
    conditions,
    funding,
    gangplanning,
    gangreporting,
    gangs,
    pinning,
    ranges,
    recovering,
    reporting,
    suspending,
)
from nodus.controllers.jobs.attempts import attempt_for
from nodus.controllers.jobs.gangplanning import TimeScales
from nodus.controllers.jobs.slots import BOUND, Slots, phase_of, view

Object = dict[str, Any]

STOP_GRACE_SECONDS = 30
# An attempt that failed for one of these reasons would fail the same way again: the Job fails at once.
PERMANENT_REASONS = frozenset(
    {
        "InputDigestMismatch",
        "SecretChanged",
        "SourceUnavailable",
        "InputUnavailable",
        "DestinationRefused",
        "ArchiveUnsafe",
        # Every node would pull the same reference from the same registry with the same credentials (ADR 0042).
        "ImageNotFound",
        "ImagePullUnauthorized",
        "ImageRegistryUntrusted",
    }
)


@dataclass
class Plan:
    """What the reconciler should write. Empty lists and None mean nothing to do."""

    status: Object
    create: list[Object] = field(default_factory=list)
    stop: list[tuple[Object, str]] = field(default_factory=list)
    # The stops ask for a checkpoint first (a suspend or restart of a Checkpointed Job), until stop_deadline if
    # one is given (a suspend's: then the attempt stops without it).
    checkpoint_first: bool = False
    stop_deadline: str | None = None
    # Merge patches of live attempts' specs: a requested checkpoint, an edited interval, a suspend withdrawn.
    patch: list[tuple[Object, Object]] = field(default_factory=list)
    add_finalizer: bool = False
    remove_finalizer: bool = False
    delete_job: bool = False
    requeue_after: float | None = None

    def wake_at(self, now: datetime, when: datetime | None) -> None:
        if when is None:
            return
        seconds = max((when - now).total_seconds(), 0.05)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


def plan(
    job: Object,
    attempts: list[Object],
    now: datetime,
    lookup: pinning.Lookup | None = None,
    scales: TimeScales | None = None,
) -> Plan:
    """Decide for ``job``; ``lookup`` finds the objects its data plane names (none: no such objects).

    ``job`` and ``attempts`` are the stored objects as JSON: they are read through their typed views, and the
    attempts to stop or patch are these very objects (the reconciler writes them with their resourceVersion)."""
    result = _plan(job, attempts, now, lookup or _nothing, scales or TimeScales())
    if gangs.is_gang(objects.read(objects.Job, job).spec):
        epochs = gangs.epochs_of(attempts)
        gang_phase = gangplanning.gang_phase(str(result.status.get("phase") or "Pending"), attempts)
        gangreporting.report(result.status, epochs[-1] if epochs else None, epochs, gang_phase)
    return result


def _plan(obj: Object, attempts: list[Object], now: datetime, lookup: pinning.Lookup, scales: TimeScales) -> Plan:
    job = objects.read(objects.Job, obj)
    spec, meta = job.spec, job.metadata
    generation = meta.generation or 1  # the server numbers generations from 1
    status = copy.deepcopy(obj.get("status") or {})
    status["observedGeneration"] = generation
    gang = gangs.is_gang(spec)
    # Every rank attempt is stopped, billed and reported; a gang's epochs are counted as single runs.
    raw = Slots.of(attempts)
    slots = Slots.of(gangs.representatives(attempts)) if gang else raw
    result = Plan(status=status)
    has_finalizer = labels.STOP_ATTEMPTS in meta.finalizers
    live = raw.live()

    if meta.deletion_timestamp:
        result.stop = [(a, "Deleted") for a in live]
        result.remove_finalizer = has_finalizer and not live
        return result

    _count(status, spec, slots, raw, job.status.image)
    reporting.collect(status, spec, raw, now)
    recovering.report(status, slots)
    if job.status.phase in phases.JOB_FINISHED:
        return _finished(result, job, live, has_finalizer, now)

    if (job.status.phase or "Pending") == "Pending":
        pinned = pinning.pin(spec, lookup)
        if isinstance(pinned, pinning.Blocked):
            return _blocked(result, raw, now, pinned, generation)
        status.update(pinned.status())
        _admit(status, spec, generation, now)
    result.add_finalizer = not has_finalizer

    if _restart_requested(status, meta.annotations.get(labels.RESTART_REQUESTED_AT)):
        result.stop = [(a, "Restart") for a in live]
        result.checkpoint_first = spec.recovery.continuity == "Checkpointed"
        return result

    if spec.state == "Cancelled":
        return _finish(result, raw, now, "Cancelled", "Cancelled", "The Job was cancelled.")

    _timeout_clock(status, spec, slots, now)
    deadline = units.time_or_none(status.get("timeoutTime"))
    if deadline is not None and spec.state != "Suspended":
        if now >= deadline:
            message = f"The Job ran longer than spec.timeout {spec.timeout}."
            return _finish(result, raw, now, "Failed", "DeadlineExceeded", message)
        result.wake_at(now, deadline)

    if spec.state == "Suspended":
        suspension = suspending.suspend(status, spec, live, now)
        result.stop, result.checkpoint_first = suspension.stops, suspension.checkpoint_first
        result.stop_deadline = suspension.deadline
        return result
    result.patch += suspending.resume(status, live, now)

    queue_deadline = _queue_deadline(status, spec)
    if queue_deadline is not None:
        if now >= queue_deadline:
            waiting = _unschedulable_message(live)
            message = f"No capacity within spec.placement.queueTimeout {spec.placement.queue_timeout}. {waiting}"
            return _finish(result, raw, now, "Failed", "CapacityUnavailable", message.strip())
        result.wake_at(now, queue_deadline)

    failure = _failure(spec, slots, raw, attempts)
    if failure is not None:
        return _finish(result, raw, now, "Failed", *failure)
    completions = spec.completions
    if len(slots.succeeded_indexes()) >= completions:
        return _finish(result, raw, now, "Succeeded", "Completed", f"{completions} of {completions} indexes succeeded.")

    return _advance(result, obj, job, attempts, slots, raw, live, lookup, scales, now)


def _finished(result: Plan, job: objects.Job, live: list[Object], has_finalizer: bool, now: datetime) -> Plan:
    """The plan for a Job in a terminal phase: the attempts still live are stopped (for the Job's reason), the
    finalizer is lifted once none is, the Job is deleted ``ttlSecondsAfterFinished`` after it finished (once no attempt
    is left to stop), and it is woken when the checkpoints it keeps are due to leave ``status.storage``."""
    status = result.status
    result.stop = [(a, job.status.reason or "Superseded") for a in live]
    result.remove_finalizer = has_finalizer and not live
    _ttl(result, job.spec, job.status.completion_time, now)
    retained_until = recovering.retention_end(job.spec, status)
    if retained_until is not None and now < retained_until and status.get("checkpoint"):
        result.wake_at(now, retained_until)  # the kept checkpoints leave status.storage then
    return result


def _restart_requested(status: Object, requested: str | None) -> bool:
    """Whether ``requested`` (the Job's restart-requested-at annotation) asks for a restart not handled yet; if it
    does, it is recorded as handled in ``status["handledRequests"]``. That record is left out of ``status`` while it
    holds nothing."""
    # The requests handled so far, as this status will record them.
    handled: dict[str, str] = status.setdefault("handledRequests", {})
    if requested and handled.get("restart") != requested:
        handled["restart"] = requested
        return True
    if not handled:
        status.pop("handledRequests")
    return False


def _failure(spec: JobSpec, slots: Slots, raw: Slots, attempts: list[Object]) -> tuple[str, str] | None:
    """The (reason, message) the Job fails with under its failure limits, the first that applies in this order: an
    attempt ended for a permanent reason, more attempts failed than ``backoffLimit``, capacity was lost too often
    (:func:`_capacity_lost`), a gang failed to assemble too often. None: the Job is within every limit."""
    permanent = _permanent_failure(raw)
    if permanent is not None:
        return permanent
    if slots.failed > spec.backoff_limit:
        last = slots.last_failed()
        detail = (slots.view(last).status.message or "") if last is not None else ""
        message = f"{slots.failed} attempts failed; backoffLimit is {spec.backoff_limit}. Last failure: {detail}"
        return "BackoffLimitExceeded", message.strip()
    lost = _capacity_lost(spec, slots)
    if lost is not None:
        return lost
    if gangs.is_gang(spec):
        return gangplanning.assembly_exhausted(spec, attempts)
    return None


def _capacity_lost(spec: JobSpec, slots: Slots) -> tuple[str, str] | None:
    """The (reason, message) the Job fails with for capacity its attempts lost: an unfinished index lost it
    ``recovery.maxAttempts`` times before running ``recovery.minProgressDuration`` (``RecoveryExhausted``), or, with
    ``recovery.onInterruption: Fail``, any attempt lost it (``Interrupted``). None: neither happened."""
    max_lost = spec.recovery.max_attempts
    progress = recovering.min_progress(spec)
    for index in range(spec.completions):
        slot = slots.slot(index)
        lost = recovering.counted_losses(slot, progress)
        if not slot.succeeded and not slot.live and lost >= max_lost:
            message = (
                f"Index {index} lost its capacity {lost} times before running {spec.recovery.min_progress_duration}; "
                f"recovery.maxAttempts is {max_lost}."
            )
            return "RecoveryExhausted", message
    if spec.recovery.on_interruption == "Fail":
        lost_attempt = recovering.interrupted(slots)
        if lost_attempt is not None:
            lost_view = slots.view(lost_attempt)
            message = (
                f"Attempt {lost_view.metadata.name} lost its capacity ({lost_view.status.reason or 'NodeLost'}) and "
                "spec.recovery.onInterruption is Fail."
            )
            return "Interrupted", message
    return None


def _advance(
    result: Plan,
    obj: Object,
    job: objects.Job,
    attempts: list[Object],
    slots: Slots,
    raw: Slots,
    live: list[Object],
    lookup: pinning.Lookup,
    scales: TimeScales,
    now: datetime,
) -> Plan:
    """The plan for a Job that no rule before stopped, suspended or finished (``obj`` is the Job as stored, ``job``
    its view): attempts are created for the indexes that need one, checkpoint requests are passed on to the live
    attempts, a gang's epoch is settled, and the phase and funding are derived. When what new attempts would read
    cannot be pinned, nothing is created: the Job fails, or waits saying why."""
    spec, status = job.spec, result.status
    gang = gangs.is_gang(spec)
    indexes = _indexes_to_start(slots, spec.completions, spec.parallelism)
    if indexes:
        pins = pinning.pin(spec, lookup, status)
        if isinstance(pins, pinning.Blocked):
            if pins.final:
                return _finish(result, raw, now, "Failed", pins.reason, pins.message)
            conditions.explain(status, pins.reason, pins.message)
            _derive_phase(status, slots, live, False)
            return result
        result.create = [
            attempt_for(obj, index, slots.slot(index).next_number, pins, recovering.carried(spec, slots.slot(index)))
            for index in indexes
        ]
        if gang:
            # The Job's spec as stored, for what copies or sizes it as JSON (a gang epoch's members).
            wire_spec: Object = obj["spec"]
            result.create = gangplanning.start_epoch(result.create[0], wire_spec, attempts, slots.slot(0).next_number)
    # The requests handled so far, as this status will record them (see _restart_requested).
    handled: dict[str, str] = status.get("handledRequests", {})
    checkpoint_patches = recovering.requests(job, live, handled.get("checkpoint") if gang else None)
    result.patch += checkpoint_patches
    if any("checkpointRequest" in patch for _, patch in checkpoint_patches):
        handled["checkpoint"] = job.metadata.annotations[labels.CHECKPOINT_REQUESTED_AT]
        status["handledRequests"] = handled
    if gang:
        settled = gangplanning.settle(spec, attempts, now, scales)
        result.stop += settled.stop
        result.patch += settled.patch
        result.wake_at(now, settled.wake_at)
    _derive_phase(status, slots, live, bool(result.create))
    funding.report(status, live, now)
    return result


def _nothing(plural: str, name: str) -> Object | None:
    return None


def _blocked(result: Plan, raw: Slots, now: datetime, blocked: pinning.Blocked, generation: int) -> Plan:
    """Admission cannot pin what the Job reads: it fails, or waits Pending saying for what."""
    if blocked.final:
        return _finish(result, raw, now, "Failed", blocked.reason, blocked.message)
    status = result.status
    status["phase"] = "Pending"
    conditions.set(status, "Admitted", "False", blocked.reason, blocked.message, now, generation)
    conditions.explain(status, blocked.reason, blocked.message)
    return result


def _permanent_failure(slots: Slots) -> tuple[str, str] | None:
    for attempt in slots.all():
        read = slots.view(attempt)
        reason = read.status.reason
        if read.status.phase == "Failed" and reason is not None and reason in PERMANENT_REASONS:
            return reason, read.status.message or ""
        stop = read.spec.stop
        if read.status.phase == "Stopped" and stop is not None and stop.reason in PERMANENT_REASONS:
            return stop.reason, statusreasons.get(stop.reason).summary
    return None


def _count(status: Object, spec: JobSpec, slots: Slots, raw: Slots, image: ImageStatus | None) -> None:
    """The counts, times and placement ``status`` reports, from the attempts; ``image`` is the Job's as stored."""
    succeeded = slots.succeeded_indexes()
    status["succeeded"] = len(succeeded)
    status["failed"] = slots.failed
    status["active"] = len(raw.live())
    status["completedIndexes"] = ranges.compress(succeeded)
    numbers = [slots.view(a).spec.number for a in slots.live()]
    lasts = [slots.view(s.last) for s in slots.by_index.values() if s.last]
    last = max(lasts, key=_created, default=None)
    current = max(numbers, default=(last.spec.number if last is not None else 0) or None)
    counts: Object = {"total": raw.total, "max": spec.recovery.max_attempts}
    if current:
        counts["current"] = current
    status["attempts"] = counts
    started = [s for a in slots.all() if (s := slots.view(a).status.start_time)]
    if started and not status.get("startTime"):
        status["startTime"] = min(started)
    _pin_image(status, image, slots)
    placed = [a for a in slots.all() if slots.view(a).status.placement is not None]
    if placed:
        # Copied as the attempt stores it.
        placement: Object = max(placed, key=lambda a: _created(slots.view(a)))["status"]["placement"]
        status["placement"] = {
            k: placement[k]
            for k in ("offering", "regionClass", "interruptible", "rateUSDPerHour", "warmReuse")
            if k in placement
        }


def _pin_image(status: Object, image: ImageStatus | None, slots: Slots) -> None:
    """The first digest an agent resolved for the Job's image becomes the Job's (``status.image.digest``): every
    later attempt pulls that digest, so a tag moved meanwhile never changes what a replacement runs (ADR 0042)."""
    if image is None or (image.digest and image.user):
        return
    reads = map(slots.view, slots.all())
    resolved = [(_created(read), seen) for read in reads if (seen := read.status.image) is not None and seen.digest]
    if resolved:
        _, seen = min(resolved, key=lambda found: found[0])
        status["image"] = {**status["image"], "digest": image.digest or seen.digest, "user": seen.user}


def _admit(status: Object, spec: JobSpec, generation: int, now: datetime) -> None:
    status["phase"] = "Queued"
    image = spec.image or spec.image_ref
    if image:
        status["image"] = {"reference": image}
        try:
            digest = imagerefs.parse(image).digest
        except imagerefs.InvalidReference:
            digest = None
        if digest:
            status["image"]["digest"] = digest
    conditions.set(status, "Admitted", "True", "Admitted", "Admitted.", now, generation)


def _timeout_clock(status: Object, spec: JobSpec, slots: Slots, now: datetime) -> None:
    """Start the timeout clock at the first Provisioning and keep ``timeoutTime`` in step with the spec."""
    if not status.get("timeoutStartTime"):
        scheduled = [s for a in slots.all() if (s := slots.view(a).status.scheduled_time)]
        if not scheduled:
            return
        status["timeoutStartTime"] = min(scheduled)
    if not spec.timeout:
        status.pop("timeoutTime", None)
        return
    start = units.parse_time(status["timeoutStartTime"])
    suspended = units.parse_duration(status.get("suspendedDuration") or "0s")
    since = suspending.suspended_since(status)
    if since is not None:
        suspended += max(now - since, timedelta(0))
    status["timeoutTime"] = units.format_time(start + units.parse_duration(spec.timeout) + suspended)


def _queue_deadline(status: Object, spec: JobSpec) -> datetime | None:
    if status.get("timeoutStartTime"):
        return None
    timeout = units.parse_duration(spec.placement.queue_timeout)
    admitted = conditions.get(status, "Admitted")
    since = units.time_or_none((admitted or {}).get("lastTransitionTime"))
    if not timeout or since is None:
        return None
    return since + timeout


def _finish(result: Plan, slots: Slots, now: datetime, phase_: str, reason: str, message: str) -> Plan:
    status = result.status
    status["phase"] = phase_
    status["completionTime"] = units.format_time(now)
    status["active"] = len(slots.live())
    if phase_ == "Succeeded":
        conditions.set(status, "Complete", "True", reason, message, now)
        conditions.explain(status, None, None)
    else:
        conditions.set(status, "Failed", "True", reason, message, now)
        conditions.explain(status, reason, message)
    result.stop = [(a, reason) for a in slots.live()]
    return result


def _indexes_to_start(slots: Slots, completions: int, parallelism: int) -> list[int]:
    room = parallelism - len(slots.live())
    out: list[int] = []
    for index in range(completions):
        if room <= 0:
            break
        slot = slots.slot(index)
        if slot.succeeded or slot.live:
            continue
        out.append(index)
        room -= 1
    return out


def _derive_phase(status: Object, slots: Slots, live: list[Object], creating: bool) -> None:
    running = {phase_of(a) for a in live}
    recovering = any(slot.recovering for slot in slots.by_index.values())
    # Once the Job has run, the gap between one index ending and the next starting is still Running:
    # "Provisioning" and "Queued" are for capacity not there yet, "Recovering" for capacity lost.
    if "Running" in running or (status.get("startTime") and not recovering and (live or creating)):
        status["phase"] = "Running"
        conditions.explain(status, None, None)
    elif running & BOUND:
        status["phase"] = "Recovering" if recovering else "Provisioning"
        conditions.explain(status, None, None)
    elif live or creating:
        status["phase"] = "Recovering" if recovering else "Queued"
        waiting = _unschedulable_message(live)
        conditions.explain(status, "Unschedulable" if waiting else None, waiting or None)
    status["active"] = len(live)


def _unschedulable_message(live: list[Object]) -> str:
    for attempt in live:
        attempt_status = view(attempt).status
        if attempt_status.reason == "Unschedulable" and attempt_status.message:
            return attempt_status.message
    return ""


def _ttl(result: Plan, spec: JobSpec, completion_time: str | None, now: datetime) -> None:
    ttl = spec.ttl_seconds_after_finished
    finished = units.time_or_none(completion_time)
    if ttl is None or finished is None or result.stop:
        return
    deadline = finished + timedelta(seconds=ttl)
    if now >= deadline:
        result.delete_job = True
    else:
        result.wake_at(now, deadline)


def _created(attempt: objects.Attempt) -> tuple[str, int]:
    return (attempt.metadata.creation_timestamp or "", attempt.spec.number)
