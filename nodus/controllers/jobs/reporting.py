"""What the Job's status says about its data plane, read off its attempts.

Agents report per attempt (``status.outputs``, ``inputs``, ``inputsReadyTime``, ``source``,
``progress``, ``unitMetrics``, ``volumes``); the Job's status is derived from them here, on every
reconcile, so it is always what the attempts say (level-triggered) and never needs its own history:

* ``outputs``: the outputs of the attempt that succeeded, per index (an index succeeds once), with
  their sink loads and ``committedTime`` (the attempt's finish: storage is billed from then);
  ``storage.bytes`` is their total plus the checkpoints kept (``recovering.retained_bytes``).
* ``inputs``: the admission pins, plus the digest the first attempt verified for a URL or bucket
  input declared without one, which then pins it for every later attempt.
* ``source.commit``: the commit the first attempt resolved; later attempts check it out by sha.
* ``progress`` and ``unitMetrics``: the newest attempt that reported any; the cost per unit is the
  attempt's frozen rate times its running time, divided by its units, computed when the count of units
  moves (and at the end), not on every reconcile.
* ``volumes``: read-only mounts' pinned revisions, and the revisions writable mounts wrote.
* ``cost``: the sum of the attempts' ``status.cost`` (each a display copy of the ledger written by
  the billing controller): totals and segments add up, the rate is that of capacity still billing,
  the funded edge is the earliest of the live attempts', and it is ``final`` once every attempt's is
  and none will start again (the Job is terminal). Storage is charged by the storage billing
  controller, which writes ``bySegment.storageUSD`` (a copy of the ledger) and ``storage.billedBytes``:
  the total includes the former, kept as that controller wrote it, and the cost is not ``final``
  while bytes are billed (ADR 0023).
"""

from __future__ import annotations

from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from nodus.apimachinery import money, units
from nodus.controllers.jobs import recovering
from nodus.controllers.jobs.slots import Slots, index_of, phase

Object = dict[str, Any]
DEFAULT_SOURCE_PATH = "/workspace"


def collect(status: Object, spec: Object, slots: Slots, now: datetime) -> None:
    """Fold what the attempts reported into the Job's ``status`` (in place)."""
    attempts = sorted((a for s in slots.by_index.values() for a in s.attempts), key=_started)
    _outputs(status, attempts)
    _storage(status, recovering.retained_bytes(slots, spec, status, now))
    _inputs(status, attempts)
    _source(status, spec, attempts)
    _progress(status, attempts, now)
    _volumes(status, attempts)
    _cost(status, spec, attempts)


def pinned_source(spec: Object, status: Object) -> Object | None:
    """The ``source`` an Attempt gets: the git ref resolved to the pinned commit once there is one."""
    source = spec.get("source") or {}
    path = (source.get("git") or {}).get("path") or spec.get("workingDir") or DEFAULT_SOURCE_PATH
    if isinstance(git := source.get("git"), dict):
        commit = (status.get("source") or {}).get("commit")
        return {"git": {"repo": git["repo"], "ref": commit or git.get("ref") or ""}, "path": path}
    if source.get("blob"):
        return {"blob": source["blob"], "path": spec.get("workingDir") or DEFAULT_SOURCE_PATH}
    return None


def _started(attempt: Object) -> tuple[str, str]:
    meta = attempt.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))


def _outputs(status: Object, attempts: list[Object]) -> None:
    outputs: list[Object] = []
    for attempt in attempts:
        if phase(attempt) != "Succeeded":
            continue
        attempt_status = attempt.get("status") or {}
        committed = {"committedTime": attempt_status["finishTime"]} if attempt_status.get("finishTime") else {}
        for output in attempt_status.get("outputs") or []:
            outputs.append({**output, **committed, "index": index_of(attempt)})
    if not outputs:
        return
    outputs.sort(key=lambda o: (o["index"], str(o.get("name")), int(o.get("rank") or 0)))
    status["outputs"] = outputs


def _storage(status: Object, checkpoint_bytes: int) -> None:
    total = sum(int(o.get("size") or 0) for o in status.get("outputs") or []) + checkpoint_bytes
    if total or status.get("storage"):
        status["storage"] = {**(status.get("storage") or {}), "bytes": total}


def _inputs(status: Object, attempts: list[Object]) -> None:
    pinned = {str(i.get("name")): i for i in status.get("inputs") or []}
    ready: list[str] = []
    for attempt in attempts:
        attempt_status = attempt.get("status") or {}
        if attempt_status.get("inputsReadyTime"):
            ready.append(str(attempt_status["inputsReadyTime"]))
        for verified in attempt_status.get("inputs") or []:
            name = str(verified.get("name"))
            entry = pinned.setdefault(name, {"name": name})
            if verified.get("sha256") and not entry.get("sha256"):
                entry["sha256"] = verified["sha256"]
    if pinned:
        status["inputs"] = sorted(pinned.values(), key=lambda i: str(i["name"]))
    if ready and not status.get("inputsReadyTime"):
        status["inputsReadyTime"] = min(ready)


def _source(status: Object, spec: Object, attempts: list[Object]) -> None:
    source = spec.get("source") or {}
    if source.get("blob"):
        status["source"] = {"blob": source["blob"]}
        return
    if not source.get("git") or (status.get("source") or {}).get("commit"):
        return
    for attempt in attempts:
        commit = ((attempt.get("status") or {}).get("source") or {}).get("commit")
        if commit:
            status["source"] = {"commit": commit}
            return


def _progress(status: Object, attempts: list[Object], now: datetime) -> None:
    reporting = [a for a in attempts if (a.get("status") or {}).get("progress")]
    if not reporting:
        return
    newest = reporting[-1]
    attempt_status = newest.get("status") or {}
    status["progress"] = attempt_status["progress"]
    metrics = dict(attempt_status.get("unitMetrics") or {})
    shown = status.get("unitMetrics") or {}
    if (
        not attempt_status.get("finishTime")
        and shown.get("costPerUnitUSD")
        and shown.get("completed") == metrics.get("completed")
    ):
        # No unit done since it was computed: kept, or every reconcile would write a new figure as the clock moves.
        cost: str | None = str(shown["costPerUnitUSD"])
    else:
        cost = _cost_per_unit(attempt_status, int(metrics.get("completed") or 0), now)
    if cost is not None:
        metrics["costPerUnitUSD"] = cost
    if metrics:
        status["unitMetrics"] = metrics


def _cost_per_unit(attempt_status: Object, completed: int, now: datetime) -> str | None:
    rate = (attempt_status.get("placement") or {}).get("rateUSDPerHour")
    started = units.time_or_none(attempt_status.get("startTime"))
    if not rate or started is None or completed <= 0:
        return None
    ended = units.time_or_none(attempt_status.get("finishTime")) or now
    try:
        hours = Decimal(max((ended - started).total_seconds(), 0.0)) / Decimal(3600)
        return str((Decimal(str(rate)) * hours / completed).quantize(money.MICRO, rounding=ROUND_HALF_UP))
    except InvalidOperation:
        return None


def _volumes(status: Object, attempts: list[Object]) -> None:
    written = [
        volume
        for attempt in attempts
        if phase(attempt) == "Succeeded"
        for volume in (attempt.get("status") or {}).get("volumes") or []
    ]
    if not written:
        return
    entries = {(str(v.get("volume")), str(v.get("mountPath"))): v for v in status.get("volumes") or []}
    for volume in written:
        entries[(str(volume.get("volume")), str(volume.get("mountPath")))] = volume
    status["volumes"] = sorted(entries.values(), key=lambda v: (str(v.get("mountPath")), str(v.get("volume"))))


_SEGMENTS = ("bootUSD", "runningUSD", "restoreUSD", "teardownUSD")
_TERMINAL_JOB = frozenset({"Succeeded", "Failed", "Cancelled"})


def _cost(status: Object, spec: Object, attempts: list[Object]) -> None:
    costs = [c for a in attempts if (c := (a.get("status") or {}).get("cost"))]
    limit = spec.get("maxCostUSD")
    if not costs and limit is None:
        return
    total, held, rate = Decimal(0), Decimal(0), Decimal(0)
    segments: dict[str, Decimal] = {}
    # The storage billing controller's copy of what storage was charged: kept, and part of the total.
    stored = ((status.get("cost") or {}).get("bySegment") or {}).get("storageUSD")
    if stored is not None:
        segments["storageUSD"] = Decimal(str(stored))
        total += segments["storageUSD"]
    covered: set[str] = set()
    funded: list[str] = []
    for cost in costs:
        total += Decimal(str(cost.get("totalUSD") or "0"))
        held += Decimal(str(cost.get("heldUSD") or "0"))
        rate += Decimal(str(cost.get("rateUSDPerHour") or "0"))
        for name in _SEGMENTS:
            if name in (cost.get("bySegment") or {}):
                segments[name] = segments.get(name, Decimal(0)) + Decimal(str(cost["bySegment"][name]))
        covered.update((cost.get("bySegment") or {}).get("coveredByNodus") or [])
        if cost.get("fundedUntilTime"):
            funded.append(str(cost["fundedUntilTime"]))
    shown: Object = {"totalUSD": money.text(total), "heldUSD": money.text(held), "rateUSDPerHour": money.text(rate)}
    by_segment: Object = {name: money.text(amount) for name, amount in segments.items()}
    if covered:
        by_segment["coveredByNodus"] = sorted(covered)
    if by_segment:
        shown["bySegment"] = by_segment
    if funded:
        shown["fundedUntilTime"] = min(funded)
    if limit is not None:
        shown["limitUSD"] = str(limit)
    billed = [a for a in attempts if (a.get("status") or {}).get("scheduledTime")]
    storing = int((status.get("storage") or {}).get("billedBytes") or 0) > 0
    shown["final"] = (
        status.get("phase") in _TERMINAL_JOB
        and not storing
        and all(((a.get("status") or {}).get("cost") or {}).get("final") for a in billed)
    )
    status["cost"] = shown
