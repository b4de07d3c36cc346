"""What a Pipeline should do next: a pure decision over the Pipeline and its stage Jobs (ADR 0052).

:func:`plan` reads the Pipeline and the Jobs it owns (by stage) and returns the stages whose Jobs to
create, the stage Jobs whose ``spec.state`` to set, and the status to show. It never reads a clock
(``now`` is given) and never writes; :mod:`nodus.controllers.pipelines` carries the plan out.

The rules, level-triggered (every call decides from what is true now):

* A stage's phase is its Job's (Pending, Queued, Provisioning, Recovering and Running read as
  Running; Suspending as Suspended). A stage without a Job is what the status last showed if that was
  finished (its Job was deleted after it finished: it is not run again), otherwise Waiting, or
  Skipped when a stage it waits for Failed, was Cancelled or was Skipped.
* ``spec.state: Cancelled``: every unfinished stage Job is set Cancelled; nothing new starts.
* A stage Failed or Cancelled (not by the Pipeline) without ``continueOnFailure``: the Pipeline is
  Failed and every unfinished stage Job is set Cancelled. With ``continueOnFailure`` only the stages
  downstream of it are skipped.
* ``spec.state: Suspended``: every unfinished stage Job is set Suspended; nothing new starts.
  Back to Running: the stage Jobs are set Running again.
* Otherwise a Waiting stage whose every upstream stage Succeeded gets its Job, unless the stages have
  spent ``maxCostUSD`` already, which fails the Pipeline (``MaxCostReached``).
* Every stage Succeeded (or Skipped, or Failed with ``continueOnFailure``): the Pipeline Succeeded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import objects, phases, stagegraph
from nodus.apis.v1.conditions import PipelineConditionType
from nodus.apis.v1.pipeline import PipelinePhase, StagePhase, StageStatus
from nodus.controllers import pipelineruns
from nodus.controllers.jobs import conditions

Object = dict[str, Any]

_STAGE_PHASE: dict[str, StagePhase] = {
    "Succeeded": "Succeeded",
    "Failed": "Failed",
    "Cancelled": "Cancelled",
    "Suspended": "Suspended",
    "Suspending": "Suspended",
}
_STOPPED: frozenset[StagePhase] = frozenset({"Failed", "Cancelled", "Skipped"})
_FINISHED: frozenset[StagePhase] = frozenset({"Succeeded", "Failed", "Cancelled"})


@dataclass(frozen=True)
class Create:
    """A stage Job to create: its stage, name and content key (None: never reused)."""

    stage: str
    job: str
    key: str | None
    producers: Mapping[str, str] = field(default_factory=dict)
    """Stage -> the current Job of each stage this one reads from (its fromStage inputs are rewritten to them)."""


@dataclass
class Plan:
    """What to do: Jobs to create, stage Jobs' ``spec.state`` to set (Job name -> state), the status."""

    create: list[Create] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)
    status: Object = field(default_factory=dict)
    remaining_usd: Decimal | None = None
    """What ``maxCostUSD`` leaves for the stages created now (None: no cap)."""


def plan(pipeline: objects.Pipeline, owned: Sequence[objects.Job], now: datetime) -> Plan:
    """Decide for ``pipeline`` given ``owned``, every Job it controls (of every run)."""
    spec = pipeline.spec
    seen = pipelineruns.runs(pipeline)
    jobs = pipelineruns.current_jobs(pipeline, seen, owned)
    edges = stagegraph.graph(spec.stages)
    by_name = {stage.name: stage for stage in spec.stages}
    # A finished stage stays finished when its Job goes (ttlSecondsAfterFinished, a delete by hand): it is not run
    # again, and the stages after it still read its output by digest if they were created already.
    kept = {
        name: entry
        for name, entry in seen.entries.items()
        if entry is not None and name not in jobs and entry.phase in _FINISHED and name in by_name
    }
    phase_of: dict[str, StagePhase] = {name: entry.phase for name, entry in kept.items()}
    for stage in spec.stages:  # validation keeps the graph acyclic, and stages are in any order: resolve lazily
        _stage_phase(stage.name, edges, jobs, phase_of)
    spent = sum((_cost(job) for job in owned), Decimal(0))
    spent += sum((Decimal(e.cost_usd) for e in kept.values() if e.cost_usd is not None), Decimal(0))
    out = Plan()
    reused = {name for name, entry in seen.entries.items() if entry is not None and entry.reused and name in jobs}
    # The stage that failed first in spec order names the failure, not the ones the Pipeline cancelled because of it.
    failed = sorted(
        (s for s in spec.stages if phase_of[s.name] in ("Failed", "Cancelled") and not s.continue_on_failure),
        key=lambda s: phase_of[s.name] != "Failed",
    )
    unfinished = [job for job in owned if job.status.phase not in phases.JOB_FINISHED]
    phase: PipelinePhase
    message: str
    reason: str | None = None
    if spec.state == "Cancelled":
        phase, message = "Cancelled", "spec.state is Cancelled: the stage Jobs are cancelled."
        _set_states(out, unfinished, "Cancelled")
    elif failed:
        first = failed[0]
        phase, reason = "Failed", "StageFailed"
        where = jobs[first.name].metadata.name if first.name in jobs else first.name
        message = f"Stage {first.name} {phase_of[first.name].lower()} (Job {where}); the stages "
        message += "still running are cancelled and the rest do not start."
        _set_states(out, unfinished, "Cancelled")
    elif spec.state == "Suspended":
        phase, message = "Suspended", "spec.state is Suspended: the running stage Jobs are suspended."
        _set_states(out, unfinished, "Suspended")
    else:
        _set_states(out, unfinished, "Running")
        creates = _start(pipeline, seen, edges, jobs, owned, phase_of, reused)
        cap = Decimal(spec.max_cost_usd) if spec.max_cost_usd is not None else None
        if cap is not None:
            out.remaining_usd = cap - spent
        if creates and cap is not None and spent >= cap:
            phase, reason = "Failed", "MaxCostReached"
            names = ", ".join(c.stage for c in creates)
            message = f"The stages spent {spent} USD of maxCostUSD {cap}; stages {names} do not start."
            for create in creates:
                phase_of[create.stage] = "Waiting"
        else:
            out.create = creates
            over = all(phase_of[s] == "Succeeded" or phase_of[s] in _STOPPED for s in by_name)
            if over and not creates:
                phase, message = "Succeeded", "Every stage finished."
                skipped = [s for s in by_name if phase_of[s] != "Succeeded"]
                if skipped:
                    message = f"Every stage finished; {', '.join(skipped)} did not succeed (continueOnFailure)."
            elif jobs or creates:
                phase, message = "Running", _running_message(phase_of)
            else:
                phase, message = "Pending", "No stage can start yet."
    if seen.message is not None:
        message = f"{seen.message} {message}"
    job_names = {create.stage: create.job for create in out.create}
    job_names.update({stage: job.metadata.name for stage, job in jobs.items()})
    out.status = _status(pipeline, seen, jobs, job_names, reused, kept, phase_of, phase, message, reason, spent, now)
    return out


def _start(
    pipeline: objects.Pipeline,
    seen: pipelineruns.Runs,
    edges: Mapping[str, list[str]],
    jobs: dict[str, objects.Job],
    owned: Sequence[objects.Job],
    phase_of: dict[str, StagePhase],
    reused: set[str],
) -> list[Create]:
    """The stages to start now: each Waiting stage whose upstream all Succeeded reuses an earlier Job with its key
    (then the stages after it are looked at again) or gets a Job created."""
    creates: list[Create] = []
    while True:
        progressed = False
        for stage in pipeline.spec.stages:
            name = stage.name
            if phase_of[name] != "Waiting" or not all(phase_of[up] == "Succeeded" for up in edges[name]):
                continue
            run = seen.stage_runs.get(name, 1)
            key = pipelineruns.stage_key(stage, jobs)
            forced = name == seen.rerun_from and run == seen.run and seen.run > 1
            hit = pipelineruns.reusable(name, key, owned) if key is not None and not forced else None
            if hit is not None:
                jobs[name] = hit
                reused.add(name)
                phase_of[name] = "Succeeded"
                progressed = True
            else:
                producers = {up: jobs[up].metadata.name for up in edges[name] if up in jobs}
                job = pipelineruns.job_name(pipeline.metadata.name, name, run)
                creates.append(Create(name, job, key, producers))
                phase_of[name] = "Running"
        if not progressed:
            return creates


def _stage_phase(
    stage: str, edges: Mapping[str, list[str]], jobs: Mapping[str, objects.Job], known: dict[str, StagePhase]
) -> StagePhase:
    if stage in known:
        return known[stage]
    job = jobs.get(stage)
    result: StagePhase
    if job is not None:
        result = _STAGE_PHASE.get(str(job.status.phase), "Running")
    elif any(_stage_phase(up, edges, jobs, known) in _STOPPED for up in edges.get(stage, ())):
        result = "Skipped"
    else:
        result = "Waiting"
    known[stage] = result
    return result


def _set_states(out: Plan, unfinished: Sequence[objects.Job], state: str) -> None:
    for job in unfinished:
        if job.spec.state != state:
            out.states[job.metadata.name] = state


def _cost(job: objects.Job) -> Decimal:
    cost = job.status.cost
    return Decimal(cost.total_usd) if cost is not None and cost.total_usd is not None else Decimal(0)


def _running_message(phase_of: Mapping[str, StagePhase]) -> str:
    running = [s for s, p in phase_of.items() if p == "Running"]
    waiting = [s for s, p in phase_of.items() if p == "Waiting"]
    parts = [f"running: {', '.join(running)}"] if running else []
    parts += [f"waiting: {', '.join(waiting)}"] if waiting else []
    return "Stages " + "; ".join(parts) + "." if parts else "Stages are running."


def _status(
    pipeline: objects.Pipeline,
    seen: pipelineruns.Runs,
    jobs: Mapping[str, objects.Job],
    names: Mapping[str, str],
    reused: set[str],
    kept: Mapping[str, StageStatus],
    phase_of: Mapping[str, StagePhase],
    phase: PipelinePhase,
    message: str,
    reason: str | None,
    spent: Decimal,
    now: datetime,
) -> Object:
    old = pipeline.status
    generation = pipeline.metadata.generation
    status: Object = {
        "observedGeneration": generation,
        "phase": phase,
        "message": message,
        "costUSD": str(spent),
        "succeeded": sum(1 for p in phase_of.values() if p == "Succeeded"),
        "conditions": [c.to_json() for c in old.conditions or ()],
    }
    if old.estimate is not None:
        status["estimate"] = old.estimate.to_json()  # the server's, made at create
    if seen.run > 1:
        status.update(run=seen.run, rerunFrom=seen.rerun_from)
    if seen.requested_at is not None:
        status["rerunRequestedAt"] = seen.requested_at
    starts = [job.metadata.creation_timestamp for job in jobs.values() if job.metadata.creation_timestamp]
    start = old.start_time or (min(starts) if starts else None)
    if start is not None:
        status["startTime"] = start
    if phase in ("Succeeded", "Failed", "Cancelled"):
        same_run = (old.run or 1) == seen.run
        status["completionTime"] = (old.completion_time if same_run else None) or units.format_time(now)
    stages: list[Object] = []
    for stage in pipeline.spec.stages:
        name = stage.name
        if name in kept:
            stages.append(kept[name].to_json())  # its Job is gone; what it did is still shown
            continue
        run = seen.stage_runs.get(name, 1)
        stages.append(_stage_status(name, phase_of[name], jobs.get(name), names.get(name), run, name in reused))
    status["stages"] = stages
    _show_conditions(status, phase, reason, message, now, generation)
    return status


def _stage_status(
    name: str, phase: StagePhase, job: objects.Job | None, job_name: str | None, run: int, reused: bool
) -> Object:
    """The status entry of stage ``name``, whose Job is ``job`` (None: there is none, yet or at all) and is to be
    named ``job_name``: its phase, Job and run (shown from the second on). A reused Job is marked so; any other
    reports its times and cost, and its message when the stage Failed. A Skipped stage without a Job says why."""
    entry: Object = {"name": name, "phase": phase}
    if job_name is not None:
        entry["job"] = job_name
    if run > 1:
        entry["run"] = run
    if reused:
        entry["reused"] = True
    elif job is not None:
        for key, value in (
            ("startTime", job.status.start_time),
            ("completionTime", job.status.completion_time),
            ("costUSD", str(_cost(job))),
            ("message", job.status.message if phase == "Failed" else None),
        ):
            if value is not None:
                entry[key] = value
    if job is None and phase == "Skipped":
        entry["message"] = "A stage it depends on did not succeed."
    return entry


def _show_conditions(
    status: Object, phase: PipelinePhase, reason: str | None, message: str, now: datetime, generation: int
) -> None:
    """Set in ``status`` the conditions of ``phase`` (Complete, Failed, Suspended) True with ``message``, and turn
    False those ``status`` carries that ``phase`` does not show; ``status["conditions"]`` is dropped while empty."""
    shown: tuple[tuple[PipelineConditionType, bool, str], ...] = (
        ("Complete", phase == "Succeeded", "Succeeded"),
        ("Failed", phase == "Failed", reason or "StageFailed"),
        ("Suspended", phase == "Suspended", "Suspended"),
    )
    for type_, on, why in shown:
        if on:
            conditions.set(status, type_, "True", why, message, now, generation)
        elif conditions.get(status, type_) is not None:
            conditions.set(status, type_, "False", f"Not{type_}", f"The Pipeline is {phase}.", now, generation)
    if not status["conditions"]:
        del status["conditions"]
