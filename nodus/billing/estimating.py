"""The cost estimate of a Job before launch (``status.estimate``): a pure function of what was read.

The API server reads the offerings and hosts, the project's earlier runs of the same program, its
available credit and Budgets (``nodus/api/estimates.py``); :func:`estimate` turns them into the
Estimate as served. Nothing here reads a clock or a database: the same inputs give the same estimate.

How the figures are made (docs/billing.md, ADR 0019):

* **Placement**: the scheduler's own cycle (:func:`nodus.scheduler.cycle.run_cycle`) over a snapshot
  holding only this Job's first slot, so the preview is what the scheduler would choose now. When
  every fitting offering is full the preview ignores capacity (warning ``CapacityBusy``); when none
  fits there is no preview and no money figure (warning ``CapacityUnavailable``).
* **Duration per index** (P50/P90): ``expectedDuration`` (P90 = 1.25 x, or the spread of earlier
  runs when there are enough), else the running times of the project's earlier successful runs of
  the same image, command and args (of the newest :data:`HISTORY_SAMPLES`, the order statistics of
  rank ceil(p x (k + 1)): a prediction bound for the next run, where the plain sample quantile covers
  less than p; with too few runs for the P90 rank, 1.25 x the longest), else
  :data:`DEFAULT_DURATION` (P90 twice that, warning ``NoExpectedDuration``). On interruptible
  capacity the expected re-work is added as the scheduler adds it.
* **Startup**: the offering's boot band, or the boot times of earlier cold runs when there are
  enough; warm: earlier warm starts.
* **Cost per index** exactly as the billing controller charges (ADR 0017): Boot, Running and the
  rounding of the billed time up to the increment, each rounded to the micro-dollar. ``overheadUSD``
  is everything but the program's own running time. For ``n`` allocations (indexes x gang members)
  the sum is about normal: one allocation's cost is taken as log-normal through its P50 and P90
  (it is skewed: its mean is above its median), and P50 = n x mean, P90 = n x mean + 1.2816 x
  sqrt(n) x standard deviation.
* **Holds**: one slot's hold (``holdUSD``: the funded window at the rate plus the minimum charge, as
  the billing controller places it), ``concurrentHoldUSD`` for the slots that start at once, and for
  a gang the members' holds together, which is then the first hold.
* **Blocking reasons** (a real create answers them as an error): the first hold above the Job's
  ``maxCostUSD`` (``MaxCostBelowHold``), the project's available credit (``InsufficientCredits``) or a
  matching Budget's room (``BudgetExceeded``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

from nodus.apimachinery import topology, units
from nodus.apimachinery.money import INCREMENT_SECONDS, MICRO, charge, hold_for, text
from nodus.scheduler import scoring
from nodus.scheduler.capacity import Host, Offering, PlatformFee
from nodus.scheduler.cycle import Binding, Unschedulable, run_cycle
from nodus.scheduler.snapshot import Snapshot, Work, format_usd

DEFAULT_DURATION = timedelta(hours=1)
# A timed-out assembly is still billed while its members stop: the controller notices, and each member has up
# to its stop grace (30 s) to end. The assembly bound allows this much beyond startupTimeout.
ASSEMBLY_STOP_ALLOWANCE = Decimal(60)
#: How long an estimate's prices are current (``validUntil``); a bound create ignores it.
VALIDITY = timedelta(minutes=15)
HISTORY_SAMPLES = 200
MIN_QUANTILE_SAMPLES = 5
DECLARED_P90_FACTOR = Decimal("1.25")
#: The standard normal's 90th percentile.
Z90 = Decimal("1.2815516")
_Z = Decimal(0)


@dataclass(frozen=True)
class Run:
    """One earlier successful run of the same program: seconds from capacity to start, and running."""

    boot: Decimal
    running: Decimal
    warm: bool
    finished: datetime


@dataclass(frozen=True)
class Room:
    """What a Budget that matches the Job still allows (``remaining``) and its limit."""

    name: str
    limit: Decimal
    remaining: Decimal


@dataclass(frozen=True)
class Inputs:
    """Everything one estimate looks at. ``job`` is the Job as it will be stored (defaults applied)."""

    job: Mapping[str, Any]
    offerings: Sequence[Offering]
    hosts: Sequence[Host]
    history: Sequence[Run]
    available: Decimal
    budgets: Sequence[Room]
    pricebook_version: str
    funded_window: timedelta
    now: datetime
    # What an attempt on a Pool host pays (the price book's platformFee).
    fee: PlatformFee = field(default_factory=PlatformFee)


@dataclass(frozen=True)
class _Band:
    p50: Decimal
    p90: Decimal

    def text(self) -> dict[str, str]:
        return {"p50": text(self.p50), "p90": text(self.p90)}

    def duration(self) -> dict[str, str]:
        return {"p50": _go(self.p50), "p90": _go(self.p90)}


Placer = Callable[[Inputs, Decimal], tuple[Binding | None, str]]


def estimate(inputs: Inputs, place: Placer | None = None) -> dict[str, Any]:
    """The Estimate for ``inputs`` as served (camelCase, amounts as decimal strings). ``place`` (default
    :func:`placement`) may be a memo of it: the API server reuses a placement for Jobs of the same shape."""
    spec = inputs.job.get("spec") or {}
    warnings: list[dict[str, str]] = []
    duration, duration_note = _duration(spec, inputs.history)
    if duration_note is not None:
        warnings.append(duration_note)
    result: dict[str, Any] = {"pricebookVersion": inputs.pricebook_version}
    binding, full = (place or placement)(inputs, duration.p50)
    if binding is None:
        warnings.append(_warning("CapacityUnavailable", full))
        result["warnings"] = warnings
        result["validUntil"] = units.format_time(inputs.now + VALIDITY)
        return result
    if full:
        warnings.append(_warning("CapacityBusy", full))
    # A pool host is up already (no boot) and never interrupted: its time is the program's, at the platform fee.
    offering = next((o for o in inputs.offerings if o.id == binding.offering), None) if binding.offering else None
    rate = binding.rate_usd_per_hour
    if offering is None:
        startup_cold, startup_warm = _Band(_Z, _Z), None
        run = duration
    else:
        startup_cold, startup_warm = _startup(offering, inputs.history)
        run = _Band(_rework(offering, duration.p50), _rework(offering, duration.p90))
    boot = _Band(_Z, _Z) if binding.warm_reuse else startup_cold
    per_index = _Band(_cost(rate, boot.p50, run.p50), _cost(rate, boot.p90, run.p90))
    program = _Band(charge(rate, duration.p50), charge(rate, duration.p90))
    indexes = int(spec.get("completions") or 1)
    members = _members(spec)
    allocations = indexes * members
    cost = _total(per_index, allocations)
    overhead = _total(_Band(per_index.p50 - program.p50, max(per_index.p90 - program.p90, _Z)), allocations)
    slot_hold = hold_for(rate, Decimal(str(inputs.funded_window.total_seconds())))
    concurrent = min(int(spec.get("parallelism") or 1), indexes) * members
    first_hold = slot_hold * members
    result.update(
        costUSD=cost.text(),
        overheadUSD=overhead.text(),
        rateUSDPerHour=text(rate),
        holdUSD=text(first_hold),
        concurrentHoldUSD=text(slot_hold * concurrent),
        minimumChargeUSD=text(charge(rate, Decimal(INCREMENT_SECONDS))),
        placementPreview=_preview(binding, inputs.fee),
        startup={"cold": startup_cold.duration(), **({"warm": startup_warm.duration()} if startup_warm else {})},
    )
    if members > 1:
        result["gangHoldUSD"] = text(first_hold)
        result["assemblyBoundUSD"] = text(_assembly_bound(spec, rate, members))
        gpus = offering.gpus if offering is not None else 0
        family = offering.family if offering is not None else None
        result["topology"] = f"{members}x{gpus}x{family}" if gpus else f"{members}xCPU"
    blocking_reasons = blocking(inputs, first_hold)
    if blocking_reasons:
        result["blockingReasons"] = blocking_reasons
    warnings += _notes(inputs, spec, binding, offering, startup_cold, slot_hold, concurrent, cost, first_hold)
    if warnings:
        result["warnings"] = warnings
    result["validUntil"] = units.format_time(inputs.now + VALIDITY)
    return result


def _duration(spec: Mapping[str, Any], history: Sequence[Run]) -> tuple[_Band, dict[str, str] | None]:
    declared = spec.get("expectedDuration")
    runs = sorted(history, key=lambda r: r.finished, reverse=True)[:HISTORY_SAMPLES]
    if declared:
        seconds = _secs(units.parse_duration(str(declared)))
        factor = DECLARED_P90_FACTOR
        if len(runs) >= MIN_QUANTILE_SAMPLES:
            # The program's own spread, measured, beats a fixed margin.
            observed = _quantiles([r.running for r in runs])
            if observed.p50 > 0:
                factor = max(observed.p90 / observed.p50, Decimal(1))
        return _Band(seconds, (seconds * factor).quantize(Decimal(1))), None
    if runs:
        band = _quantiles([r.running for r in runs])
        return band, _warning(
            "DurationFromHistory",
            f"no expectedDuration: the duration comes from {len(runs)} earlier run(s) of the same image and "
            f"command in this project (P50 {_go(band.p50)}, P90 {_go(band.p90)})",
        )
    seconds = _secs(DEFAULT_DURATION)
    return _Band(seconds, seconds * 2), _warning(
        "NoExpectedDuration",
        f"no expectedDuration and no earlier run of the same image and command in this project: the estimate "
        f"assumes {_go(seconds)} (P90 {_go(seconds * 2)}). Set spec.expectedDuration for a closer estimate.",
    )


def _quantiles(samples: Sequence[Decimal]) -> _Band:
    ordered = sorted(samples)
    p50, p90 = _bound(ordered, 50), _bound(ordered, 90)
    if p90 is None:  # too few runs to bound the 90th percentile: a margin over the longest
        p90 = max(ordered[-1] * DECLARED_P90_FACTOR, ordered[-1]).quantize(Decimal("0.001"))
    assert p50 is not None
    return _Band(p50, max(p50, p90))


def _bound(ordered: Sequence[Decimal], percent: int) -> Decimal | None:
    """The order statistic of rank ceil(percent x (k + 1) / 100) of ``k`` samples: the next run is at or
    below it with probability ``percent`` % whatever the distribution (None: there are too few samples)."""
    rank = int((Decimal(percent * (len(ordered) + 1)) / 100).to_integral_value(rounding=ROUND_CEILING))
    return ordered[rank - 1] if rank <= len(ordered) else None


def placement(inputs: Inputs, duration: Decimal) -> tuple[Binding | None, str]:
    """The scheduler's choice for the first slot now (a gang: for every member at once, placed all together or
    not at all); else, when only capacity is missing, its choice with capacity ignored. The text says what
    kept it from placing now ("" when it placed). The binding returned is the first member's.

    A Job on a Pool costs the platform fee whichever host takes it: when no host of the pool can take it now,
    the binding is the pool's at the fee for the GPUs it asks for, and the text says why it waits."""
    works = [dataclasses.replace(w, expected_duration=timedelta(seconds=float(duration))) for w in _works(inputs.job)]
    hosts = list(inputs.hosts)
    result = run_cycle(Snapshot(0, inputs.now, works, list(inputs.offerings), hosts, fee=inputs.fee))
    if len(result.bindings) == len(works):
        return result.bindings[0], ""
    refused: Unschedulable = result.unschedulable[0]
    pool = works[0].pool
    if pool is not None:
        gpus = works[0].gpu.count if works[0].gpu is not None else 0
        waiting = Binding(
            work=works[0].key,
            offering="",
            node=None,
            rate_usd_per_hour=inputs.fee.rate(gpus),
            region_class="",
            interruptible=False,
            warm_reuse=False,
            expected_cost_usd=Decimal(0),
            explain=refused.message,
            cycle=0,
            provider="pool",
            pool=pool,
        )
        return waiting, f"no host of pool {pool} can run it now ({refused.message})"

    if not refused.waiting_for_capacity:
        return None, (
            f"no offering can run this Job now: {refused.message} A create is accepted; the Job waits up to "
            "placement.queueTimeout and then fails with CapacityUnavailable."
        )
    unlimited = [dataclasses.replace(o, capacity=None) for o in inputs.offerings]
    again = run_cycle(Snapshot(0, inputs.now, works, unlimited, []))
    busy = f"every offering that fits is in use now ({refused.message}); the Job queues until capacity frees up."
    return (again.bindings[0] if again.bindings else None), busy


def _preview(binding: Binding, fee: PlatformFee) -> dict[str, Any]:
    """``placementPreview``: the offering (or the Pool, with its platform fee) and why."""
    if binding.pool is not None:
        preview: dict[str, Any] = {"pool": binding.pool}
        if binding.node is not None:
            preview["node"] = binding.node
        per_gpu, per_host = format_usd(fee.per_gpu_hour), format_usd(fee.per_host_hour)
        preview.update(
            platformFee={"perGPUHour": per_gpu, "perHostHour": per_host},
            warmReuse=binding.warm_reuse,
            explain=binding.explain,
        )
        return preview
    return {
        "offering": binding.offering,
        "regionClass": binding.region_class,
        "interruptible": binding.interruptible,
        "warmReuse": binding.warm_reuse,
        "explain": binding.explain,
    }


def _works(job: Mapping[str, Any]) -> list[Work]:
    """What the scheduler would see of the Job's first slot: one Work, or one per gang member."""
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    name = meta.get("name") or "estimate"
    base: dict[str, Any] = {
        key: value
        for key, value in (("resources", topology.member_resources(spec)), ("placement", spec.get("placement")))
        if value is not None
    }
    resolved = topology.shape_of(spec)
    if resolved is None:
        return [Work.from_object({"metadata": {"namespace": meta.get("namespace") or "", "name": name}, "spec": base})]
    distributed = spec["distributed"]
    members = [f"{name}-0-1-r{rank}" for rank in range(resolved[0].nodes)]
    gang = {
        "size": resolved[0].nodes,
        "epoch": 1,
        "members": members,
        "network": distributed.get("network") or "Colocated",
        "transport": distributed.get("transport") or "Direct",
    }
    return [
        Work.from_object(
            {
                "metadata": {"namespace": meta.get("namespace") or "", "name": member},
                "spec": {**base, "jobUID": meta.get("uid") or name, "number": 1, "rank": rank, "gang": gang},
            }
        )
        for rank, member in enumerate(members)
    ]


def _startup(offering: Offering, history: Sequence[Run]) -> tuple[_Band, _Band | None]:
    cold = [r.boot for r in history if not r.warm]
    warm = [r.boot for r in history if r.warm]
    cold_band = (
        _quantiles(cold)
        if len(cold) >= MIN_QUANTILE_SAMPLES
        else _Band(_secs(offering.boot_p50), _secs(offering.boot_p90))
    )
    return cold_band, (_quantiles(warm) if warm else None)


def _rework(offering: Offering, seconds: Decimal) -> Decimal:
    """The running time with the expected re-work of interruptions (as the scheduler counts it)."""
    return _secs(scoring.expected_run(offering, timedelta(seconds=float(seconds))))


def _cost(rate: Decimal, boot: Decimal, running: Decimal) -> Decimal:
    """One allocation's charge as the billing controller posts it: Boot, Running, and the rounding."""
    total = boot + running
    billed = max((total / INCREMENT_SECONDS).to_integral_value(rounding=ROUND_CEILING) * INCREMENT_SECONDS, Decimal(60))
    return charge(rate, boot) + charge(rate, running) + charge(rate, billed - total)


def _total(per_allocation: _Band, count: int) -> _Band:
    """The P50/P90 of the sum of ``count`` independent allocations priced ``per_allocation``."""
    if count == 1:
        return per_allocation
    mean, deviation = _lognormal_moments(per_allocation)
    p50 = (mean * count).quantize(MICRO)
    return _Band(p50, (p50 + Z90 * Decimal(count).sqrt() * deviation).quantize(MICRO))


def sum_of_bands(bands: Sequence[tuple[Decimal, Decimal]]) -> tuple[Decimal, Decimal]:
    """The P50/P90 of the sum of independent costs, each given as its (P50, P90): each is taken as log-normal,
    as :func:`_total` takes one allocation, and the sum as about normal (P50 the sum of the means, P90 that
    plus 1.2816 x the square root of the summed variances). A Pipeline's estimate sums its stages with it."""
    if len(bands) == 1:
        return bands[0]
    means, variance = _Z, _Z
    for p50, p90 in bands:
        mean, deviation = _lognormal_moments(_Band(p50, p90))
        means += mean
        variance += deviation * deviation
    p50_sum = means.quantize(MICRO)
    return p50_sum, (p50_sum + Z90 * variance.sqrt()).quantize(MICRO)


def _lognormal_moments(band: _Band) -> tuple[Decimal, Decimal]:
    """Mean and standard deviation of the log-normal whose median and 90th percentile are ``band``'s."""
    if band.p50 <= 0 or band.p90 <= band.p50:
        return band.p50, _Z
    sigma = (band.p90 / band.p50).ln() / Z90
    variance_factor = (sigma * sigma).exp()
    mean = band.p50 * (sigma * sigma / 2).exp()
    return mean, mean * (variance_factor - 1).sqrt()


def _members(spec: Mapping[str, Any]) -> int:
    """The gang size (ADR 0046 §12), 1 for a Job that is not distributed."""
    resolved = topology.shape_of(spec)
    return resolved[0].nodes if resolved is not None else 1


def _assembly_bound(spec: Mapping[str, Any], rate: Decimal, members: int) -> Decimal:
    """The most a gang costs if it never assembles: every try, every member billed for the whole
    startupTimeout and the stop that follows it (:data:`ASSEMBLY_STOP_ALLOWANCE`), rounded up to the increment."""
    distributed = spec.get("distributed") or {}
    timeout = _secs(units.parse_duration(str(distributed.get("startupTimeout") or "15m"))) + ASSEMBLY_STOP_ALLOWANCE
    tries = int(distributed.get("maxAssemblyRetries") or 0) + 1
    billed = (timeout / INCREMENT_SECONDS).to_integral_value(rounding=ROUND_CEILING) * INCREMENT_SECONDS
    return charge(rate, billed) * members * tries


def blocking(inputs: Inputs, first_hold: Decimal) -> list[dict[str, str]]:
    """Why a create of ``inputs.job`` whose first hold is ``first_hold`` would be refused now (none: [])."""
    reasons: list[dict[str, str]] = []
    spec = inputs.job.get("spec") or {}
    project = (inputs.job.get("metadata") or {}).get("namespace") or "the project"
    cap = spec.get("maxCostUSD")
    if cap is not None and Decimal(str(cap)) < first_hold:
        reasons.append(
            {
                "code": "MaxCostBelowHold",
                "message": f"the first hold is {text(first_hold)} USD but spec.maxCostUSD is {text(Decimal(str(cap)))} "
                "USD: the Job could never start",
                "fix": f"Raise spec.maxCostUSD to at least {text(first_hold)}, or choose cheaper capacity "
                "(spec.placement.maxRateUSDPerHour or smaller resources).",
            }
        )
    if inputs.available < first_hold:
        reasons.append(
            {
                "code": "InsufficientCredits",
                "message": f"the first hold is {text(first_hold)} USD but project {project} has "
                f"{text(inputs.available)} USD available",
                "fix": f"Add at least {text(first_hold - inputs.available)} USD of credits (an administrator: nodus "
                f"credits grant {project} AMOUNT), wait for running Jobs to release their holds, or choose "
                "cheaper capacity.",
            }
        )
    for room in inputs.budgets:
        if room.remaining < first_hold:
            reasons.append(
                {
                    "code": "BudgetExceeded",
                    "message": f"the first hold is {text(first_hold)} USD but Budget {room.name} has "
                    f"{text(room.remaining)} USD left of its {text(room.limit)} USD limit",
                    "fix": f"Raise spec.limitUSD of Budget {room.name}, wait for its period to end, or choose "
                    "cheaper capacity.",
                }
            )
    return reasons


def _notes(
    inputs: Inputs,
    spec: Mapping[str, Any],
    binding: Binding,
    offering: Offering | None,
    cold: _Band,
    slot_hold: Decimal,
    concurrent: int,
    cost: _Band,
    first_hold: Decimal,
) -> list[dict[str, str]]:
    notes: list[dict[str, str]] = []
    if offering is not None and not binding.warm_reuse and cold.p50 > 0:
        notes.append(
            _warning(
                "ColdStart",
                f"no idle host of {offering.id} to reuse: starting takes about {_go(cold.p50)} (P90 "
                f"{_go(cold.p90)}), billed as Boot",
            )
        )
    if offering is not None and binding.interruptible:
        notes.append(
            _warning(
                "InterruptibleSelected",
                f"{offering.id} is interruptible: the Job may be preempted and resumed; the estimate includes "
                "the expected re-work",
            )
        )
    fits = int(inputs.available // slot_hold) if slot_hold > 0 else concurrent
    if inputs.available >= first_hold and fits < concurrent:
        notes.append(
            _warning(
                "ConcurrentHoldAboveCredits",
                f"{concurrent} slots start at once and hold {text(slot_hold * concurrent)} USD, but "
                f"{text(inputs.available)} USD is available: about {fits} can start until more credit is free",
            )
        )
    cap = spec.get("maxCostUSD")
    if cap is not None and Decimal(str(cap)) >= first_hold and Decimal(str(cap)) < cost.p90:
        notes.append(
            _warning(
                "MaxCostBelowEstimate",
                f"spec.maxCostUSD ({text(Decimal(str(cap)))} USD) is below the P90 cost ({text(cost.p90)} USD): "
                "the Job may be suspended at its cap (MaxCostReached) before it finishes",
            )
        )
    return notes


def _warning(code: str, message: str) -> dict[str, str]:
    return {"code": code, "message": message}


def _secs(value: timedelta) -> Decimal:
    return Decimal(str(value.total_seconds()))


def _go(seconds: Decimal) -> str:
    return units.format_duration(timedelta(seconds=float(seconds.to_integral_value(rounding=ROUND_CEILING))))
