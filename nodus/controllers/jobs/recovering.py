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
* **Counting losses** (DECISIONS 4, ADR 0024): an attempt that ran at least
  ``recovery.minProgressDuration`` before its capacity was lost made progress, and its loss does not use
  up ``recovery.maxAttempts``; only losses without progress count. A long Job on flaky capacity is thus
  not failed for being long, while a slot whose hosts die before the program gets anywhere still is.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.controllers.jobs.slots import Slot, Slots, is_live, number_of, phase

Object = dict[str, Any]

CHECKPOINT_ANNOTATION = "nodus.dev/checkpoint-requested-at"
DEFAULT_MIN_PROGRESS = "2m"
DEFAULT_RETAIN = "168h"


def continuity(spec: Object) -> str:
    return str((spec.get("recovery") or {}).get("continuity") or "Checkpointed")


def min_progress(spec: Object) -> timedelta:
    return units.parse_duration(str((spec.get("recovery") or {}).get("minProgressDuration") or DEFAULT_MIN_PROGRESS))


def made_progress(attempt: Object, threshold: timedelta) -> bool:
    """The attempt's program ran at least ``threshold`` (from its start to its end)."""
    status = attempt.get("status") or {}
    started = units.time_or_none(status.get("startTime"))
    finished = units.time_or_none(status.get("finishTime"))
    return started is not None and finished is not None and finished - started >= threshold


def counted_losses(slot: Slot, threshold: timedelta) -> int:
    """The slot's losses that count against ``recovery.maxAttempts``: those without progress."""
    return sum(1 for a in slot.attempts if phase(a) == "Lost" and not made_progress(a, threshold))


def latest_checkpoint(slot: Slot) -> Object | None:
    """The newest committed checkpoint of the slot, as a ``CheckpointRef`` (seq, manifest, size, time, attempt)."""
    best: Object | None = None
    for attempt in slot.attempts:
        committed = (attempt.get("status") or {}).get("checkpoint") or {}
        if not committed.get("manifest") or not committed.get("seq"):
            continue
        if best is None or int(committed["seq"]) > int(best["seq"]):
            best = {
                "seq": int(committed["seq"]),
                "manifest": committed["manifest"],
                "attempt": attempt["metadata"]["name"],
                **{k: committed[k] for k in ("size", "time") if committed.get(k) is not None},
            }
    # (A restored checkpoint needs no second look: the attempt that committed it is in the slot too.)
    return best


def latest_cursor(slot: Slot) -> str | None:
    """The newest progress cursor of the slot: reported by an attempt, else given to one."""
    for attempt in sorted(slot.attempts, key=number_of, reverse=True):
        status, spec = attempt.get("status") or {}, attempt.get("spec") or {}
        if status.get("resumeCursor"):
            return str(status["resumeCursor"])
        if spec.get("resumeCursor"):
            return str(spec["resumeCursor"])
    return None


def carried(spec: Object, slot: Slot) -> Object:
    """What a new attempt of ``slot`` starts from (``restore`` or ``resumeCursor``), and the offering it
    should avoid (``avoidOfferings``) when the previous attempt was preempted there."""
    out = _avoid(slot)
    mode = continuity(spec)
    if mode == "Checkpointed" and (restore := latest_checkpoint(slot)) is not None:
        out["restore"] = restore
    elif mode == "Restartable" and (cursor := latest_cursor(slot)) is not None:
        out["resumeCursor"] = cursor
    return out


def _avoid(slot: Slot) -> Object:
    """Interruptible capacity being reclaimed tends to be reclaimed again: a replacement prefers elsewhere."""
    if not slot.attempts:
        return {}
    last = max(slot.attempts, key=number_of)
    status = last.get("status") or {}
    offering = (status.get("placement") or {}).get("offering")
    if phase(last) == "Lost" and status.get("reason") == "Preempted" and offering:
        return {"avoidOfferings": [offering]}
    return {}


def retention_end(spec: Object, status: Object) -> datetime | None:
    """When a finished Job's checkpoints stop being kept: ``completionTime`` + ``retainAfterFinish``."""
    finished = units.time_or_none(status.get("completionTime"))
    if finished is None:
        return None
    policy = (spec.get("recovery") or {}).get("checkpoint") or {}
    return finished + units.parse_duration(str(policy.get("retainAfterFinish") or DEFAULT_RETAIN))


def retained_bytes(slots: Slots, spec: Object, status: Object, now: datetime) -> int:
    """The bytes of the checkpoints Nodus keeps: the latest of each index, until the retention ends."""
    end = retention_end(spec, status)
    if end is not None and now >= end:
        return 0
    return sum(int((latest_checkpoint(slot) or {}).get("size") or 0) for slot in slots.by_index.values())


def interrupted(slots: Slots) -> Object | None:
    """A lost attempt not followed by a newer one in its slot (for ``onInterruption: Fail``)."""
    for slot in slots.by_index.values():
        if slot.succeeded or slot.live or not slot.attempts:
            continue
        last = max(slot.attempts, key=number_of)
        if phase(last) == "Lost":
            return last
    return None


def report(status: Object, slots: Slots) -> None:
    """``status.checkpoint``: the newest committed checkpoint of the Job, the cadence in use and what the
    current attempt restored (DECISIONS: one Job-level view; per index, each Attempt has its own)."""
    attempts = [a for s in slots.by_index.values() for a in s.attempts]
    committed = [c for a in attempts if (c := (a.get("status") or {}).get("checkpoint") or {}).get("manifest")]
    live = [a for a in attempts if is_live(a)]
    current = max(live or attempts, key=_created, default=None)
    out: Object = {}
    if committed:
        newest = max(committed, key=lambda c: str(c.get("time") or ""))
        out.update({k: newest[k] for k in ("seq", "size", "time") if newest.get(k) is not None})
    if current is not None:
        interval = ((current.get("status") or {}).get("checkpoint") or {}).get("interval")
        if interval:
            out["interval"] = interval
        restored = (current.get("spec") or {}).get("restore") or {}
        if restored.get("seq"):
            out["restoredFromSeq"] = int(restored["seq"])
    if out:
        status["checkpoint"] = out
    else:
        status.pop("checkpoint", None)


def requests(job: Object, live: list[Object], handled: str | None = None) -> list[tuple[Object, Object]]:
    """Spec patches that pass the Job's wishes on to running attempts: a requested checkpoint
    (``nodus.dev/checkpoint-requested-at``) unless it is ``handled`` already (a gang's ranks also get the
    controller's own requests, which must not bring an old one back), and an edited checkpoint ``interval``."""
    spec = job.get("spec") or {}
    requested = ((job.get("metadata") or {}).get("annotations") or {}).get(CHECKPOINT_ANNOTATION)
    if handled is not None and requested == handled:
        requested = None
    interval = ((spec.get("recovery") or {}).get("checkpoint") or {}).get("interval")
    out: list[tuple[Object, Object]] = []
    for attempt in live:
        attempt_spec = attempt.get("spec") or {}
        if attempt_spec.get("stop"):
            continue
        patch: Object = {}
        if requested and attempt_spec.get("checkpointRequest") != requested and phase(attempt) == "Running":
            patch["checkpointRequest"] = requested
        pinned = ((attempt_spec.get("recovery") or {}).get("checkpoint") or {}).get("interval")
        if interval and attempt_spec.get("recovery") and pinned != interval:
            patch["recovery"] = {"checkpoint": {"interval": interval}}
        if patch:
            out.append((attempt, patch))
    return out


def _created(attempt: Object) -> tuple[str, int]:
    return (str((attempt.get("metadata") or {}).get("creationTimestamp") or ""), number_of(attempt))
