"""Whether an offering can run a Work at all: pure filters over (requirements, offering).

A Work's resources and placement are turned into :class:`Requirements` once per cycle; from then on
every check against an offering is a few attribute compares, because the benchmark asks for
1,000 Works over 200 offerings per cycle. Requirements are hashable, so the cycle evaluates each
distinct shape against the offerings only once, however many Attempts share it.

Each filter returns None when the offering passes, or a short reason. A reason is a plural
predicate that reads after a count ("12 have another GPU family than [H100]"); ``explaining``
turns it into the singular for one offering ("h100-x8-us has ..."). Filters run in the order of
:data:`FILTERS` and an offering is reported under the first one it fails, so the order goes from
what the user restricted most explicitly to what is nearest to fitting: an offering rejected late
(by price, or because it is full) was a near miss.

Capacity is not here as a static filter: it changes as the cycle binds, so the cycle checks it
and words it with :func:`full_reason`, as stage :data:`CAPACITY_STAGE`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from nodus.scheduler.capacity import Offering
from nodus.scheduler.snapshot import Interruptible, Work, format_usd


@dataclass(frozen=True, slots=True)
class Requirements:
    """What a Work needs from an offering, resolved against the snapshot's offerings.

    ``accelerators`` holds lower-cased family names, or (when ``exact``) variant ids as written;
    empty means any accelerator. ``gpus`` is 0 for CPU-only Work. The ``*_text`` fields are what the
    user wrote, kept for messages.
    """

    gpus: int
    exact: bool
    accelerators: frozenset[str]
    accelerators_text: str
    min_gpu_memory: Decimal | None
    min_gpu_memory_text: str | None
    nvlink: bool
    regions: frozenset[str]
    regions_text: str
    interruptible: Interruptible
    cpu: Decimal | None
    cpu_text: str | None
    memory: Decimal | None
    memory_text: str | None
    disk: Decimal | None
    disk_text: str | None
    max_rate: Decimal | None
    offerings: frozenset[str]
    offerings_text: str
    # placement.dedicated: a whole host, so a shareable offering's GPU count must still equal the request.
    dedicated: bool = False

    @classmethod
    def of(cls, work: Work, families: Mapping[str, str]) -> Requirements:
        """Resolve ``work`` against ``families`` (name -> family, from :func:`family_names`).

        Without ``exact``, a ``gpu.type`` entry is a family in any case (``h100``) or a variant id
        standing for its family; an entry that is neither stays a family name and matches nothing.
        """
        gpu = work.gpu
        accelerators: frozenset[str] = frozenset()
        shown: list[str] = []
        if gpu is not None and gpu.exact:
            accelerators, shown = frozenset(gpu.types), list(gpu.types)
        elif gpu is not None:
            named = [families.get(entry) or families.get(entry.lower()) or entry for entry in gpu.types]
            accelerators = frozenset(name.lower() for name in named)
            shown = list(dict.fromkeys(named))
        return cls(
            gpus=0 if gpu is None else gpu.count,
            exact=gpu is not None and gpu.exact,
            accelerators=accelerators,
            accelerators_text=_listed(shown),
            min_gpu_memory=None if gpu is None else gpu.min_memory,
            min_gpu_memory_text=None if gpu is None else gpu.min_memory_text,
            nvlink=gpu is not None and gpu.nvlink,
            regions=frozenset(region.lower() for region in work.regions),
            regions_text=_listed(work.regions),
            interruptible=work.interruptible,
            cpu=work.cpu,
            cpu_text=work.cpu_text,
            memory=work.memory,
            memory_text=work.memory_text,
            disk=work.disk,
            disk_text=work.disk_text,
            max_rate=work.max_rate_usd_per_hour,
            offerings=frozenset(work.offerings),
            offerings_text=_listed(work.offerings),
            dedicated=work.dedicated,
        )


def family_names(offerings: Iterable[Offering]) -> dict[str, str]:
    """The family each name stands for, as the snapshot's offerings declare it.

    Keys are variant ids as written and lower-cased (``h100-sxm-80g``) and lower-cased family names
    (``h100``); values are the family as the offerings spell it (``H100``).
    """
    names: dict[str, str] = {}
    for o in offerings:
        if o.accelerator is not None and o.family is not None:
            names[o.accelerator] = names[o.accelerator.lower()] = names[o.family.lower()] = o.family
    return names


def listed_offering(need: Requirements, offering: Offering) -> str | None:
    if need.offerings and offering.id not in need.offerings:
        return f"are not in placement.offerings {need.offerings_text}"
    return None


def gpu_presence(need: Requirements, offering: Offering) -> str | None:
    if need.gpus == 0 and offering.gpus:
        return "have GPUs and the Work asks for none (resources.gpu is unset)"
    if need.gpus and not offering.gpus:
        return "have no GPUs"
    return None


def accelerator(need: Requirements, offering: Offering) -> str | None:
    if not need.accelerators or offering.gpus == 0:
        return None
    if need.exact:
        if offering.accelerator not in need.accelerators:
            return f"have another accelerator than {need.accelerators_text} (exact)"
    elif (offering.family or "").lower() not in need.accelerators:
        return f"have another GPU family than {need.accelerators_text}"
    return None


def shares(need: Requirements, offering: Offering) -> bool:
    """Whether the Work would take a share of a host of ``offering`` (its own GPUs) rather than the whole host."""
    return offering.shareable and bool(need.gpus) and not need.dedicated


def gpu_count(need: Requirements, offering: Offering) -> str | None:
    # A whole host must have exactly the GPUs asked for; a shareable one at least as many (ADR 0048).
    if not need.gpus or offering.gpus == need.gpus:
        return None
    if shares(need, offering):
        return None if offering.gpus > need.gpus else f"have fewer GPUs per host than {need.gpus}"
    return f"have another GPU count per host than {need.gpus}"


def gpu_memory(need: Requirements, offering: Offering) -> str | None:
    if need.min_gpu_memory is not None and (offering.gpu_memory or 0) < need.min_gpu_memory:
        return f"have less memory per GPU than gpu.minMemory {need.min_gpu_memory_text}"
    return None


def interconnect(need: Requirements, offering: Offering) -> str | None:
    if need.nvlink and offering.interconnect != "NVLink":
        return "lack NVLink (gpu.interconnect is NVLink)"
    return None


def region(need: Requirements, offering: Offering) -> str | None:
    if need.regions and offering.region_class.lower() not in need.regions:
        return f"are outside placement.regions {need.regions_text}"
    return None


def interruptibility(need: Requirements, offering: Offering) -> str | None:
    if need.interruptible == "Never" and offering.interruptible:
        return "are interruptible and placement.interruptible is Never"
    return None


def cpu(need: Requirements, offering: Offering) -> str | None:
    if need.cpu is not None and offering.vcpu < need.cpu:
        return f"have fewer vCPUs than resources.cpu {need.cpu_text}"
    return None


def memory(need: Requirements, offering: Offering) -> str | None:
    if need.memory is not None and offering.memory < need.memory:
        return f"have less memory than resources.memory {need.memory_text}"
    return None


def disk(need: Requirements, offering: Offering) -> str | None:
    if need.disk is not None and offering.disk < need.disk:
        return f"have less disk than resources.disk {need.disk_text}"
    return None


def max_rate(need: Requirements, offering: Offering) -> str | None:
    if need.max_rate is not None and offering.rate_usd_per_hour > need.max_rate:
        return f"cost more than placement.maxRateUSDPerHour {format_usd(need.max_rate)}"
    return None


def full_reason(in_use: int, capacity: int) -> str:
    """The reason for an offering that fits but has no host left to give (stage :data:`CAPACITY_STAGE`)."""
    return f"are full ({in_use} of {capacity} {'host' if capacity == 1 else 'hosts'} in use)"


def unbooted_reason(provider: str, active: frozenset[str] | None) -> str:
    """The reason for an offering that fits but whose hosts no active provider boots (and none is up)."""
    if not active:
        return f"have no host up, and no provider boots {provider} hosts (the controllers run with --provider none)"
    return f"have no host up, and the active provider ({', '.join(sorted(active))}) does not boot {provider} hosts"


Check = Callable[["Requirements", Offering], "str | None"]


@dataclass(frozen=True, slots=True)
class Filter:
    """One filter and the Job field a user changes to get past it (named in Unschedulable messages)."""

    name: str
    changes: str
    check: Check


FILTERS: tuple[Filter, ...] = (
    Filter("offerings", "spec.placement.offerings", listed_offering),
    Filter("gpu", "spec.resources.gpu", gpu_presence),
    Filter("gpu-type", "spec.resources.gpu.type", accelerator),
    Filter("gpu-count", "spec.resources.gpu.count", gpu_count),
    Filter("gpu-memory", "spec.resources.gpu.minMemory", gpu_memory),
    Filter("interconnect", "spec.resources.gpu.interconnect", interconnect),
    Filter("regions", "spec.placement.regions", region),
    Filter("interruptible", "spec.placement.interruptible", interruptibility),
    Filter("cpu", "spec.resources.cpu", cpu),
    Filter("memory", "spec.resources.memory", memory),
    Filter("disk", "spec.resources.disk", disk),
    Filter("max-rate", "spec.placement.maxRateUSDPerHour", max_rate),
)
#: The stage number of the capacity check, after every static filter.
CAPACITY_STAGE = len(FILTERS)


def applicable(need: Requirements) -> tuple[tuple[int, Check], ...]:
    """The (stage, check) pairs that can reject anything for ``need``; the rest would always pass.

    The cycle calls this once per requirement shape, so the per-offering loop skips checks for
    what the Work leaves unset.
    """
    unset = {
        "offerings": not need.offerings,
        "gpu-type": not need.accelerators,
        "gpu-count": not need.gpus,
        "gpu-memory": need.min_gpu_memory is None,
        "interconnect": not need.nvlink,
        "regions": not need.regions,
        "interruptible": need.interruptible != "Never",
        "cpu": need.cpu is None,
        "memory": need.memory is None,
        "disk": need.disk is None,
        "max-rate": need.max_rate is None,
    }
    return tuple((stage, f.check) for stage, f in enumerate(FILTERS) if not unset.get(f.name, False))


def first_rejection(need: Requirements, offering: Offering) -> tuple[int, str] | None:
    """The stage (index into :data:`FILTERS`) and reason of the first filter ``offering`` fails, or None if it fits."""
    for stage, check in applicable(need):
        reason = check(need, offering)
        if reason is not None:
            return stage, reason
    return None


def screen(need: Requirements, offerings: Iterable[Offering]) -> tuple[list[Offering], list[tuple[int, str, str]]]:
    """Split ``offerings`` into those that fit and (stage, offering id, reason) for the others, keeping their order.

    The same verdicts as :func:`first_rejection` per offering, in one loop: this is the cycle's hot
    path (shapes x offerings), where a call per pair would double its cost.
    """
    checks = applicable(need)
    fitting: list[Offering] = []
    rejected: list[tuple[int, str, str]] = []
    for offering in offerings:
        for stage, check in checks:
            reason = check(need, offering)
            if reason is not None:
                rejected.append((stage, offering.id, reason))
                break
        else:
            fitting.append(offering)
    return fitting, rejected


def _listed(values: Iterable[str], limit: int = 4) -> str:
    items = list(values)
    if len(items) > limit:
        items = [*items[:limit], f"+{len(items) - limit} more"]
    return "[" + ", ".join(items) + "]"
