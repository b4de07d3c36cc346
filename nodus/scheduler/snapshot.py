"""What one scheduler cycle looks at: typed, frozen views of Offering, Node and pending Attempt objects.

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Literal, NamedTuple

from nodus.apimachinery import units
from nodus.apis.v1 import labels, phases

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
class Offering:
    """One price-book entry: a host shape in one region at one rate, and how many the provider can run.

    ``family`` and ``accelerator`` are None for CPU-only offerings (``gpus == 0``). ``gpu_memory``,
    ``memory`` and ``disk`` are bytes; ``capacity`` None means unknown, which the scheduler treats as
    unlimited.
    """

    id: str
    accelerator: str | None
    family: str | None
    gpus: int
    gpu_memory: Decimal | None
    interconnect: str | None
    vcpu: Decimal
    memory: Decimal
    disk: Decimal
    provider: str
    region: str
    region_class: str
    interruptible: bool
    mean_time_between_interruptions: timedelta | None
    rate_usd_per_hour: Decimal
    boot_p50: timedelta
    boot_p90: timedelta
    capacity: int | None
    # Whether attempts may share one host of it, each with its own GPUs (price book ``shareable``, ADR 0048).
    shareable: bool = False

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Offering:
        """Build from an Offering object as served (``metadata.name`` is the offering id)."""
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        gpus = _integer(spec.get("gpus", 0), "spec.gpus")
        boot = spec.get("boot") or {}
        mtbi = spec.get("meanTimeBetweenInterruptions")
        capacity = status.get("capacity")
        return cls(
            id=_required(obj.get("metadata", {}).get("name"), "metadata.name"),
            accelerator=spec.get("accelerator") if gpus else None,
            family=spec.get("family") if gpus else None,
            gpus=gpus,
            gpu_memory=_quantity(spec.get("gpuMemory"), "spec.gpuMemory") if gpus else None,
            interconnect=spec.get("interconnect"),
            vcpu=_quantity(spec.get("vcpu", 0), "spec.vcpu") or Decimal(0),
            memory=_quantity(spec.get("memory", 0), "spec.memory") or Decimal(0),
            disk=_quantity(spec.get("disk", 0), "spec.disk") or Decimal(0),
            provider=str(spec.get("provider", "")),
            region=str(spec.get("region", "")),
            region_class=str(spec.get("regionClass", "")),
            interruptible=bool(spec.get("interruptible", False)),
            mean_time_between_interruptions=_duration(mtbi, "spec.meanTimeBetweenInterruptions"),
            rate_usd_per_hour=_usd(spec.get("rateUSDPerHour"), "spec.rateUSDPerHour"),
            boot_p50=_duration(boot.get("p50", "0s"), "spec.boot.p50") or timedelta(0),
            boot_p90=_duration(boot.get("p90", boot.get("p50", "0s")), "spec.boot.p90") or timedelta(0),
            capacity=None if capacity is None else _integer(capacity, "status.capacity"),
            shareable=bool(spec.get("shareable", False)),
        )


class PoolRef(NamedTuple):
    """The Pool a host joined: its project and name (a Node's ``spec.pool``)."""

    project: str
    name: str


@dataclass(frozen=True, slots=True)
class PlatformFee:
    """The price book's ``platformFee``: what an hour on a pool host (the customer's own) costs, in USD.

    A pool attempt pays ``per_gpu_hour`` for each GPU it takes, or ``per_host_hour`` when it takes none.
    """

    per_gpu_hour: Decimal = Decimal("0.20")
    per_host_hour: Decimal = Decimal("0.05")

    def rate(self, gpus: int) -> Decimal:
        """The rate of an attempt that takes ``gpus`` GPUs of a pool host."""
        return self.per_gpu_hour * gpus if gpus else self.per_host_hour


@dataclass(frozen=True, slots=True)
class Use:
    """What one unfinished attempt on (or bound to) a host holds of it.

    ``gpus`` are the ordinals of its placement's ``gpuIndexes``; ``whole`` is True when it holds the whole
    host (a placement without ``gpuIndexes``, the old behaviour, or ``placement.dedicated``). ``cpu`` and
    ``memory`` are its requests (None: unset, counted as the host's per-GPU share of what it takes).
    """

    gpus: tuple[int, ...]
    cpu: Decimal | None
    memory: Decimal | None
    whole: bool
    dedicated: bool

    @classmethod
    def from_object(cls, attempt_obj: Mapping[str, Any]) -> Use:
        """What an Attempt object as served holds of the host its placement (or ``spec.node``) names."""
        spec, status = attempt_obj.get("spec") or {}, attempt_obj.get("status") or {}
        placement, resources = status.get("placement") or {}, spec.get("resources") or {}
        dedicated = (spec.get("placement") or {}).get("dedicated") is True
        indexes = placement.get("gpuIndexes")
        return cls(
            gpus=tuple(sorted(int(i) for i in indexes or ())),
            cpu=_quantity(resources.get("cpu"), "spec.resources.cpu"),
            memory=_quantity(resources.get("memory"), "spec.resources.memory"),
            whole=indexes is None or dedicated,
            dedicated=dedicated,
        )


@dataclass(frozen=True, slots=True)
class Shape:
    """What a pool host offers, from its Node's ``status.capacity`` and ``status.gpuIndexes``.

    ``accelerator`` is None when its GPU model is not in the accelerator catalog; ``gpu_memory`` is
    bytes per GPU; ``interconnect`` is ``nvlink``, ``pcie`` or None.
    """

    gpu_indexes: tuple[int, ...]
    accelerator: str | None
    family: str | None
    model: str | None
    gpu_memory: Decimal | None
    interconnect: str | None
    vcpu: Decimal
    memory: Decimal
    disk: Decimal

    @property
    def gpus(self) -> int:
        return len(self.gpu_indexes)

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> Shape:
        capacity = status.get("capacity") or {}
        count = capacity.get("gpus") or 0
        indexes = status.get("gpuIndexes")
        return cls(
            gpu_indexes=tuple(sorted(int(i) for i in indexes)) if indexes is not None else tuple(range(int(count))),
            accelerator=capacity.get("accelerator"),
            family=capacity.get("gpuFamily"),
            model=capacity.get("gpuModel"),
            gpu_memory=_quantity(capacity.get("gpuMemory"), "status.capacity.gpuMemory"),
            interconnect=(str(capacity["interconnect"]).lower() if capacity.get("interconnect") else None),
            vcpu=_quantity(capacity.get("cpu") or 0, "status.capacity.cpu") or Decimal(0),
            memory=_quantity(capacity.get("memory") or 0, "status.capacity.memory") or Decimal(0),
            disk=_quantity(capacity.get("disk") or 0, "status.capacity.disk") or Decimal(0),
        )


@dataclass(frozen=True, slots=True)
class Host:
    """One Node: which offering (or Pool) it is, its phase, and what the attempts on it hold.

    ``busy`` and ``uses`` are not in the Node object: the controller knows them from the Attempts that
    name the node and are not yet finished (``uses`` has one :class:`Use` each; ``busy`` is True when
    there is any, or when the controller has just bound one there). A Node without ``status.phase``
    has just been created by the provisioner, so it is taken to be ``Booting``.

    A pool host (``pool`` set) has no offering: its ``shape`` comes from what its agent discovered.
    An offering's host is shaped by its offering.
    """

    name: str
    offering: str | None
    phase: str
    busy: bool
    unschedulable: bool
    warm_until: datetime | None
    pool: PoolRef | None = None
    shape: Shape | None = None
    uses: tuple[Use, ...] = ()

    @classmethod
    def from_object(cls, node_obj: Mapping[str, Any], busy: bool, uses: Sequence[Use] = ()) -> Host:
        """Build from a Node object as served; ``busy`` says whether an unfinished attempt is on it, ``uses``
        what each of them holds."""
        metadata, spec = node_obj.get("metadata") or {}, node_obj.get("spec") or {}
        status = node_obj.get("status") or {}
        pool = spec.get("pool")
        warm_until = status.get("warmUntil")
        offering: str | None = None
        pool_ref: PoolRef | None = None
        if pool:
            pool_ref = PoolRef(
                _required(pool.get("project"), "spec.pool.project"), _required(pool.get("name"), "spec.pool.name")
            )
        else:
            offering = _required(
                spec.get("offering") or (metadata.get("labels") or {}).get(labels.OFFERING), "spec.offering"
            )
        return cls(
            name=_required(metadata.get("name"), "metadata.name"),
            offering=offering,
            phase=str(status.get("phase") or "Booting"),
            busy=busy or bool(uses),
            unschedulable=bool(spec.get("unschedulable", False)),
            warm_until=None if warm_until is None else units.parse_time(warm_until),
            pool=pool_ref,
            shape=Shape.from_status(status) if pool_ref is not None else None,
            uses=tuple(uses),
        )

    def holds_capacity(self) -> bool:
        """Whether this host counts against its offering's capacity (Booting and Ready ones do)."""
        return self.phase not in phases.NODE_GONE

    def is_idle_at(self, now: datetime) -> bool:
        """Whether a new attempt may be put on this host at ``now`` without booting anything."""
        if self.busy or self.unschedulable or self.phase not in phases.NODE_USABLE:
            return False
        return self.warm_until is None or self.warm_until > now


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
                _required(metadata.get("namespace"), "metadata.namespace"),
                _required(metadata.get("name"), "metadata.name"),
            ),
            cpu=_quantity(resources.get("cpu"), "spec.resources.cpu"),
            cpu_text=_text(resources.get("cpu")),
            memory=_quantity(resources.get("memory"), "spec.resources.memory"),
            memory_text=_text(resources.get("memory")),
            disk=_quantity(resources.get("disk"), "spec.resources.disk"),
            disk_text=_text(resources.get("disk")),
            gpu=_gpu_request(resources.get("gpu")),
            regions=tuple(placement.get("regions") or ()),
            interruptible=_choice(
                placement.get("interruptible", "Never"), _INTERRUPTIBLE, "spec.placement.interruptible"
            ),
            max_rate_usd_per_hour=None if max_rate is None else _usd(max_rate, "spec.placement.maxRateUSDPerHour"),
            offerings=tuple(placement.get("offerings") or ()),
            profile=_choice(placement.get("profile", "Balanced"), _PROFILES, "spec.placement.profile"),
            expected_duration=DEFAULT_EXPECTED_DURATION
            if expected is None
            else _duration(expected, "spec.expectedDuration") or timedelta(0),
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
    fee: PlatformFee = PlatformFee()
    # The providers whose offerings may be cold-started (the controllers' active one; empty: none, only hosts
    # that are up). None: any (estimates, which do not know the controllers' provider).
    cold_start: frozenset[str] | None = None


def _gpu_request(gpu: Mapping[str, Any] | None) -> GpuRequest | None:
    if gpu is None:
        return None
    min_memory = gpu.get("minMemory")
    return GpuRequest(
        count=_integer(gpu.get("count") or 1, "spec.resources.gpu.count"),
        types=tuple(str(entry) for entry in gpu.get("type") or ()),
        exact=bool(gpu.get("exact", False)),
        min_memory=_quantity(min_memory, "spec.resources.gpu.minMemory"),
        min_memory_text=_text(min_memory),
        nvlink=gpu.get("interconnect") == "NVLink",
    )


def _gang_request(spec: Mapping[str, Any]) -> GangRequest | None:
    gang = spec.get("gang")
    if gang is None:
        return None
    size = _integer(gang.get("size"), "spec.gang.size")
    rank = _integer(spec.get("rank"), "spec.rank")
    if size < 1:
        raise ValueError(f"spec.gang.size must be at least 1, not {size}")
    if not 0 <= rank < size:
        raise ValueError(f"spec.rank must be from 0 to spec.gang.size - 1 ({size - 1}), not {rank}")
    return GangRequest(
        job_uid=_required(spec.get("jobUID"), "spec.jobUID"),
        number=_integer(spec.get("number"), "spec.number"),
        size=size,
        rank=rank,
        network=_choice(gang.get("network", "Colocated"), _NETWORKS, "spec.gang.network"),
        transport=_choice(gang.get("transport", "Direct"), _TRANSPORTS, "spec.gang.transport"),
    )


def _required(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} is required")
    return value


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _integer(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field} must be an integer, not {value!r}")
    return value


def _quantity(value: Any, field: str) -> Decimal | None:
    if value is None:
        return None
    try:
        return units.parse_quantity(value)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from exc


def _duration(value: Any, field: str) -> timedelta | None:
    if value is None:
        return None
    try:
        return units.parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from exc


def _usd(value: Any, field: str) -> Decimal:
    try:
        return units.parse_usd(value)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from exc


def _choice(value: Any, allowed: tuple[str, ...], field: str) -> Any:
    if value not in allowed:
        raise ValueError(f"{field} must be one of {', '.join(allowed)}, not {value!r}")
    return value
