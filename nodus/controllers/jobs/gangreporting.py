"""What a gang Job's status says about its gang, and which gang checkpoint a new epoch restores.

Pure functions over the rank attempts (``gangs.Epoch``), called by ``planning``.

* ``status.gang`` (:func:`report`): the current epoch's members (rank, attempt, offering, region class,
  path to rank 0, phase), how many ranks are ``ready`` (registered and probed) and ``started``, rank 0's
  ``rendezvous``, the ``probe`` (the slowest round trip and the lowest ring bandwidth any rank measured,
  on the weakest path) and the gang ``phase``.
* **Gang checkpoints** (:func:`latest_checkpoint`): each rank uploads its own shard and lists it in
  ``status.gang.shards`` under the request it answered; a gang checkpoint is committed once every rank of
  one epoch lists a shard for the same request. A new epoch restores the newest such set: rank r gets
  its own shard as ``spec.restore`` and every rank's in ``spec.gang.restoreShards``.
* **Cadence** (:func:`checkpoint_due`): a gang checkpoint is one request to every rank at once, so the
  controller, not each agent, keeps the interval; the request is the time it was made.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from nodus.apimachinery import units
from nodus.apis.v1 import objects
from nodus.apis.v1.attempt import AttemptPlacement
from nodus.apis.v1.attemptgang import AttemptGangStatus, MeshProbe
from nodus.apis.v1.jobspec import JobSpec
from nodus.controllers.jobs.gangs import Epoch, is_live, phase_of, rank_of
from nodus.scheduler.gangs import PathClass, admits, located_path

Object = dict[str, Any]

# The weakest path wins: a gang is as fast as its slowest pair.
PATH_ORDER: Final = ("Private", "Direct", "Public", "Relayed")
# "auto" for a gang: the agents cannot measure a collective save's cost, so a fixed cadence (ADR 0025).
AUTO_GANG_INTERVAL: Final = timedelta(minutes=30)
# What a rank without a placement or without a gang report reads as.
_UNPLACED: Final = AttemptPlacement()
_NO_GANG: Final = AttemptGangStatus()


def path_between(a: AttemptPlacement, b: AttemptPlacement) -> PathClass:
    """The path class between two members' placements (``status.placement``: provider and region), by the
    scheduler's rule (``nodus.scheduler.gangs.located_path``); one offering is one place even without them."""
    if a.offering == b.offering and a.offering:
        return "Private"
    return located_path((a.provider or "", a.region or ""), (b.provider or "", b.region or ""))


def weakest(paths: list[str]) -> str | None:
    return max(paths, key=PATH_ORDER.index, default=None)


def member_paths(epoch: Epoch) -> dict[int, str]:
    """Each placed rank's path to rank 0 (the rendezvous)."""
    placements = {rank_of(a): _placement(a) for a in epoch.members}
    head = placements.get(0) or _UNPLACED
    return {rank: path_between(head, p) for rank, p in placements.items() if p.offering and head.offering}


def refused_path(epoch: Epoch, transport: str) -> str | None:
    """A message when the epoch's placements would mesh over a path ``transport`` does not admit."""
    placed = [(_placement(a), rank_of(a)) for a in epoch.members if _placement(a).offering]
    for i, (a, ra) in enumerate(placed):
        for b, rb in placed[i + 1 :]:
            path = path_between(a, b)
            if not admits("Auto" if transport == "Auto" else "Direct", path):
                return (
                    f"ranks {ra} and {rb} would connect over a {path} path, which transport {transport} does not "
                    "admit (Direct admits Private and Direct paths; set distributed.transport: Auto to allow it)"
                )
    return None


def report(status: Object, epoch: Epoch | None, epochs: list[Epoch], gang_phase: str) -> None:
    """Write ``status.gang`` (of the status being built) for the current ``epoch`` (None: nothing created yet)."""
    if epoch is None:
        status["gang"] = {"phase": gang_phase, "epoch": 0, "restarts": 0}
        return
    paths = member_paths(epoch)
    members = []
    for attempt in epoch.members:
        placement = _placement(attempt)
        member: Object = {"rank": rank_of(attempt), "attempt": attempt.metadata.name, "phase": phase_of(attempt)}
        if placement.offering:
            member.update(offering=placement.offering, regionClass=placement.region_class)
        if rank_of(attempt) in paths:
            member["path"] = paths[rank_of(attempt)]
        members.append({k: v for k, v in member.items() if v is not None})
    gang: Object = {
        "phase": gang_phase,
        "epoch": epoch.number,
        "size": epoch.size,
        "members": members,
        "ready": sum(1 for a in epoch.members if _gang(a).probed_time and (is_live(a) or a.status.start_time)),
        "started": epoch.started,
        "restarts": restarts(epochs),
    }
    rendezvous = _gang(epoch.members[0]).rendezvous
    if rendezvous:
        gang["rendezvous"] = rendezvous
    probe = _probe(epoch, weakest(list(paths.values())))
    if probe:
        gang["probe"] = probe
        gang["transport"] = probe["path"]
    status["gang"] = gang


def restarts(epochs: list[Epoch]) -> int:
    """Epochs started after the gang had assembled once: every restart, whatever caused it."""
    first = next((i for i, e in enumerate(epochs) if e.assembled), None)
    return 0 if first is None else len(epochs) - first - 1


def _probe(epoch: Epoch, path: str | None) -> Object | None:
    measured: list[MeshProbe] = [p for a in epoch.members if (p := _gang(a).probe) is not None]
    if len(measured) < epoch.size or path is None:
        return None
    return {
        "rttMs": str(max(_number(p.rtt_ms) for p in measured)),
        "busGbps": str(min(_number(p.bus_gbps) for p in measured)),
        "path": path,
        "measuredTime": max(p.measured_time or "" for p in measured) or None,
    }


def latest_checkpoint(epochs: list[Epoch]) -> list[Object] | None:
    """The newest gang checkpoint every rank of one epoch committed a shard of: one ``GangShard`` per rank."""
    best: tuple[str, list[Object]] | None = None
    for epoch in epochs:
        by_request: dict[str, dict[int, Object]] = {}
        for attempt in epoch.members:
            for shard in _gang(attempt).shards or ():
                by_request.setdefault(shard.request, {})[rank_of(attempt)] = {
                    "rank": rank_of(attempt),
                    "attempt": attempt.metadata.name,
                    "manifest": shard.manifest,
                    "seq": shard.seq,
                    **({"size": shard.size} if shard.size is not None else {}),
                }
        for request, shards in by_request.items():
            if len(shards) == epoch.size and (best is None or request > best[0]):
                best = (request, [shards[r] for r in sorted(shards)])
    return best[1] if best is not None else None


def checkpoint_due(epoch: Epoch, spec: JobSpec, now: datetime, time_scale: float = 1.0) -> datetime | None:
    """When the next gang checkpoint should be requested (None: not a Checkpointed gang that runs)."""
    recovery = spec.recovery
    if recovery.continuity != "Checkpointed" or not epoch.assembled:
        return None
    text = recovery.checkpoint.interval
    interval = AUTO_GANG_INTERVAL if text == "auto" else units.parse_duration(text)
    asked = [units.time_or_none(a.spec.checkpoint_request) for a in epoch.live]
    starts = [units.time_or_none(a.status.start_time) for a in epoch.members]
    since = max([t for t in asked + starts if t is not None], default=now)
    return since + timedelta(seconds=interval.total_seconds() * time_scale)


def _placement(attempt: objects.Attempt) -> AttemptPlacement:
    return attempt.status.placement or _UNPLACED


def _gang(attempt: objects.Attempt) -> AttemptGangStatus:
    return attempt.status.gang or _NO_GANG


def _number(text: str | None) -> Decimal:
    try:
        return Decimal(str(text))
    except InvalidOperation:
        return Decimal(0)
