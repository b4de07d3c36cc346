"""``nodus describe JOB``'s sections: a Job and its Attempts (JSON, as served) as blocks for
:mod:`nodus.cli.jobtables` to render, in the order a person asks about a Job: what was asked (the spec), where it
stands (status, conditions), where it ran (attempts), what it kept (checkpoint, outputs), what it cost (by
segment, against its estimate) and what happened when (events).

Nodus keeps no Event objects; the events are read back from the times the status records (creation, condition
transitions, attempts' starts and ends, the last checkpoint, completion), so they are exactly what the objects
say and no more. Everything here is a pure function of its arguments; ``now`` only ages and times running
attempts.
"""

from __future__ import annotations

import shlex
from datetime import datetime
from decimal import Decimal
from typing import Any

from nodus.apis.v1 import objects
from nodus.cli.jobtables import Block, Cell, Fields, Grid, age, decimal, duration, money, parse_time, phase_cell, size

SEGMENTS: tuple[tuple[str, str], ...] = (
    ("Boot", "boot_usd"),
    ("Running", "running_usd"),
    ("Restore", "restore_usd"),
    ("Teardown", "teardown_usd"),
    ("Storage", "storage_usd"),
)
"""The cost segments of ``status.cost.bySegment`` in the order a run goes through them, with their view fields."""


def describe(job_json: dict[str, Any], attempts_json: list[dict[str, Any]], now: datetime) -> list[Block]:
    """Every section of the description of ``job_json``; ``attempts_json`` are its Attempts (those labelled
    ``nodus.dev/job`` with its name), in any order."""
    job = objects.read(objects.Job, job_json)
    attempts = sorted(
        (objects.read(objects.Attempt, a) for a in attempts_json), key=lambda a: (a.spec.index, a.spec.number)
    )
    blocks: list[Block | None] = [
        _header(job, now),
        _spec(job),
        _status(job),
        _conditions(job),
        _attempts(attempts, now),
    ]
    blocks += [_checkpoint(job), _cost(job), _estimate(job), _outputs(job), _events(job, attempts)]
    return [block for block in blocks if block is not None]


def _header(job: objects.Job, now: datetime) -> Fields:
    meta = job.metadata
    created = meta.creation_timestamp
    rows = [("Name", Cell(meta.name)), ("Project", Cell(meta.namespace or ""))]
    rows.append(("Created", Cell(f"{created} ({age(created, now)} ago)" if created else "-")))
    rows.append(("Labels", Cell(",".join(f"{k}={v}" for k, v in sorted(meta.labels.items())) or "<none>")))
    if meta.deletion_timestamp:
        rows.append(("Deleting since", Cell(meta.deletion_timestamp, "yellow")))
    return Fields("", tuple(rows))


def _spec(job: objects.Job) -> Fields:
    spec = job.spec
    argv = [*(spec.command or []), *(spec.args or [])]
    rows = [
        ("Image", Cell(spec.image or "-")),
        ("Command", Cell(shlex.join(argv) if argv else "-")),
        ("Resources", Cell(_resources(job))),
        ("Placement", Cell(_placement(job))),
        ("Recovery", Cell(_recovery(job))),
        (
            "Completions",
            Cell(f"{spec.completions} (parallelism {spec.parallelism}, backoffLimit {spec.backoff_limit})"),
        ),
        ("State", Cell(spec.state, "yellow" if spec.state != "Running" else "")),
    ]
    if spec.expected_duration:
        rows.append(("Expected duration", Cell(spec.expected_duration)))
    if spec.max_cost_usd:
        rows.append(("Max cost", Cell(money(spec.max_cost_usd))))
    return Fields("Spec", tuple(rows))


def _resources(job: objects.Job) -> str:
    resources, parts = job.spec.resources, []
    if resources is None:
        return "-"
    if resources.gpu is not None:
        gpu = resources.gpu
        parts.append(f"gpu {gpu.count or 1}x {'|'.join(gpu.type) or 'any'}")
        if gpu.min_memory:
            parts.append(f"gpu memory >= {gpu.min_memory}")
    for label, value in (("cpu", resources.cpu), ("memory", resources.memory), ("disk", resources.disk)):
        if value:
            parts.append(f"{label} {value}")
    if resources.nodes:
        parts.append(f"{resources.nodes} nodes")
    return ", ".join(parts) or "-"


def _placement(job: objects.Job) -> str:
    placement = job.spec.placement
    parts = [f"profile {placement.profile}", f"interruptible {placement.interruptible}"]
    if placement.pool:
        parts.insert(0, f"pool {placement.pool}")
    if placement.offerings:
        parts.append("offerings " + ",".join(placement.offerings))
    if placement.regions:
        parts.append("regions " + ",".join(placement.regions))
    if placement.max_rate_usd_per_hour:
        parts.append(f"max rate {money(placement.max_rate_usd_per_hour)}/h")
    parts.append(f"queueTimeout {placement.queue_timeout}")
    return ", ".join(parts)


def _recovery(job: objects.Job) -> str:
    recovery = job.spec.recovery
    parts = [recovery.continuity, f"maxAttempts {recovery.max_attempts}", f"onInterruption {recovery.on_interruption}"]
    if recovery.continuity == "Checkpointed":
        parts.append(f"checkpoint every {recovery.checkpoint.interval}")
    return ", ".join(parts)


def _status(job: objects.Job) -> Fields:
    status = job.status
    rows: list[tuple[str, Cell]] = [("Phase", phase_cell(status.phase))]
    for label, value in (("Reason", status.reason), ("Message", status.message)):
        if value:
            rows.append((label, Cell(value)))
    if status.fix:
        rows.append(("Fix", Cell(status.fix, "bold")))
    done = f"{status.succeeded or 0}/{job.spec.completions} succeeded"
    if status.completed_indexes:
        done += f" (indexes {status.completed_indexes})"
    rows.append(("Completions", Cell(f"{done}, {status.active or 0} active, {status.failed or 0} failed")))
    if status.placement and (status.placement.offering or status.placement.region_class):
        where = status.placement
        rate = f" at {money(where.rate_usd_per_hour)}/h" if where.rate_usd_per_hour else ""
        kind = ", interruptible" if where.interruptible else ""
        rows.append(("Offering", Cell(f"{where.offering} ({where.region_class}{kind}){rate}")))
    if status.progress and status.progress.units:
        units = status.progress.units
        total = f"/{units.total}" if units.total is not None else ""
        rows.append(("Progress", Cell(f"{units.completed or 0}{total} units")))
    if status.progress and status.progress.metrics:
        rows.append(("Metrics", Cell(", ".join(f"{k}={v}" for k, v in sorted(status.progress.metrics.items())))))
    for label, value in (("Started", status.start_time), ("Finished", status.completion_time)):
        if value:
            rows.append((label, Cell(value)))
    return Fields("Status", tuple(rows))


def _conditions(job: objects.Job) -> Grid:
    rows = tuple(
        (
            Cell(c.type),
            Cell(c.status, {"True": "green", "False": "yellow"}.get(c.status, "")),
            Cell(c.reason or ""),
            Cell(c.message or ""),
            Cell(c.last_transition_time or ""),
        )
        for c in job.status.conditions or []
    )
    return Grid("Conditions", ("TYPE", "STATUS", "REASON", "MESSAGE", "LAST TRANSITION"), rows)


def _attempts(attempts: list[objects.Attempt], now: datetime) -> Grid:
    rows = []
    for attempt in attempts:
        status, placement = attempt.status, attempt.status.placement
        node = attempt.spec.node or (placement.node if placement else None)
        offering = attempt.spec.offering or (placement.offering if placement else None)
        if not offering and placement and placement.pool:
            offering = f"pool {placement.pool}"
        start, end = parse_time(status.start_time), parse_time(status.finish_time)
        took = duration(((end or now) - start).total_seconds()) if start else "-"
        rows.append(
            (
                Cell(attempt.metadata.name),
                Cell(str(attempt.spec.index)),
                phase_cell(status.phase),
                Cell(node or "-"),
                Cell(offering or "-"),
                Cell(status.reason or ""),
                Cell(status.start_time or "-"),
                Cell(took + ("" if end or not start else " (running)")),
            )
        )
    headers = ("NAME", "INDEX", "PHASE", "NODE", "OFFERING", "REASON", "START", "DURATION")
    return Grid("Attempts", headers, tuple(rows))


def _checkpoint(job: objects.Job) -> Fields | None:
    checkpoint = job.status.checkpoint
    if checkpoint is None or checkpoint.seq is None:
        return None
    rows = [("Seq", Cell(str(checkpoint.seq))), ("Time", Cell(checkpoint.time or "-"))]
    rows.append(("Size", Cell(size(checkpoint.size))))
    if checkpoint.restored_from_seq is not None:
        rows.append(("Restored from seq", Cell(str(checkpoint.restored_from_seq))))
    return Fields("Checkpoint", tuple(rows))


def _cost(job: objects.Job) -> Grid:
    cost = job.status.cost
    if cost is None:
        return Grid("Cost", ("SEGMENT", "USD"), ())
    by_segment = cost.by_segment
    covered = set(by_segment.covered_by_nodus or []) if by_segment else set()
    rows = []
    for label, field in SEGMENTS:
        value = getattr(by_segment, field) if by_segment else None
        if value is not None:
            rows.append((Cell(label), Cell(money(value) + ("  (partly covered by Nodus)" if label in covered else ""))))
    final = " (final)" if cost.final else " (so far)"
    rows.append((Cell("Total", "bold"), Cell(money(cost.total_usd) + final, "bold")))
    # A running Job's rate; the final charge writes a zero rate, which is no rate to show.
    if cost.rate_usd_per_hour and not cost.final and Decimal(cost.rate_usd_per_hour) > 0:
        rows.append((Cell("Rate"), Cell(f"{money(cost.rate_usd_per_hour)}/h")))
    if cost.held_usd and not cost.final:
        rows.append((Cell("Held"), Cell(money(cost.held_usd))))
    return Grid("Cost", ("SEGMENT", "USD"), tuple(rows))


def _estimate(job: objects.Job) -> Fields | None:
    estimate = job.status.estimate
    band = estimate.cost_usd if estimate else None
    if band is None:
        return None
    p50, p90 = decimal(band.p50), decimal(band.p90)
    actual = decimal(job.status.cost.total_usd) if job.status.cost else None
    rows = [("Estimate", Cell(f"{money(band.p50)} (P50)  {money(band.p90)} (P90)"))]
    if actual is not None:
        so_far = "" if job.status.cost and job.status.cost.final else " so far"
        rows.append(("Actual", Cell(f"{money(actual)}{so_far}")))
        if p50:
            ratio = actual / p50
            where = "above the P90" if p90 is not None and actual > p90 else "within the P90"
            rows.append(("Actual / P50", Cell(f"{ratio:.2f}x ({where})", "red" if "above" in where else "")))
    return Fields("Estimate vs actual", tuple(rows))


def _outputs(job: objects.Job) -> Grid | None:
    outputs = job.status.outputs or []
    if not outputs:
        return None
    rows = tuple(
        (
            Cell(out.name or "-"),
            Cell("-" if out.index is None else str(out.index)),
            Cell(size(out.size)),
            Cell(out.path or "-"),
            Cell(out.committed_time or "-"),
        )
        for out in outputs
    )
    return Grid("Outputs", ("NAME", "INDEX", "SIZE", "PATH", "COMMITTED"), rows)


def _events(job: objects.Job, attempts: list[objects.Attempt]) -> Grid:
    found: list[tuple[datetime, str, str]] = []

    def add(when: str | None, what: str) -> None:
        parsed = parse_time(when)
        if parsed is not None and when is not None:
            found.append((parsed, when, what))

    add(job.metadata.creation_timestamp, "Job created")
    for condition in job.status.conditions or []:
        because = f" ({condition.reason})" if condition.reason else ""
        add(condition.last_transition_time, f"{condition.type} became {condition.status}{because}")
    for attempt in attempts:
        name, status = attempt.metadata.name, attempt.status
        node = attempt.spec.node or (status.placement.node if status.placement else None)
        add(status.start_time, f"attempt {name} started" + (f" on {node}" if node else ""))
        if status.finish_time and status.phase:
            because = f" ({status.reason})" if status.reason else ""
            add(status.finish_time, f"attempt {name} ended {status.phase}{because}")
    checkpoint = job.status.checkpoint
    if checkpoint and checkpoint.seq is not None:
        add(checkpoint.time, f"checkpoint {checkpoint.seq} committed ({size(checkpoint.size)})")
    if job.status.completion_time and job.status.phase:
        add(job.status.completion_time, f"Job {job.status.phase}")
    found.sort(key=lambda event: event[0])
    return Grid("Events", ("TIME", "EVENT"), tuple((Cell(when), Cell(what)) for _, when, what in found))
