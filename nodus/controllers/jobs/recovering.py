"""How a slot's progress survives lost capacity: what a new attempt restores, which losses count, and what
the Job's status says about checkpoints (ADR 0024).

Pure functions over the attempts of a Job, read as they are (level-triggered); ``planning`` calls them.

* **Restore** (``continuity: Checkpointed``): a new attempt of an index restores the newest checkpoint any
  earlier attempt of that index committed (highest ``seq``; a checkpoint is committed once an Attempt's
  ``status.checkpoint`` names its manifest, and an ended attempt's checkpoint can no longer change, so a
  host cut off from the API server cannot commit behind the replacement's back). This holds for every
  cause of a new attempt: lost capacity, a customer failure, a suspend, a requested restart.
* **Cursor** (``Restartable``): the newest cursor the program reported (``status.resumeCursor``), or the
  one the previous attempt was given, reaches the program as ``NODUS_RESUME_CURSOR``.
* **Ephemeral**: a new attempt starts from nothing.
* **Counting losses** (ADR 0046 §4, ADR 0024): an attempt that ran at least
  ``recovery.minProgressDuration`` before its capacity was lost made progress, and its loss does not use
  up ``recovery.maxAttempts``; only losses without progress count. A long Job on flaky capacity is thus
  not failed for being long, while a slot whose hosts die before the program gets anywhere still is.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects, phases
from nodus.apis.v1.attempt import AttemptCheckpoint
from nodus.apis.v1.jobspec import JobSpec
from nodus.controllers.jobs.slots import Slot, Slots, phase_of, view

Object = dict[str, Any]


def min_progress(spec: JobSpec) -> timedelta:
    return units.parse_duration(spec.recovery.min_progress_duration)


def made_progress(attempt: objects.Attempt, threshold: timedelta) -> bool:
    """The attempt's program ran at least ``threshold`` (from its start to its end)."""
    status = attempt.status
    started = units.time_or_none(status.start_time)
    finished = units.time_or_none(status.finish_time)
    return started is not None and finished is not None and finished - started >= threshold


def counted_losses(slot: Slot, threshold: timedelta) -> int:
    """The slot's losses that count against ``recovery.maxAttempts``: those without progress."""
    return sum(1 for a in slot.attempts if slot.phase(a) == "Lost" and not made_progress(slot.view(a), threshold))


def _newest_committed(slot: Slot) -> tuple[objects.Attempt, AttemptCheckpoint] | None:
    """The attempt of the slot that committed the newest checkpoint (highest seq), and that checkpoint."""
    best: tuple[objects.Attempt, AttemptCheckpoint] | None = None
    for attempt in slot.attempts:
        read = slot.view(attempt)
        committed = read.status.checkpoint
        if committed is None or not committed.manifest or not committed.seq:
            continue
        if best is None or committed.seq > (best[1].seq or 0):
            best = (read, committed)
    # (A restored checkpoint needs no second look: the attempt that committed it is in the slot too.)
    return best


def latest_checkpoint(slot: Slot) -> Object | None:
    """The newest committed checkpoint of the slot, as a ``CheckpointRef`` (seq, manifest, size, time, attempt)."""
    newest = _newest_committed(slot)
    if newest is None:
        return None
    attempt, committed = newest
    ref: Object = {"seq": committed.seq, "manifest": committed.manifest, "attempt": attempt.metadata.name}
    if committed.size is not None:
        ref["size"] = committed.size
    if committed.time is not None:
        ref["time"] = committed.time
    return ref


def latest_cursor(slot: Slot) -> str | None:
    """The newest progress cursor of the slot: reported by an attempt, else given to one."""
    for read in sorted(map(slot.view, slot.attempts), key=_number, reverse=True):
        if read.status.resume_cursor:
            return read.status.resume_cursor
        if read.spec.resume_cursor:
            return read.spec.resume_cursor
    return None


def carried(spec: JobSpec, slot: Slot) -> Object:
    """What a new attempt of ``slot`` starts from (``restore`` or ``resumeCursor``), and the offering it
    should avoid (``avoidOfferings``) when the previous attempt was preempted there."""
    out = _avoid(slot)
    mode = spec.recovery.continuity
    if mode == "Checkpointed" and (restore := latest_checkpoint(slot)) is not None:
        out["restore"] = restore
    elif mode == "Restartable" and (cursor := latest_cursor(slot)) is not None:
        out["resumeCursor"] = cursor
    return out


def _avoid(slot: Slot) -> Object:
    """Interruptible capacity being reclaimed tends to be reclaimed again, and a provider out of capacity for an
    offering stays so for a while: a replacement prefers elsewhere."""
    if not slot.attempts:
        return {}
    status = max(map(slot.view, slot.attempts), key=_number).status
    offering = status.placement.offering if status.placement is not None else None
    if status.phase == "Lost" and status.reason in ("Preempted", "CapacityBusy") and offering:
        return {"avoidOfferings": [offering]}
    return {}


def retention_end(spec: JobSpec, status: Object) -> datetime | None:
    """When a finished Job's checkpoints stop being kept: ``completionTime`` (of ``status``, the status being
    written) + ``retainAfterFinish``."""
    finished = units.time_or_none(status.get("completionTime"))
    if finished is None:
        return None
    return finished + units.parse_duration(spec.recovery.checkpoint.retain_after_finish)


def retained_bytes(slots: Slots, spec: JobSpec | Object, status: Object, now: datetime) -> int:
    """The bytes of the checkpoints Nodus keeps: the latest of each index, until the retention ends. ``spec``
    is the Job's (its view, or the JSON ``reporting`` is given)."""
    if isinstance(spec, dict):
        spec = objects.read(objects.Job, {"spec": spec}).spec
    end = retention_end(spec, status)
    if end is not None and now >= end:
        return 0
    newest = (_newest_committed(slot) for slot in slots.by_index.values())
    return sum(found[1].size or 0 for found in newest if found is not None)


def interrupted(slots: Slots) -> Object | None:
    """A lost attempt not followed by a newer one in its slot (for ``onInterruption: Fail``)."""
    for slot in slots.by_index.values():
        if slot.succeeded or slot.live or not slot.attempts:
            continue
        last = max(slot.attempts, key=lambda a: slot.view(a).spec.number)
        if slot.phase(last) == "Lost":
            return last
    return None


def report(status: Object, slots: Slots) -> None:
    """``status.checkpoint``: the newest committed checkpoint of the Job, the cadence in use and what the
    current attempt restored (one Job-level view; per index, each Attempt has its own)."""
    attempts = slots.all()
    reads = [slots.view(a) for a in attempts]
    committed = [c for read in reads if (c := read.status.checkpoint) is not None and c.manifest]
    live = [read for read in reads if (read.status.phase or "Pending") not in phases.ATTEMPT_FINISHED]
    current = max(live or reads, key=_created, default=None)
    out: Object = {}
    if committed:
        newest = max(committed, key=lambda c: c.time or "")
        out.update(
            {k: v for k, v in (("seq", newest.seq), ("size", newest.size), ("time", newest.time)) if v is not None}
        )
    if current is not None:
        if current.status.checkpoint is not None and current.status.checkpoint.interval:
            out["interval"] = current.status.checkpoint.interval
        if current.spec.restore is not None and current.spec.restore.seq:
            out["restoredFromSeq"] = current.spec.restore.seq
    if out:
        status["checkpoint"] = out
    else:
        status.pop("checkpoint", None)


def requests(job: objects.Job, live: list[Object], handled: str | None = None) -> list[tuple[Object, Object]]:
    """Spec patches that pass the Job's wishes on to running attempts: a requested checkpoint
    (``nodus.dev/checkpoint-requested-at``) unless it is ``handled`` already (a gang's ranks also get the
    controller's own requests, which must not bring an old one back), and an edited checkpoint ``interval``."""
    requested = job.metadata.annotations.get(labels.CHECKPOINT_REQUESTED_AT)
    if handled is not None and requested == handled:
        requested = None
    interval = job.spec.recovery.checkpoint.interval
    out: list[tuple[Object, Object]] = []
    for attempt in live:
        attempt_spec = view(attempt).spec
        if attempt_spec.stop is not None:
            continue
        patch: Object = {}
        if requested and attempt_spec.checkpoint_request != requested and phase_of(attempt) == "Running":
            patch["checkpointRequest"] = requested
        if attempt_spec.recovery is not None and attempt_spec.recovery.checkpoint.interval != interval:
            patch["recovery"] = {"checkpoint": {"interval": interval}}
        if patch:
            out.append((attempt, patch))
    return out


def _created(attempt: objects.Attempt) -> tuple[str, int]:
    return (attempt.metadata.creation_timestamp or "", attempt.spec.number)


def _number(attempt: objects.Attempt) -> int:
    return attempt.spec.number
