"""The supply side of a scheduler snapshot: typed, frozen views of Offerings (price-book entries) and Nodes (hosts).

Built by the controller from the objects as served (camelCase JSON) and read by the pure cycle. ``from_object``
raises ``ValueError`` naming the field when an object is malformed (``nodus.scheduler.fields``); the caller
decides whether to skip that one object or the whole cycle. The demand side (pending Attempts) and the
:class:`~nodus.scheduler.snapshot.Snapshot` itself are in ``nodus.scheduler.snapshot``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, NamedTuple

from nodus.apimachinery import units
from nodus.apis.v1 import labels, phases
from nodus.scheduler import fields


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
        gpus = fields.integer(spec.get("gpus", 0), "spec.gpus")
        boot = spec.get("boot") or {}
        mtbi = spec.get("meanTimeBetweenInterruptions")
        capacity = status.get("capacity")
        return cls(
            id=fields.required(obj.get("metadata", {}).get("name"), "metadata.name"),
            accelerator=spec.get("accelerator") if gpus else None,
            family=spec.get("family") if gpus else None,
            gpus=gpus,
            gpu_memory=fields.quantity(spec.get("gpuMemory"), "spec.gpuMemory") if gpus else None,
            interconnect=spec.get("interconnect"),
            vcpu=fields.quantity(spec.get("vcpu", 0), "spec.vcpu") or Decimal(0),
            memory=fields.quantity(spec.get("memory", 0), "spec.memory") or Decimal(0),
            disk=fields.quantity(spec.get("disk", 0), "spec.disk") or Decimal(0),
            provider=str(spec.get("provider", "")),
            region=str(spec.get("region", "")),
            region_class=str(spec.get("regionClass", "")),
            interruptible=bool(spec.get("interruptible", False)),
            mean_time_between_interruptions=fields.duration(mtbi, "spec.meanTimeBetweenInterruptions"),
            rate_usd_per_hour=fields.usd(spec.get("rateUSDPerHour"), "spec.rateUSDPerHour"),
            boot_p50=fields.duration(boot.get("p50", "0s"), "spec.boot.p50") or timedelta(0),
            boot_p90=fields.duration(boot.get("p90", boot.get("p50", "0s")), "spec.boot.p90") or timedelta(0),
            capacity=None if capacity is None else fields.integer(capacity, "status.capacity"),
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
            cpu=fields.quantity(resources.get("cpu"), "spec.resources.cpu"),
            memory=fields.quantity(resources.get("memory"), "spec.resources.memory"),
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
            gpu_memory=fields.quantity(capacity.get("gpuMemory"), "status.capacity.gpuMemory"),
            interconnect=(str(capacity["interconnect"]).lower() if capacity.get("interconnect") else None),
            vcpu=fields.quantity(capacity.get("cpu") or 0, "status.capacity.cpu") or Decimal(0),
            memory=fields.quantity(capacity.get("memory") or 0, "status.capacity.memory") or Decimal(0),
            disk=fields.quantity(capacity.get("disk") or 0, "status.capacity.disk") or Decimal(0),
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
                fields.required(pool.get("project"), "spec.pool.project"),
                fields.required(pool.get("name"), "spec.pool.name"),
            )
        else:
            offering = fields.required(
                spec.get("offering") or (metadata.get("labels") or {}).get(labels.OFFERING), "spec.offering"
            )
        return cls(
            name=fields.required(metadata.get("name"), "metadata.name"),
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
