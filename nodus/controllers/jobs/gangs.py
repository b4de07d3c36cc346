"""Gang Jobs in the Job controller: epochs of rank attempts, each read as one run of the Job's slot.

A distributed Job has one slot (index 0, ADR 0046 §13). Each start of it is an *epoch*: one Attempt
per rank, ``<job>-0-<n>-r<rank>`` (ADR 0046 §3), all with ``number`` n. An epoch is one unit for
every rule of the Job's lifecycle, so :func:`representatives` folds each epoch into a single
attempt-shaped object that ``planning`` counts like any plain attempt (``Slots``): it is live until
one rank ends badly, then it has the outcome that explains the gang's end:

* ``Lost`` if a rank lost its capacity after the gang had assembled (every rank started): a gang
  restart, counted against ``recovery.maxAttempts`` like any loss; its other ranks' failures are
  consequences (their peers vanished), never the customer's.
* ``Failed`` if a rank failed (non-zero exit), counted against ``backoffLimit`` once per epoch.
* ``Stopped`` with reason ``AssemblyTimeout`` or ``AssemblyFailed`` if it never assembled: the ranks
  did not all start within ``startupTimeout``, or one was lost or could not mesh on the way. Counted
  against ``distributed.maxAssemblyRetries`` (consecutive), never against the other two limits.
* ``Succeeded`` once rank 0 succeeded and every rank ended without failing.

The raw rank attempts stay what is stopped, billed and reported; a new epoch is created only when
every rank of the previous one has ended, so two epochs never share a rendezvous.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from nodus.apimachinery import topology, units
from nodus.apis.v1 import labels, objects, phases
from nodus.apis.v1.jobspec import JobSpec
from nodus.apis.v1.phases import AttemptPhase
from nodus.controllers.jobs import views

Object = dict[str, Any]

ASSEMBLY_REASONS: Final = frozenset({"AssemblyTimeout", "AssemblyFailed"})
# Launchers whose other ranks serve rank 0 until it is done (a Ray cluster): they are stopped when it succeeds.
HEAD_LED: Final = frozenset({"Ray", "Verl"})


def is_gang(spec: JobSpec | Object) -> bool:
    return views.job_spec(spec).distributed is not None


def phase_of(attempt: objects.Attempt) -> AttemptPhase:
    """The attempt's phase: Pending until one is reported."""
    return attempt.status.phase or "Pending"


def is_live(attempt: objects.Attempt) -> bool:
    return phase_of(attempt) not in phases.ATTEMPT_FINISHED


def rank_of(attempt: objects.Attempt) -> int:
    return attempt.spec.rank or 0


@dataclass
class Epoch:
    """The rank attempts of one gang start: their views by rank, and the stored objects by name (what stops and
    patches are addressed to)."""

    number: int
    members: list[objects.Attempt]
    stored: dict[str, Object]

    def stored_of(self, attempt: objects.Attempt) -> Object:
        """The stored object of a member, as the reconciler writes to it (its resourceVersion included)."""
        return self.stored[attempt.metadata.name]

    @property
    def size(self) -> int:
        gang = self.members[0].spec.gang
        return gang.size if gang is not None else len(self.members)

    @property
    def live(self) -> list[objects.Attempt]:
        return [a for a in self.members if is_live(a)]

    @property
    def registered(self) -> int:
        """How many ranks registered their mesh endpoint (``status.gang.registeredTime``)."""
        return sum(1 for a in self.members if a.status.gang is not None and a.status.gang.registered_time)

    @property
    def probed(self) -> int:
        """How many ranks finished probing their peers (``status.gang.probedTime``)."""
        return sum(1 for a in self.members if a.status.gang is not None and a.status.gang.probed_time)

    @property
    def started(self) -> int:
        return sum(1 for a in self.members if a.status.start_time)

    @property
    def assembled(self) -> bool:
        """Every rank started the command (the gang met; a later loss is a restart, not an assembly failure)."""
        return self.started >= self.size

    def provisioned_at(self) -> datetime | None:
        """When the gang's hosts were assigned (every rank funded, ``provisioningTime``): the assembly clock
        starts then, as billing does; waiting for capacity or for funds is not assembly."""
        times = [t for a in self.members if (t := units.time_or_none(a.status.provisioning_time))]
        return min(times, default=None)

    def stopping_for(self) -> str | None:
        """The reason the controller gave when it stopped this epoch (the same on every rank), if it did."""
        return next((a.spec.stop.reason for a in self.members if a.spec.stop is not None), None)

    def outcome(self) -> tuple[AttemptPhase, str, str] | None:
        """(phase, reason, message) once the epoch is over for the Job; None while it is still the gang's run."""
        ended = [a for a in self.members if not is_live(a)]
        if not ended:
            return None
        stopped_for = self.stopping_for()
        lost = [a for a in ended if phase_of(a) == "Lost"]
        failed = [a for a in ended if phase_of(a) == "Failed"]
        if stopped_for is not None and stopped_for in ASSEMBLY_REASONS:
            return "Stopped", stopped_for, _missing_message(self)
        if lost and not self.assembled:
            return "Stopped", "AssemblyFailed", _end_message(lost[0], "was lost before the gang assembled")
        if lost:
            return "Lost", lost[0].status.reason or "NodeLost", _end_message(lost[0], "lost its capacity")
        if failed:
            return "Failed", failed[0].status.reason or "Error", _end_message(failed[0], "failed")
        rank0 = next((a for a in self.members if rank_of(a) == 0), None)
        if rank0 is not None and phase_of(rank0) == "Succeeded":
            # Done once every rank has ended too (a Ray-led gang's workers are stopped by ``gangplanning.settle``).
            done = all(phase_of(a) in phases.ATTEMPT_FINISHED for a in self.members)
            return ("Succeeded", "Completed", "Rank 0 succeeded.") if done else None
        stopped = [a for a in ended if phase_of(a) == "Stopped"]
        if stopped:
            reason = stopped_for or stopped[0].status.reason or "Stopped"
            return "Stopped", reason, _end_message(stopped[0], "was stopped")
        return None


def epochs_of(attempts: Sequence[Object]) -> list[Epoch]:
    """The epochs of the Job's slot (its stored rank attempts), oldest first; members by rank."""
    by_number: dict[int, list[objects.Attempt]] = {}
    stored: dict[int, dict[str, Object]] = {}
    for obj in attempts:
        attempt = views.attempt(obj)
        by_number.setdefault(attempt.spec.number, []).append(attempt)
        stored.setdefault(attempt.spec.number, {})[attempt.metadata.name] = obj
    return [Epoch(n, sorted(members, key=rank_of), stored[n]) for n, members in sorted(by_number.items())]


def representatives(attempts: Sequence[Object]) -> list[Object]:
    """One attempt-shaped object per epoch, as ``Slots`` reads attempts: ``spec`` (index, number) and ``status``
    (phase, reason, message, times, placement and rank 0's checkpoint and cursor)."""
    out = []
    for epoch in epochs_of(attempts):
        rank0 = epoch.stored_of(epoch.members[0])
        status = dict(rank0.get("status") or {})  # rank 0's report, the epoch's own fields written over it
        ended = epoch.outcome()
        starts = [s for a in epoch.members if (s := a.status.start_time)]
        status["startTime"] = max(starts) if epoch.assembled else None
        if ended is None:
            running = {phase_of(a) for a in epoch.live}
            status["phase"] = "Running" if epoch.assembled else _assembling_phase(running)
            status.pop("finishTime", None)
        else:
            status["phase"], status["reason"], status["message"] = ended
            finishes = [f for a in epoch.members if (f := a.status.finish_time)]
            status["finishTime"] = max(finishes, default=None)
        # Not a stored version of any object: without rank 0's resourceVersion, a view of it is never mistaken
        # for rank 0's own (``objects.read`` caches by uid and resourceVersion).
        meta = {k: v for k, v in rank0["metadata"].items() if k != "resourceVersion"}
        out.append(
            {
                "metadata": {**meta, "name": _epoch_name(epoch.members[0])},
                "spec": {**rank0["spec"], "stop": None},
                "status": {k: v for k, v in status.items() if v is not None},
            }
        )
    return out


def assembly_failures(epochs: list[Epoch]) -> int:
    """Consecutive epochs, newest first, that never assembled."""
    count = 0
    for epoch in reversed(epochs):
        ended = epoch.outcome()
        if ended is None or ended[1] not in ASSEMBLY_REASONS:
            break
        count += 1
    return count


def assembly_deadline(epoch: Epoch, spec: JobSpec, time_scale: float = 1.0) -> datetime | None:
    """When the epoch's assembly times out: ``startupTimeout`` (times the test scale) after its hosts were assigned."""
    placed = epoch.provisioned_at()
    if placed is None or epoch.assembled or spec.distributed is None:
        return None
    timeout = units.parse_duration(spec.distributed.startup_timeout)
    return placed + timedelta(seconds=timeout.total_seconds() * time_scale)


def members_for(base: Object, spec: Object, number: int) -> list[Object]:
    """The rank attempts of epoch ``number``, from the attempt ``attempts.attempt_for`` made for the slot (``base``,
    being built) and the Job's stored ``spec`` (``topology`` reads its JSON)."""
    distributed = views.job_spec(spec).distributed
    assert distributed is not None, "members_for is called for distributed Jobs only"
    resolved = topology.shape_of(spec)
    size = resolved[0].nodes if resolved is not None else distributed.nodes or 2
    gpus_per_node = resolved[0].gpus_per_node if resolved is not None else 0
    meta = base["metadata"]
    names = [f"{meta['name']}-r{rank}" for rank in range(size)]
    gang = {
        "size": size,
        "epoch": number,
        "gpusPerNode": gpus_per_node,
        "launcher": distributed.launcher,
        "network": distributed.network,
        "transport": distributed.transport,
        "startupTimeout": distributed.startup_timeout,
        "members": names,
    }
    resources = topology.member_resources(spec)
    out = []
    for rank, name in enumerate(names):
        member_spec = {**base["spec"], "rank": rank, "gang": gang}
        if resources is not None:
            member_spec["resources"] = resources
        member_labels = {**meta.get("labels", {}), labels.GANG_EPOCH: str(number)}
        out.append({**base, "metadata": {**meta, "name": name, "labels": member_labels}, "spec": member_spec})
    return out


def _assembling_phase(live: set[AttemptPhase]) -> AttemptPhase:
    for candidate in ("Starting", "Provisioning"):
        if candidate in live:
            return candidate
    return "Pending"


def _epoch_name(rank0: objects.Attempt) -> str:
    name = rank0.metadata.name
    return name.rsplit("-r", 1)[0] if "-r" in name else name


def _end_message(attempt: objects.Attempt, what: str) -> str:
    status = attempt.status
    detail = (status.message or status.reason or "").strip()
    where = status.placement.offering if status.placement is not None else None
    text = f"Rank {rank_of(attempt)} ({attempt.metadata.name}{f' on {where}' if where else ''}) {what}"
    return f"{text}: {detail}" if detail else f"{text}."


def _missing_message(epoch: Epoch) -> str:
    """Which ranks never came, and how far each got."""
    missing = []
    for attempt in epoch.members:
        status = attempt.status
        if status.start_time:
            continue
        offering = status.placement.offering if status.placement is not None else None
        where = f" on {offering}" if offering else ""
        gang = status.gang
        if gang is not None and gang.failure:
            how = f"could not mesh: {gang.failure}"
        elif gang is not None and gang.probed_time:
            how = "meshed but did not start"
        elif gang is not None and gang.registered_time:
            how = "registered but did not finish probing its peers"
        elif attempt.spec.node:
            how = "its host never registered"
        else:
            how = "was never given a host"
        missing.append(f"rank {rank_of(attempt)} ({attempt.metadata.name}{where}) {how}")
    never = "; ".join(missing) or "every rank started"
    return f"The gang did not assemble within its startupTimeout: {never}."
