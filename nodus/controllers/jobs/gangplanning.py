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
from typing import Any

from nodus.apimachinery import units
from nodus.controllers.jobs import gangreporting, gangs
from nodus.controllers.jobs.gangs import ASSEMBLY_REASONS, HEAD_LED, Epoch
from nodus.controllers.jobs.slots import is_live

Object = dict[str, Any]


@dataclass
class Settled:
    """What the current epoch needs: stops (attempt, reason), spec patches, and when to look again."""

    stop: list[tuple[Object, str]] = field(default_factory=list)
    patch: list[tuple[Object, Object]] = field(default_factory=list)
    wake_at: datetime | None = None


@dataclass(frozen=True)
class TimeScales:
    """Test settings: gang assembly budgets and checkpoint intervals times these (1 in production)."""

    assembly: float = 1.0
    checkpoint: float = 1.0


def launcher_of(spec: Object) -> str:
    return str((spec.get("distributed") or {}).get("launcher") or "Plain")


def settle(spec: Object, attempts: list[Object], now: datetime, scales: TimeScales) -> Settled:
    """Decide for the newest epoch of a running (not suspended, not finished) gang Job."""
    out = Settled()
    epochs = gangs.epochs_of(attempts)
    if not epochs:
        return out
    epoch = epochs[-1]
    live = [a for a in epoch.live if not (a.get("spec") or {}).get("stop")]
    launcher = launcher_of(spec)
    ended = epoch.outcome()
    notice = _notice(epoch)
    if ended is not None:
        waiting = _notice_pending(epoch, notice, now, scales) if ended[0] == "Lost" else None
        if waiting is not None:
            # The noticed rank is gone, but the others are still saving their shards of its gang checkpoint.
            out.wake_at = waiting
            return out
        reason = "GangComplete" if ended[0] == "Succeeded" else "GangRestart"
        out.stop = [(a, reason) for a in live]
        return out
    if notice is not None and epoch.assembled:
        # A rank's host was given notice: the whole gang checkpoints under the notice's time, now.
        running = [a for a in live if (a.get("status") or {}).get("phase") == "Running"]
        out.patch = [(a, {"checkpointRequest": notice}) for a in running if _asked(a) < notice]
        out.wake_at = _notice_deadline(notice, scales)
        return out
    rank0 = epoch.members[0]
    if launcher in HEAD_LED and (rank0.get("status") or {}).get("phase") == "Succeeded":
        out.stop = [(a, "GangComplete") for a in live]
        return out
    if not epoch.assembled:
        transport = str((spec.get("distributed") or {}).get("transport") or "Direct")
        if gangreporting.refused_path(epoch, transport) is not None:
            out.stop = [(a, "AssemblyFailed") for a in live]
            return out
        deadline = gangs.assembly_deadline(epoch, spec, scales.assembly)
        if deadline is not None and now >= deadline:
            out.stop = [(a, "AssemblyTimeout") for a in live]
        out.wake_at = deadline
        return out
    due = gangreporting.checkpoint_due(epoch, spec, now, scales.checkpoint)
    if due is not None and now >= due:
        request = units.format_time(now)
        out.patch = [(a, {"checkpointRequest": request}) for a in live if a.get("status", {}).get("phase") == "Running"]
    elif due is not None:
        out.wake_at = due
    return out


# How long the other ranks may take to save their shards of a notice's gang checkpoint (times the test scale).
NOTICE_CHECKPOINT_WAIT = timedelta(minutes=2)


def _notice(epoch: Epoch) -> str | None:
    """The latest notice a rank of the epoch reported (``status.gang.notice``), if any."""
    notices = [str(n) for a in epoch.members if (n := ((a.get("status") or {}).get("gang") or {}).get("notice"))]
    return max(notices, default=None)


def _asked(attempt: Object) -> str:
    return str((attempt.get("spec") or {}).get("checkpointRequest") or "")


def _notice_deadline(notice: str, scales: TimeScales) -> datetime:
    return units.parse_time(notice) + timedelta(seconds=NOTICE_CHECKPOINT_WAIT.total_seconds() * scales.checkpoint)


def _notice_pending(epoch: Epoch, notice: str | None, now: datetime, scales: TimeScales) -> datetime | None:
    """Until when to let the surviving ranks finish their shards of the notice's checkpoint (None: no need)."""
    if notice is None:
        return None
    deadline = _notice_deadline(notice, scales)
    saving = [
        a
        for a in epoch.live
        if _asked(a) == notice and ((a.get("status") or {}).get("checkpoint") or {}).get("handledRequest") != notice
    ]
    return deadline if saving and now < deadline else None


def assembly_exhausted(spec: Object, attempts: list[Object]) -> tuple[str, str] | None:
    """(reason, message) when the gang failed to assemble more times in a row than it may."""
    retries = int((spec.get("distributed") or {}).get("maxAssemblyRetries", 2))
    failures = gangs.assembly_failures(attempts)
    if failures <= retries:
        return None
    last = gangs.epochs_of(attempts)[-1]
    ended = last.outcome()
    detail = ended[2] if ended is not None else ""
    message = (
        f"The gang failed to assemble {failures} times in a row (distributed.maxAssemblyRetries is {retries}). "
        f"Last try: {detail}"
    )
    return "GangAssemblyFailed", message


def start_epoch(base: Object, spec: Object, attempts: list[Object], number: int) -> list[Object]:
    """The rank attempts of epoch ``number``, from the slot's attempt ``base`` (``attempts.attempt_for``); none
    while a rank of the last epoch still runs (:func:`settle` stops it)."""
    if any(is_live(a) for a in attempts):
        return []
    base = {**base, "spec": {k: v for k, v in base["spec"].items() if k != "restore"}}
    members = gangs.members_for(base, spec, number)
    continuity = (spec.get("recovery") or {}).get("continuity") or "Checkpointed"
    shards = gangreporting.latest_checkpoint(gangs.epochs_of(attempts)) if continuity == "Checkpointed" else None
    if shards is not None and len(shards) == len(members):
        for member in members:
            own = shards[member["spec"]["rank"]]
            member["spec"]["restore"] = {k: own[k] for k in ("seq", "manifest", "attempt", "size") if k in own}
            member["spec"]["gang"] = {**member["spec"]["gang"], "restoreShards": shards}
    return members


def gang_phase(job_phase: str, attempts: list[Object]) -> str:
    """``status.gang.phase`` from the Job's phase and its rank attempts."""
    epochs = gangs.epochs_of(attempts)
    live = [a for a in attempts if is_live(a)]
    if job_phase in ("Succeeded", "Failed", "Cancelled"):
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
    if any((a.get("spec") or {}).get("stop") for a in epoch.live):
        return "Stopping"
    return _assembly_phase(epoch, epochs)


def _assembly_phase(epoch: Epoch, epochs: list[Epoch]) -> str:
    if epoch.assembled:
        return "Running"
    if not any((a.get("status") or {}).get("placement") for a in epoch.members):
        restarting = len(epochs) > 1 and (epochs[-2].outcome() or ("", "", ""))[1] not in ASSEMBLY_REASONS
        return "Recovering" if restarting else "Queued"
    if epoch.count("registeredTime") < epoch.size:
        return "Assembling"
    if epoch.count("probedTime") < epoch.size:
        return "Meshing"
    return "Starting"
