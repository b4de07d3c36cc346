"""What one scheduler cycle looks at: the pending Attempts (Works) over the Offerings and Hosts of ``capacity``.

The controller lists the objects (plain JSON dicts with camelCase keys, as served; the shapes are in
``docs/running-jobs.md``) and builds a :class:`Snapshot`. Everything after that is pure: the cycle
never reads a clock, a socket or a global, so a test that builds the same snapshot gets the same
bindings.

Parsing happens once, here: quantities become exact ``Decimal`` bytes or vCPUs, durations become
``timedelta`` and money becomes ``Decimal`` (never ``float``), all through ``nodus.apimachinery.units``.
A ``from_object`` raises ``ValueError`` naming the field when an object is malformed; the caller
decides whether to skip that one object or the whole cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Literal, NamedTuple

from nodus.scheduler import fields
from nodus.scheduler.capacity import Host, Offering, PlatformFee

Interruptible = Literal["Never", "Allow", "Prefer"]
Profile = Literal["Cost", "Speed", "Balanced"]
Network = Literal["Colocated", "Regional", "Global"]
Transport = Literal["Direct", "Auto"]

#: The duration a Work is assumed to run when it declares no ``expectedDuration``.
DEFAULT_EXPECTED_DURATION = timedelta(hours=1)

_MICRO_USD = Decimal("0.000001")
_INTERRUPTIBLE = ("Never", "Allow", "Prefer")
_PROFILES = ("Cost", "Speed", "Balanced")
_NETWORKS = ("Colocated", "Regional", "Global")
_TRANSPORTS = ("Direct", "Auto")


class WorkKey(NamedTuple):
    """The Attempt a Work stands for: its project (namespace) and name."""

    namespace: str
    name: str


class GangKey(NamedTuple):
    """The gang epoch a rank's Attempt belongs to: its project, its Job's uid and the epoch (``spec.number``)."""

    namespace: str
    job_uid: str
    number: int


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """``resources.gpu``: how many GPUs per host, which accelerators, and their floors.

    ``types`` are the entries as written; what they select is decided against the snapshot's
    offerings (see ``filters.Requirements``), because a variant id names its family only there.
    """

    count: int
    types: tuple[str, ...]
    exact: bool
    min_memory: Decimal | None
    min_memory_text: str | None
    nvlink: bool


@dataclass(frozen=True, slots=True)
class GangRequest:
    """``spec.gang`` of one rank's Attempt: the epoch it belongs to, its rank, and where its peers may be.

    ``number`` is the Attempt's ``spec.number``, which every rank of an epoch shares (it is also
    ``spec.gang.epoch``); ``rank`` is ``spec.rank``, 0 to ``size - 1``.
    """

    job_uid: str
    number: int
    size: int
    rank: int
    network: Network
    transport: Transport


@dataclass(frozen=True, slots=True)
class Work:
    """One pending Attempt: the capacity floors and placement rules copied from its Job.

    Floors are None when unset. ``cpu`` is in vCPUs, ``memory`` and ``disk`` in bytes; the ``*_text``
    fields keep what the user wrote, for messages. ``regions`` and ``offerings`` are empty when any
    is allowed.

    A rank of a distributed Job has ``gang``; ``gang_placed`` then holds the offering ids of its
    epoch's siblings that are already placed and not finished (one entry per sibling, sorted). The
    Attempt object does not say this: the controller fills it in from the other Attempts.
    """

    key: WorkKey
    cpu: Decimal | None
    cpu_text: str | None
    memory: Decimal | None
    memory_text: str | None
    disk: Decimal | None
    disk_text: str | None
    gpu: GpuRequest | None
    regions: tuple[str, ...]
    interruptible: Interruptible
    max_rate_usd_per_hour: Decimal | None
    offerings: tuple[str, ...]
    profile: Profile
    expected_duration: timedelta
    # Offerings to take only when nothing else fits (the one that just preempted the slot's last attempt).
    avoid: tuple[str, ...] = ()
    gang: GangRequest | None = None
    gang_placed: tuple[str, ...] = ()
    # ``placement.pool``: only hosts of this Pool in the Work's project (``key.namespace``) may run it.
    pool: str | None = None
    # ``placement.dedicated: true``: the Work takes a whole, empty host and nothing joins it.
    dedicated: bool = False

    @property
    def gang_key(self) -> GangKey | None:
        """The gang epoch this Work is a rank of, or None for a plain Attempt."""
        if self.gang is None:
            return None
        return GangKey(self.key.namespace, self.gang.job_uid, self.gang.number)

    @classmethod
    def from_object(cls, attempt_obj: Mapping[str, Any]) -> Work:
        """Build from a pending Attempt object as served (its spec copies the Job's resources and placement)."""
        metadata, spec = attempt_obj.get("metadata") or {}, attempt_obj.get("spec") or {}
        resources, placement = spec.get("resources") or {}, spec.get("placement") or {}
        max_rate = placement.get("maxRateUSDPerHour")
        expected = spec.get("expectedDuration")
        return cls(
            key=WorkKey(
                fields.required(metadata.get("namespace"), "metadata.namespace"),
                fields.required(metadata.get("name"), "metadata.name"),
            ),
            cpu=fields.quantity(resources.get("cpu"), "spec.resources.cpu"),
            cpu_text=fields.text(resources.get("cpu")),
            memory=fields.quantity(resources.get("memory"), "spec.resources.memory"),
            memory_text=fields.text(resources.get("memory")),
            disk=fields.quantity(resources.get("disk"), "spec.resources.disk"),
            disk_text=fields.text(resources.get("disk")),
            gpu=_gpu_request(resources.get("gpu")),
            regions=tuple(placement.get("regions") or ()),
            interruptible=fields.choice(
                placement.get("interruptible", "Never"), _INTERRUPTIBLE, "spec.placement.interruptible"
            ),
            max_rate_usd_per_hour=None
            if max_rate is None
            else fields.usd(max_rate, "spec.placement.maxRateUSDPerHour"),
            offerings=tuple(placement.get("offerings") or ()),
            profile=fields.choice(placement.get("profile", "Balanced"), _PROFILES, "spec.placement.profile"),
            expected_duration=DEFAULT_EXPECTED_DURATION
            if expected is None
            else fields.duration(expected, "spec.expectedDuration") or timedelta(0),
            avoid=tuple(sorted(str(o) for o in spec.get("avoidOfferings") or ())),
            gang=_gang_request(spec),
            pool=placement.get("pool") or None,
            dedicated=placement.get("dedicated") is True,
        )


def gang_key(attempt_obj: Mapping[str, Any]) -> GangKey | None:
    """The gang epoch of any Attempt object (pending or not), or None for a plain or unreadable one.

    Lenient, unlike :meth:`Work.from_object`: the controller asks this of every Attempt it caches
    to find a pending rank's siblings, and one odd object must not stop the cycle.
    """
    spec = attempt_obj.get("spec") or {}
    namespace = (attempt_obj.get("metadata") or {}).get("namespace")
    job_uid, number = spec.get("jobUID"), spec.get("number")
    if not spec.get("gang") or not isinstance(namespace, str) or not isinstance(job_uid, str):
        return None
    if isinstance(number, bool) or not isinstance(number, int):
        return None
    return GangKey(namespace, job_uid, number)


def format_usd(amount: Decimal) -> str:
    """Render money the way the API writes it: a decimal string with six fractional digits (micro-USD)."""
    return str(amount.quantize(_MICRO_USD, rounding=ROUND_HALF_UP))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one cycle decides over. ``work`` is in queue order (oldest first); ``now`` is the injected clock."""

    cycle: int
    now: datetime
    work: list[Work]
    offerings: list[Offering]
    hosts: list[Host]
    # What a pool attempt pays (the price book's platformFee).
    fee: PlatformFee = field(default_factory=PlatformFee)
    # The providers whose offerings may be cold-started (the controllers' active one; empty: none, only hosts
    # that are up). None: any (estimates, which do not know the controllers' provider).
    cold_start: frozenset[str] | None = None


def _gpu_request(gpu: Mapping[str, Any] | None) -> GpuRequest | None:
    if gpu is None:
        return None
    min_memory = gpu.get("minMemory")
    return GpuRequest(
        count=fields.integer(gpu.get("count") or 1, "spec.resources.gpu.count"),
        types=tuple(str(entry) for entry in gpu.get("type") or ()),
        exact=bool(gpu.get("exact", False)),
        min_memory=fields.quantity(min_memory, "spec.resources.gpu.minMemory"),
        min_memory_text=fields.text(min_memory),
        nvlink=gpu.get("interconnect") == "NVLink",
    )


def _gang_request(spec: Mapping[str, Any]) -> GangRequest | None:
    gang = spec.get("gang")
    if gang is None:
        return None
    size = fields.integer(gang.get("size"), "spec.gang.size")
    rank = fields.integer(spec.get("rank"), "spec.rank")
    if size < 1:
        raise ValueError(f"spec.gang.size must be at least 1, not {size}")
    if not 0 <= rank < size:
        raise ValueError(f"spec.rank must be from 0 to spec.gang.size - 1 ({size - 1}), not {rank}")
    return GangRequest(
        job_uid=fields.required(spec.get("jobUID"), "spec.jobUID"),
        number=fields.integer(spec.get("number"), "spec.number"),
        size=size,
        rank=rank,
        network=fields.choice(gang.get("network", "Colocated"), _NETWORKS, "spec.gang.network"),
        transport=fields.choice(gang.get("transport", "Direct"), _TRANSPORTS, "spec.gang.transport"),
    )
