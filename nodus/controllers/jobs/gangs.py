"""Gang Jobs in the Job controller: epochs of rank attempts, each read as one run of the Job's slot.

A distributed Job has one slot (index 0, DECISIONS 13). Each start of it is an *epoch*: one Attempt
per rank, ``<job>-0-<n>-r<rank>`` (DECISIONS 3), all with ``number`` n. An epoch is one unit for
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

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from nodus.apimachinery import topology, units
from nodus.controllers.jobs.slots import TERMINAL, is_live, number_of, phase

Object = dict[str, Any]

EPOCH_LABEL = "nodus.dev/gang-epoch"
ASSEMBLY_REASONS = frozenset({"AssemblyTimeout", "AssemblyFailed"})
# Launchers whose other ranks serve rank 0 until it is done (a Ray cluster): they are stopped when it succeeds.
HEAD_LED = frozenset({"Ray", "Verl"})
DEFAULT_STARTUP_TIMEOUT = "15m"


def is_gang(spec: Object) -> bool:
    return isinstance(spec.get("distributed"), dict)


def rank_of(attempt: Object) -> int:
    return int((attempt.get("spec") or {}).get("rank") or 0)


@dataclass
class Epoch:
    """The rank attempts of one gang start, by rank."""

    number: int
    members: list[Object]

    @property
    def size(self) -> int:
        return int(((self.members[0].get("spec") or {}).get("gang") or {}).get("size") or len(self.members))

    @property
    def live(self) -> list[Object]:
        return [a for a in self.members if is_live(a)]

    def count(self, key: str) -> int:
        """How many ranks reported ``status.gang.<key>`` (``registeredTime``, ``probedTime``)."""
        return sum(1 for a in self.members if ((a.get("status") or {}).get("gang") or {}).get(key))

    @property
    def started(self) -> int:
        return sum(1 for a in self.members if (a.get("status") or {}).get("startTime"))

    @property
    def assembled(self) -> bool:
        """Every rank started the command (the gang met; a later loss is a restart, not an assembly failure)."""
        return self.started >= self.size

    def provisioned_at(self) -> datetime | None:
        """When the gang's hosts were assigned (every rank funded, ``provisioningTime``): the assembly clock
        starts then, as billing does; waiting for capacity or for funds is not assembly."""
        times = [t for a in self.members if (t := units.time_or_none((a.get("status") or {}).get("provisioningTime")))]
        return min(times, default=None)

    def stopping_for(self) -> str | None:
        """The reason the controller gave when it stopped this epoch (the same on every rank), if it did."""
        for attempt in self.members:
            reason = ((attempt.get("spec") or {}).get("stop") or {}).get("reason")
            if reason:
                return str(reason)
        return None

    def outcome(self) -> tuple[str, str, str] | None:
        """(phase, reason, message) once the epoch is over for the Job; None while it is still the gang's run."""
        ended = [a for a in self.members if not is_live(a)]
        if not ended:
            return None
        stopped_for = self.stopping_for()
        lost = [a for a in ended if phase(a) == "Lost"]
        failed = [a for a in ended if phase(a) == "Failed"]
        if stopped_for in ASSEMBLY_REASONS:
            return "Stopped", stopped_for, _missing_message(self)
        if lost and not self.assembled:
            return "Stopped", "AssemblyFailed", _end_message(lost[0], "was lost before the gang assembled")
        if lost:
            return "Lost", _reason(lost[0], "NodeLost"), _end_message(lost[0], "lost its capacity")
        if failed:
            return "Failed", _reason(failed[0], "Error"), _end_message(failed[0], "failed")
        rank0 = next((a for a in self.members if rank_of(a) == 0), None)
        if rank0 is not None and phase(rank0) == "Succeeded":
            # Done once every rank has ended too (a Ray-led gang's workers are stopped by ``gangplanning.settle``).
            done = all(phase(a) in TERMINAL for a in self.members)
            return ("Succeeded", "Completed", "Rank 0 succeeded.") if done else None
        stopped = [a for a in ended if phase(a) == "Stopped"]
        if stopped:
            return "Stopped", stopped_for or _reason(stopped[0], "Stopped"), _end_message(stopped[0], "was stopped")
        return None


def epochs_of(attempts: list[Object]) -> list[Epoch]:
    """The epochs of the Job's slot, oldest first; members by rank."""
    by_number: dict[int, list[Object]] = {}
    for attempt in attempts:
        by_number.setdefault(number_of(attempt), []).append(attempt)
    return [Epoch(n, sorted(members, key=rank_of)) for n, members in sorted(by_number.items())]


def representatives(attempts: list[Object]) -> list[Object]:
    """One attempt-shaped object per epoch, as ``Slots`` reads attempts: ``spec`` (index, number) and ``status``
    (phase, reason, message, times, placement and rank 0's checkpoint and cursor)."""
    out = []
    for epoch in epochs_of(attempts):
        rank0 = epoch.members[0]
        status = dict(rank0.get("status") or {})
        ended = epoch.outcome()
        starts = [s for a in epoch.members if (s := (a.get("status") or {}).get("startTime"))]
        status["startTime"] = max(starts) if epoch.assembled else None
        if ended is None:
            phases = {phase(a) for a in epoch.live}
            status["phase"] = "Running" if epoch.assembled else _assembling_phase(phases)
            status.pop("finishTime", None)
        else:
            status["phase"], status["reason"], status["message"] = ended
            finishes = [f for a in epoch.members if (f := (a.get("status") or {}).get("finishTime"))]
            status["finishTime"] = max(finishes, default=None)
        out.append(
            {
                # Not rank 0's resourceVersion: a typed view of this object must not be rank 0's cached one.
                "metadata": {**_unversioned(rank0["metadata"]), "name": _epoch_name(rank0)},
                "spec": {**(rank0.get("spec") or {}), "stop": None},
                "status": {k: v for k, v in status.items() if v is not None},
            }
        )
    return out


def _unversioned(meta: Object) -> Object:
    return {key: value for key, value in meta.items() if key != "resourceVersion"}


def assembly_failures(attempts: list[Object]) -> int:
    """Consecutive epochs, newest first, that never assembled."""
    count = 0
    for epoch in reversed(epochs_of(attempts)):
        ended = epoch.outcome()
        if ended is None or ended[1] not in ASSEMBLY_REASONS:
            break
        count += 1
    return count


def assembly_deadline(epoch: Epoch, spec: Object, time_scale: float = 1.0) -> datetime | None:
    """When the epoch's assembly times out: ``startupTimeout`` (times the test scale) after its hosts were assigned."""
    placed = epoch.provisioned_at()
    if placed is None or epoch.assembled:
        return None
    timeout = units.parse_duration(
        str((spec.get("distributed") or {}).get("startupTimeout") or DEFAULT_STARTUP_TIMEOUT)
    )
    return placed + timedelta(seconds=timeout.total_seconds() * time_scale)


def members_for(base: Object, spec: Object, number: int) -> list[Object]:
    """The rank attempts of epoch ``number``, from the attempt ``attempts.attempt_for`` made for the slot."""
    distributed = spec["distributed"]
    resolved = topology.shape_of(spec)
    size = resolved[0].nodes if resolved is not None else int(distributed.get("nodes") or 2)
    gpus_per_node = resolved[0].gpus_per_node if resolved is not None else 0
    meta = base["metadata"]
    names = [f"{meta['name']}-r{rank}" for rank in range(size)]
    gang = {
        "size": size,
        "epoch": number,
        "gpusPerNode": gpus_per_node,
        "launcher": distributed.get("launcher") or "Plain",
        "network": distributed.get("network") or "Colocated",
        "transport": distributed.get("transport") or "Direct",
        "startupTimeout": distributed.get("startupTimeout") or DEFAULT_STARTUP_TIMEOUT,
        "members": names,
    }
    resources = topology.member_resources(spec)
    out = []
    for rank, name in enumerate(names):
        member_spec = {**base["spec"], "rank": rank, "gang": gang}
        if resources is not None:
            member_spec["resources"] = resources
        labels = {**meta.get("labels", {}), EPOCH_LABEL: str(number)}
        out.append({**base, "metadata": {**meta, "name": name, "labels": labels}, "spec": member_spec})
    return out


def _assembling_phase(phases: set[str]) -> str:
    for candidate in ("Starting", "Provisioning"):
        if candidate in phases:
            return candidate
    return "Pending"


def _epoch_name(rank0: Object) -> str:
    name = str(rank0["metadata"]["name"])
    return name.rsplit("-r", 1)[0] if "-r" in name else name


def _reason(attempt: Object, default: str) -> str:
    return str((attempt.get("status") or {}).get("reason") or default)


def _end_message(attempt: Object, what: str) -> str:
    status = attempt.get("status") or {}
    detail = str(status.get("message") or status.get("reason") or "").strip()
    where = (status.get("placement") or {}).get("offering")
    text = f"Rank {rank_of(attempt)} ({attempt['metadata']['name']}{f' on {where}' if where else ''}) {what}"
    return f"{text}: {detail}" if detail else f"{text}."


def _missing_message(epoch: Epoch) -> str:
    """Which ranks never came, and how far each got."""
    missing = []
    for attempt in epoch.members:
        status = attempt.get("status") or {}
        gang = status.get("gang") or {}
        if status.get("startTime"):
            continue
        offering = (status.get("placement") or {}).get("offering")
        where = f" on {offering}" if offering else ""
        if gang.get("failure"):
            how = f"could not mesh: {gang['failure']}"
        elif gang.get("probedTime"):
            how = "meshed but did not start"
        elif gang.get("registeredTime"):
            how = "registered but did not finish probing its peers"
        elif (attempt.get("spec") or {}).get("node"):
            how = "its host never registered"
        else:
            how = "was never given a host"
        missing.append(f"rank {rank_of(attempt)} ({attempt['metadata']['name']}{where}) {how}")
    never = "; ".join(missing) or "every rank started"
    return f"The gang did not assemble within its startupTimeout: {never}."
