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
from typing import Any, Final

from nodus.apimachinery import money, units
from nodus.apis.v1 import objects, phases
from nodus.apis.v1.attempt import AttemptStatus
from nodus.apis.v1.jobcost import Cost
from nodus.apis.v1.jobspec import JobSpec
from nodus.apis.v1.jobstatus import JobStatus, OutputStatus
from nodus.controllers.jobs import recovering, views
from nodus.controllers.jobs.slots import Slots

Object = dict[str, Any]
DEFAULT_SOURCE_PATH: Final = "/workspace"


def collect(status: Object, spec: JobSpec | Object, slots: Slots, now: datetime) -> None:
    """Fold what the attempts reported into the Job's ``status`` (the one being built, in place)."""
    job_spec = views.job_spec(spec)
    # What the status held when handed over (as stored, plus planning's counts): each step below writes
    # fields that no later step reads back from it.
    shown = views.job_status(status)
    attempts = sorted(views.attempts(a for s in slots.by_index.values() for a in s.attempts), key=_started)
    output_bytes = _outputs(status, shown, attempts)
    _storage(status, shown, output_bytes + recovering.retained_bytes(slots, job_spec, status, now))
    _inputs(status, shown, attempts)
    _source(status, shown, job_spec, attempts)
    _progress(status, shown, attempts, now)
    _volumes(status, shown, attempts)
    _cost(status, shown, job_spec, attempts)


def pinned_source(spec: JobSpec | Object, status: JobStatus | Object) -> Object | None:
    """The ``source`` an Attempt gets: the git ref resolved to the pinned commit once there is one."""
    job_spec, job_status = views.job_spec(spec), views.job_status(status)
    source, working_dir = job_spec.source, job_spec.working_dir or DEFAULT_SOURCE_PATH
    if source is None:
        return None
    if source.git is not None:
        commit = job_status.source.commit if job_status.source is not None else None
        git = {"repo": source.git.repo, "ref": commit or source.git.ref or ""}
        return {"git": git, "path": source.git.path or working_dir}
    if source.blob:
        return {"blob": source.blob, "path": working_dir}
    return None


def _started(attempt: objects.Attempt) -> tuple[str, str]:
    return (attempt.metadata.creation_timestamp or "", attempt.metadata.name)


def _succeeded(attempt: objects.Attempt) -> bool:
    return attempt.status.phase == "Succeeded"


def _outputs(status: Object, shown: JobStatus, attempts: list[objects.Attempt]) -> int:
    """Write the committed outputs (when an attempt succeeded); their bytes, or those of the outputs shown."""
    committed: list[tuple[int, OutputStatus, str | None]] = [
        (attempt.spec.index, output, attempt.status.finish_time)
        for attempt in attempts
        if _succeeded(attempt)
        for output in attempt.status.outputs or ()
    ]
    if not committed:
        return sum(output.size or 0 for output in shown.outputs or ())
    committed.sort(key=lambda c: (c[0], str(c[1].name), c[1].rank or 0))
    status["outputs"] = [
        {**output.to_json(), **({"committedTime": finished} if finished else {}), "index": index}
        for index, output, finished in committed
    ]
    return sum(output.size or 0 for _, output, _ in committed)


def _storage(status: Object, shown: JobStatus, total: int) -> None:
    if total or shown.storage is not None:
        status["storage"] = {**(shown.storage.to_json() if shown.storage is not None else {}), "bytes": total}


def _inputs(status: Object, shown: JobStatus, attempts: list[objects.Attempt]) -> None:
    pinned = {str(i.name): i.to_json() for i in shown.inputs or ()}
    for attempt in attempts:
        for verified in attempt.status.inputs or ():
            entry = pinned.setdefault(str(verified.name), {"name": str(verified.name)})
            if verified.sha256 and "sha256" not in entry:
                entry["sha256"] = verified.sha256
    if pinned:
        status["inputs"] = sorted(pinned.values(), key=lambda i: str(i["name"]))
    ready = [a.status.inputs_ready_time for a in attempts if a.status.inputs_ready_time]
    if ready and not shown.inputs_ready_time:
        status["inputsReadyTime"] = min(ready)


def _source(status: Object, shown: JobStatus, spec: JobSpec, attempts: list[objects.Attempt]) -> None:
    source = spec.source
    if source is not None and source.blob:
        status["source"] = {"blob": source.blob}
        return
    if source is None or source.git is None or (shown.source is not None and shown.source.commit):
        return
    for attempt in attempts:
        commit = attempt.status.source.commit if attempt.status.source is not None else None
        if commit:
            status["source"] = {"commit": commit}
            return


def _progress(status: Object, shown: JobStatus, attempts: list[objects.Attempt], now: datetime) -> None:
    reported = [
        (a.status, progress) for a in attempts if a.status.progress and (progress := a.status.progress.to_json())
    ]
    if not reported:
        return
    newest, status["progress"] = reported[-1]
    metrics = newest.unit_metrics.to_json() if newest.unit_metrics is not None else {}
    completed = newest.unit_metrics.completed if newest.unit_metrics is not None else None
    kept = shown.unit_metrics
    if not newest.finish_time and kept is not None and kept.cost_per_unit_usd and kept.completed == completed:
        # No unit done since it was computed: kept, or every reconcile would write a new figure as the clock moves.
        cost: str | None = kept.cost_per_unit_usd
    else:
        cost = _cost_per_unit(newest, completed or 0, now)
    if cost is not None:
        metrics["costPerUnitUSD"] = cost
    if metrics:
        status["unitMetrics"] = metrics


def _cost_per_unit(attempt: AttemptStatus, completed: int, now: datetime) -> str | None:
    rate = attempt.placement.rate_usd_per_hour if attempt.placement is not None else None
    started = units.time_or_none(attempt.start_time)
    if not rate or started is None or completed <= 0:
        return None
    ended = units.time_or_none(attempt.finish_time) or now
    try:
        hours = Decimal(max((ended - started).total_seconds(), 0.0)) / Decimal(3600)
        return str((Decimal(rate) * hours / completed).quantize(money.MICRO, rounding=ROUND_HALF_UP))
    except InvalidOperation:
        return None


def _volumes(status: Object, shown: JobStatus, attempts: list[objects.Attempt]) -> None:
    written = [volume for a in attempts if _succeeded(a) for volume in a.status.volumes or ()]
    if not written:
        return
    entries = {(str(v.volume), str(v.mount_path)): v for v in shown.volumes or ()}
    for volume in written:
        entries[(str(volume.volume), str(volume.mount_path))] = volume
    ordered = sorted(entries.values(), key=lambda v: (str(v.mount_path), str(v.volume)))
    status["volumes"] = [volume.to_json() for volume in ordered]


_SEGMENTS: Final = ("bootUSD", "runningUSD", "restoreUSD", "teardownUSD")


def _cost(status: Object, shown: JobStatus, spec: JobSpec, attempts: list[objects.Attempt]) -> None:
    costs = [a.status.cost for a in attempts if a.status.cost is not None]
    limit = spec.max_cost_usd
    if not costs and limit is None:
        return
    total, held, rate = Decimal(0), Decimal(0), Decimal(0)
    segments: dict[str, Decimal] = {}
    # The storage billing controller's copy of what storage was charged: kept, and part of the total.
    stored = shown.cost.by_segment.storage_usd if shown.cost is not None and shown.cost.by_segment else None
    if stored is not None:
        segments["storageUSD"] = Decimal(stored)
        total += segments["storageUSD"]
    covered: set[str] = set()
    funded: list[str] = []
    for cost in costs:
        total += Decimal(cost.total_usd or "0")
        held += Decimal(cost.held_usd or "0")
        rate += Decimal(cost.rate_usd_per_hour or "0")
        if cost.by_segment is not None:
            by_segment = cost.by_segment.to_json()
            for name in _SEGMENTS:
                if name in by_segment:
                    segments[name] = segments.get(name, Decimal(0)) + Decimal(by_segment[name])
            covered.update(cost.by_segment.covered_by_nodus or ())
        if cost.funded_until_time:
            funded.append(cost.funded_until_time)
    shown_cost: Object = {
        "totalUSD": money.text(total),
        "heldUSD": money.text(held),
        "rateUSDPerHour": money.text(rate),
    }
    by_segment_shown: Object = {name: money.text(amount) for name, amount in segments.items()}
    if covered:
        by_segment_shown["coveredByNodus"] = sorted(covered)
    if by_segment_shown:
        shown_cost["bySegment"] = by_segment_shown
    if funded:
        shown_cost["fundedUntilTime"] = min(funded)
    if limit is not None:
        shown_cost["limitUSD"] = limit
    billed = [a for a in attempts if a.status.scheduled_time]
    storing = (shown.storage.billed_bytes or 0) > 0 if shown.storage is not None else False
    shown_cost["final"] = (
        shown.phase in phases.JOB_FINISHED and not storing and all(_final(a.status.cost) for a in billed)
    )
    status["cost"] = shown_cost


def _final(cost: Cost | None) -> bool:
    return cost is not None and bool(cost.final)
