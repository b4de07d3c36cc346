"""Placing a Work on its Pool: the hosts people bring, in the Work's project (ADR 0048).

A Work with ``placement.pool: P`` runs only on a Ready, schedulable host of Pool P in its own
project, never on an offering, and never on a new host: hosts join a Pool, Nodus does not boot
them. Hosts of a Pool never run another project's Works nor Works without ``pool`` (the cycle never
offers them to those).

Every host of the project's pools gets a verdict, in this order: the wrong pool, not Ready,
cordoned (``spec.unschedulable``), a shape that can never fit (too few GPUs, another accelerator,
too little GPU memory, no NVLink, too few vCPUs, memory or disk), and then what is in use now (a
dedicated attempt, a whole-host attempt, too few free GPUs, vCPUs or memory). Of the hosts that
fit, the best fit is taken: the one that leaves the fewest GPUs free, then by name. The explain
lists the other hosts with their verdicts; the Unschedulable message counts them and says what
would help (wait, uncordon, join a host).

The rate is the price book's platform fee (``snapshot.PlatformFee``), for the GPUs the attempt
takes (a dedicated one takes all of its host's). Gang ranks are not placed on pools yet: they wait
Unschedulable with a message saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from nodus.scheduler import filters
from nodus.scheduler.capacity import PlatformFee, Shape
from nodus.scheduler.rooms import Demand, Room
from nodus.scheduler.snapshot import Work, format_usd

MAX_HOST_LINES = 15
_NOT_IN_POOL = 0
_NOT_READY = 1
_STATIC = 2
_IN_USE = 3


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a pool Work goes: ``room``'s host, ``gpus`` ordinals (None: the whole host), at ``rate``."""

    room: Room
    gpus: tuple[int, ...] | None
    rate: Decimal
    explain: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Why no host of the pool takes the Work now; ``waiting`` when one will once work on it ends."""

    message: str
    waiting: bool


def demand_of(work: Work, need: filters.Requirements) -> Demand:
    """What ``work`` takes of a host: the whole host when dedicated, or CPU-only with no cpu or memory set."""
    whole = work.dedicated or (need.gpus == 0 and need.cpu is None and need.memory is None)
    return Demand(need.gpus, need.cpu, need.memory, whole)


def place(
    cycle: int, work: Work, need: filters.Requirements, rooms: Sequence[Room], fee: PlatformFee
) -> Placed | Refused:
    """Choose a host of ``work``'s pool among ``rooms`` (every pool host of its project, by name); pure.

    The chosen room is not taken here: the caller takes it (``Room.take``) when it binds.
    """
    pool = work.pool
    assert pool is not None
    if work.gang is not None:
        return Refused(
            f"Distributed Jobs are not placed on Pools yet (placement.pool {pool}): run it without "
            "placement.pool, or as single-node Jobs on the pool.",
            False,
        )
    demand = demand_of(work, need)
    verdicts: list[tuple[int, Room, str]] = []
    fitting: list[Room] = []
    for room in rooms:
        stage, reason = _verdict(pool, need, demand, room)
        if reason is None:
            fitting.append(room)
        else:
            verdicts.append((stage, room, reason))
    ours = [room for room in rooms if room.host.pool is not None and room.host.pool.name == pool]
    if need.max_rate is not None and fitting:
        rate = fee.rate(max(_gpus_taken(demand, room) for room in fitting))
        if rate > need.max_rate:
            return Refused(
                f"The platform fee on pool {pool} is ${format_usd(rate)}/h, above placement.maxRateUSDPerHour "
                f"${format_usd(need.max_rate)}. Raise spec.placement.maxRateUSDPerHour or remove it.",
                False,
            )
    if not fitting:
        return Refused(_refusal(pool, work.key.namespace, ours, verdicts), bool(ours) and _may_free_up(verdicts))
    chosen = min(fitting, key=lambda room: (room.left_after(demand), room.host.name))
    taken = _gpus_taken(demand, chosen)
    rate = fee.rate(taken)
    gpus = None if demand.whole and not chosen.gpus else _indexes(chosen, demand)
    return Placed(chosen, gpus, rate, _explain(cycle, pool, chosen, demand, gpus, rate, fee, fitting, verdicts))


def _gpus_taken(demand: Demand, room: Room) -> int:
    return room.gpus if demand.whole else demand.gpus


def _indexes(room: Room, demand: Demand) -> tuple[int, ...]:
    return tuple(room.gpu_indexes) if demand.whole else tuple(room.free_gpus[: demand.gpus])


def _verdict(pool: str, need: filters.Requirements, demand: Demand, room: Room) -> tuple[int, str | None]:
    host = room.host
    if host.pool is None or host.pool.name != pool:
        return _NOT_IN_POOL, f"is in pool {host.pool.name if host.pool else '(none)'}, not {pool}"
    if host.phase != "Ready":
        return _NOT_READY, f"is {host.phase}, not Ready"
    if host.unschedulable:
        return _NOT_READY, "is cordoned (spec.unschedulable)"
    assert host.shape is not None
    static = _never_fits(need, host.shape)
    if static is not None:
        return _STATIC, static
    return _IN_USE, room.why_not(demand)


def _never_fits(need: filters.Requirements, shape: Shape) -> str | None:
    """Why a host of ``shape`` can never run the Work, whatever runs on it, or None."""
    if need.gpus > shape.gpus:
        has = f"has {shape.gpus} GPUs" if shape.gpus else "has no GPUs"
        return f"{has} and the Work asks for {need.gpus}"
    if need.gpus and need.accelerators:
        model = shape.accelerator or f"an unrecognised model ({shape.model or 'unknown'})"
        if need.exact and shape.accelerator not in need.accelerators:
            return f"has {model} GPUs, not {need.accelerators_text} (exact)"
        if not need.exact and (shape.family or "").lower() not in need.accelerators:
            return f"has GPU family {shape.family or model}, not {need.accelerators_text}"
    if need.gpus and need.min_gpu_memory is not None and (shape.gpu_memory or 0) < need.min_gpu_memory:
        return f"has less memory per GPU than gpu.minMemory {need.min_gpu_memory_text}"
    if need.gpus and need.nvlink and shape.interconnect != "nvlink":
        return "lacks NVLink (gpu.interconnect is NVLink)"
    if need.cpu is not None and shape.vcpu < need.cpu:
        return f"has fewer vCPUs ({shape.vcpu.normalize():f}) than resources.cpu {need.cpu_text}"
    if need.memory is not None and shape.memory < need.memory:
        return f"has less memory than resources.memory {need.memory_text}"
    if need.disk is not None and shape.disk < need.disk:
        return f"has less disk than resources.disk {need.disk_text}"
    return None


def _may_free_up(verdicts: Sequence[tuple[int, Room, str]]) -> bool:
    """Whether a host of the pool will take the Work once what runs on it ends (or it comes back)."""
    return any(stage in (_NOT_READY, _IN_USE) for stage, _, _ in verdicts)


def _refusal(pool: str, project: str, ours: Sequence[Room], verdicts: Sequence[tuple[int, Room, str]]) -> str:
    join = f"nodus pools join-token {pool} --project {project}"
    if not ours:
        return (
            f"Pool {pool} has no hosts in project {project}: the Job waits for one. Join a host ({join}, then "
            "nodus agent --join-token ... on it), or check spec.placement.pool."
        )
    lines = [f"{room.host.name} {reason}" for stage, room, reason in verdicts if stage != _NOT_IN_POOL]
    shown = "; ".join(lines[:MAX_HOST_LINES])
    if len(lines) > MAX_HOST_LINES:
        shown += f"; and {len(lines) - MAX_HOST_LINES} more"
    stages = {stage for stage, _, _ in verdicts if stage != _NOT_IN_POOL}
    advice = []
    if _IN_USE in stages:
        advice.append("it is placed when work on a host ends")
    if _NOT_READY in stages:
        advice.append("uncordon or bring back a host")
    if _STATIC in stages:
        advice.append("change spec.resources to fit a host")
    advice.append(f"join a host that fits ({join})")
    head = f"No host of pool {pool} can run it now ({len(ours)} in the pool): {shown}."
    return f"{head} To place it: {'; or '.join(advice)}."


def _explain(
    cycle: int,
    pool: str,
    chosen: Room,
    demand: Demand,
    gpus: tuple[int, ...] | None,
    rate: Decimal,
    fee: PlatformFee,
    fitting: Sequence[Room],
    verdicts: Sequence[tuple[int, Room, str]],
) -> str:
    taken = len(gpus) if gpus is not None else 0
    if taken:
        per_gpu = format_usd(fee.per_gpu_hour)
        price = f"platform fee ${format_usd(rate)}/h = {taken} GPU{'s' if taken > 1 else ''} x ${per_gpu}"
        where = f"GPUs {','.join(str(i) for i in gpus or ())} of {chosen.gpus}"
    else:
        price = f"platform fee ${format_usd(rate)}/h per host-hour"
        where = "no GPUs" if gpus is not None else "the whole host"
    why = (
        "dedicated: the whole, empty host"
        if demand.whole
        else (f"best fit: leaves {chosen.left_after(demand)} GPUs free")
    )
    lines = [f"cycle {cycle}: placed on pool {pool} host {chosen.host.name} ({where}; {price}); {why}"]
    others = [room for room in fitting if room is not chosen]
    lines += [f"  {room.host.name} fits too (would leave {room.left_after(demand)} GPUs free)" for room in others]
    shown = [(room, reason) for _, room, reason in verdicts][:MAX_HOST_LINES]
    if shown:
        lines.append(f"not used: {len(verdicts)} host{'s' if len(verdicts) != 1 else ''}:")
        lines += [f"  {room.host.name} {reason}" for room, reason in shown]
        if len(verdicts) > len(shown):
            lines.append(f"  ... and {len(verdicts) - len(shown)} more")
    return "\n".join(lines)
