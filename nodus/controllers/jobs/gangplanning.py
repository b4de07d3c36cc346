"""The Job controller's gang decisions: when an epoch's ranks stop, when a new epoch starts, what it restores.

``planning.plan`` reads a gang Job's epochs as single runs (``gangs.representatives``) for every rule it
shares with plain Jobs, and asks this module for what only a gang has:

* :func:`settle`: the current epoch's ranks are stopped together when one ended it (``GangRestart``), when
  rank 0 of a Ray-led gang succeeded (``GangComplete``), when the assembly outlives ``startupTimeout``
  (``AssemblyTimeout``) or the placements would mesh over a path the transport refuses (``AssemblyFailed``);
  a running gang is asked for a gang checkpoint when one is due.
* :func:`assembly_exhausted`: more consecutive failed assemblies than ``maxAssemblyRetries``.
* :func:`start_epoch`: the next epoch's rank attempts, each restoring its own shard of the newest gang
  checkpoint (and seeing every rank's), once every rank of the previous epoch has ended.

Only :func:`settle` stops the ranks of a running gang, so each is asked once per decision.
* :func:`gang_phase`: ``status.gang.phase``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from nodus.apimachinery import units
from nodus.apis.v1 import objects, phases
from nodus.apis.v1.jobspec import JobSpec
from nodus.controllers.jobs import gangreporting, gangs, views
from nodus.controllers.jobs.gangs import ASSEMBLY_REASONS, HEAD_LED, Epoch

Object = dict[str, Any]


@dataclass
class Settled:
    """What the current epoch needs: stops (attempt, reason), spec patches, and when to look again. The attempts
    are the stored objects the reconciler writes to."""

    stop: list[tuple[Object, str]] = field(default_factory=list)
    patch: list[tuple[Object, Object]] = field(default_factory=list)
    wake_at: datetime | None = None


@dataclass(frozen=True)
class TimeScales:
    """Test settings: gang assembly budgets and checkpoint intervals times these (1 in production)."""

    assembly: float = 1.0
    checkpoint: float = 1.0


def settle(spec: JobSpec | Object, attempts: list[Object], now: datetime, scales: TimeScales) -> Settled:
    """Decide for the newest epoch of a running (not suspended, not finished) gang Job."""
    out = Settled()
    epochs = gangs.epochs_of(attempts)
    if not epochs:
        return out
    job_spec = views.job_spec(spec)
    assert job_spec.distributed is not None, "settle is called for distributed Jobs only"
    epoch = epochs[-1]
    live = [a for a in epoch.live if a.spec.stop is None]
    ended = epoch.outcome()
    notice = _notice(epoch)
    if ended is not None:
        waiting = _notice_pending(epoch, notice, now, scales) if ended[0] == "Lost" else None
        if waiting is not None:
            # The noticed rank is gone, but the others are still saving their shards of its gang checkpoint.
            out.wake_at = waiting
            return out
        reason = "GangComplete" if ended[0] == "Succeeded" else "GangRestart"
        out.stop = [(epoch.stored_of(a), reason) for a in live]
        return out
    if notice is not None and epoch.assembled:
        # A rank's host was given notice: the whole gang checkpoints under the notice's time, now.
        running = [a for a in live if a.status.phase == "Running"]
        out.patch = [(epoch.stored_of(a), {"checkpointRequest": notice}) for a in running if _asked(a) < notice]
        out.wake_at = _notice_deadline(notice, scales)
        return out
    if job_spec.distributed.launcher in HEAD_LED and epoch.members[0].status.phase == "Succeeded":
        out.stop = [(epoch.stored_of(a), "GangComplete") for a in live]
        return out
    if not epoch.assembled:
        if gangreporting.refused_path(epoch, job_spec.distributed.transport) is not None:
            out.stop = [(epoch.stored_of(a), "AssemblyFailed") for a in live]
            return out
        deadline = gangs.assembly_deadline(epoch, job_spec, scales.assembly)
        if deadline is not None and now >= deadline:
            out.stop = [(epoch.stored_of(a), "AssemblyTimeout") for a in live]
        out.wake_at = deadline
        return out
    due = gangreporting.checkpoint_due(epoch, job_spec, now, scales.checkpoint)
    if due is not None and now >= due:
        request = units.format_time(now)
        out.patch = [(epoch.stored_of(a), {"checkpointRequest": request}) for a in live if a.status.phase == "Running"]
    elif due is not None:
        out.wake_at = due
    return out


# How long the other ranks may take to save their shards of a notice's gang checkpoint (times the test scale).
NOTICE_CHECKPOINT_WAIT: Final = timedelta(minutes=2)


def _notice(epoch: Epoch) -> str | None:
    """The latest notice a rank of the epoch reported (``status.gang.notice``), if any."""
    notices = [n for a in epoch.members if a.status.gang is not None and (n := a.status.gang.notice)]
    return max(notices, default=None)


def _asked(attempt: objects.Attempt) -> str:
    return attempt.spec.checkpoint_request or ""


def _notice_deadline(notice: str, scales: TimeScales) -> datetime:
    return units.parse_time(notice) + timedelta(seconds=NOTICE_CHECKPOINT_WAIT.total_seconds() * scales.checkpoint)


def _notice_pending(epoch: Epoch, notice: str | None, now: datetime, scales: TimeScales) -> datetime | None:
    """Until when to let the surviving ranks finish their shards of the notice's checkpoint (None: no need)."""
    if notice is None:
        return None
    deadline = _notice_deadline(notice, scales)
    saving = [a for a in epoch.live if _asked(a) == notice and _handled(a) != notice]
    return deadline if saving and now < deadline else None


def _handled(attempt: objects.Attempt) -> str | None:
    """The last checkpoint request the rank took a checkpoint for."""
    checkpoint = attempt.status.checkpoint
    return checkpoint.handled_request if checkpoint is not None else None


def assembly_exhausted(spec: JobSpec | Object, attempts: list[Object]) -> tuple[str, str] | None:
    """(reason, message) when the gang failed to assemble more times in a row than it may."""
    distributed = views.job_spec(spec).distributed
    retries = distributed.max_assembly_retries if distributed is not None else 2
    epochs = gangs.epochs_of(attempts)
    failures = gangs.assembly_failures(epochs)
    if failures <= retries:
        return None
    ended = epochs[-1].outcome()
    detail = ended[2] if ended is not None else ""
    message = (
        f"The gang failed to assemble {failures} times in a row (distributed.maxAssemblyRetries is {retries}). "
        f"Last try: {detail}"
    )
    return "GangAssemblyFailed", message


def start_epoch(base: Object, spec: Object, attempts: list[Object], number: int) -> list[Object]:
    """The rank attempts of epoch ``number``, from the slot's attempt ``base`` (``attempts.attempt_for``, being
    built) and the Job's stored ``spec``; none while a rank of the last epoch still runs (:func:`settle` stops
    it)."""
    epochs = gangs.epochs_of(attempts)
    if any(epoch.live for epoch in epochs):
        return []
    base = {**base, "spec": {k: v for k, v in base["spec"].items() if k != "restore"}}
    members = gangs.members_for(base, spec, number)
    checkpointed = views.job_spec(spec).recovery.continuity == "Checkpointed"
    shards = gangreporting.latest_checkpoint(epochs) if checkpointed else None
    if shards is not None and len(shards) == len(members):
        for member in members:
            own = shards[member["spec"]["rank"]]
            member["spec"]["restore"] = {k: own[k] for k in ("seq", "manifest", "attempt", "size") if k in own}
            member["spec"]["gang"] = {**member["spec"]["gang"], "restoreShards": shards}
    return members


def gang_phase(job_phase: str, attempts: list[Object]) -> str:
    """``status.gang.phase`` from the Job's phase and its rank attempts."""
    epochs = gangs.epochs_of(attempts)
    live = any(epoch.live for epoch in epochs)
    if job_phase in phases.JOB_FINISHED:
        return "Releasing" if live else "Done"
    if job_phase in ("Suspending", "Suspended"):
        return "Stopping" if live else "Done"
    if not epochs:
        return "Queued"
    epoch = epochs[-1]
    ended = epoch.outcome()
    if ended is not None:
        if ended[0] == "Succeeded":
            return "Releasing" if live else "Done"
        return "Recovering"
    if any(a.spec.stop is not None for a in epoch.live):
        return "Stopping"
    return _assembly_phase(epoch, epochs)


def _assembly_phase(epoch: Epoch, epochs: list[Epoch]) -> str:
    if epoch.assembled:
        return "Running"
    if not any(a.status.placement is not None for a in epoch.members):
        restarting = len(epochs) > 1 and (epochs[-2].outcome() or ("", "", ""))[1] not in ASSEMBLY_REASONS
        return "Recovering" if restarting else "Queued"
    if epoch.registered < epoch.size:
        return "Assembling"
    if epoch.probed < epoch.size:
        return "Meshing"
    return "Starting"
