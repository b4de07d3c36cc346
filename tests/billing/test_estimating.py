"""The estimate as a pure function: placement through the scheduler's cycle, duration sources, exact
per-allocation cost with the billing increment, bands over many indexes, holds, blocking reasons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from nodus.apimachinery.money import charge, hold_for
from nodus.billing import estimating
from nodus.billing.estimating import Inputs, Room, Run
from nodus.scheduler.capacity import Host, Offering

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def offering(name: str, rate: str, *, capacity: int | None = None, interruptible: bool = False) -> Offering:
    return Offering.from_object(
        {
            "metadata": {"name": name},
            "spec": {
                "gpus": 0,
                "vcpu": "8",
                "memory": "32Gi",
                "disk": "100Gi",
                "provider": "sim",
                "region": "us-east",
                "regionClass": "us",
                "interruptible": interruptible,
                "meanTimeBetweenInterruptions": "8h" if interruptible else None,
                "rateUSDPerHour": rate,
                "boot": {"p50": "45s", "p90": "2m"},
            },
            "status": {} if capacity is None else {"capacity": capacity},
        }
    )


def job(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "p"}, "spec": {"image": "img", "command": ["run"], **spec}}


def inputs(spec: dict[str, Any], **changes: Any) -> Inputs:
    values: dict[str, Any] = {
        "job": spec,
        "offerings": [offering("cpu-8c-us", "0.40"), offering("cpu-8c-us-pricey", "0.90")],
        "hosts": [],
        "history": [],
        "available": Decimal(100),
        "budgets": [],
        "pricebook_version": "2026-11",
        "funded_window": timedelta(minutes=10),
        "now": NOW,
    }
    values.update(changes)
    return Inputs(**values)


def per_allocation(rate: Decimal, boot: int, running: int) -> Decimal:
    billed = max(-(-(boot + running) // 60) * 60, 60)
    return charge(rate, Decimal(boot)) + charge(rate, Decimal(running)) + charge(rate, Decimal(billed - boot - running))


def test_declared_duration_prices_the_cheapest_fitting_offering_exactly_as_billed() -> None:
    estimate = estimating.estimate(inputs(job(expectedDuration="10m", completions=1)))
    rate = Decimal("0.40")
    assert estimate["placementPreview"]["offering"] == "cpu-8c-us"
    assert Decimal(estimate["costUSD"]["p50"]) == per_allocation(rate, 45, 600)
    assert Decimal(estimate["costUSD"]["p90"]) == per_allocation(rate, 120, 750)  # 1.25 x declared, boot p90
    assert Decimal(estimate["overheadUSD"]["p50"]) == per_allocation(rate, 45, 600) - charge(rate, Decimal(600))
    assert Decimal(estimate["holdUSD"]) == hold_for(rate, Decimal(600))
    assert Decimal(estimate["minimumChargeUSD"]) == charge(rate, Decimal(60))
    assert estimate["startup"] == {"cold": {"p50": "45s", "p90": "2m0s"}}
    assert estimate["validUntil"] == "2026-11-29T12:15:00Z"
    assert [w["code"] for w in estimate["warnings"]] == ["ColdStart"]


def test_many_indexes_sum_skewed_allocations_as_a_normal_and_concurrent_holds_count_parallel_slots() -> None:
    one = estimating.estimate(inputs(job(expectedDuration="10m")))
    many = estimating.estimate(inputs(job(expectedDuration="10m", completions=16, parallelism=4)))
    p50, p90 = Decimal(one["costUSD"]["p50"]), Decimal(one["costUSD"]["p90"])
    # One allocation as a log-normal through its P50 and P90: its mean is above its median.
    sigma = (p90 / p50).ln() / estimating.Z90
    mean = p50 * (sigma * sigma / 2).exp()
    deviation = mean * ((sigma * sigma).exp() - 1).sqrt()
    total50 = Decimal(many["costUSD"]["p50"])
    assert total50 == (mean * 16).quantize(Decimal("0.000001")) and total50 > p50 * 16
    assert Decimal(many["costUSD"]["p90"]) == (total50 + estimating.Z90 * 4 * deviation).quantize(Decimal("0.000001"))
    assert p50 * 16 < Decimal(many["costUSD"]["p90"]) < p90 * 16
    assert Decimal(many["concurrentHoldUSD"]) == Decimal(one["holdUSD"]) * 4


def test_history_of_the_same_program_gives_the_duration_when_none_is_declared() -> None:
    runs = [Run(Decimal(30), Decimal(s), False, NOW - timedelta(minutes=s)) for s in range(100, 1100, 100)]
    estimate = estimating.estimate(inputs(job(), history=runs))
    rate = Decimal("0.40")
    # Prediction bounds over 10 samples 100..1000: rank ceil(0.5 x 11) = 6 (600 s) and ceil(0.9 x 11) = 10
    # (1000 s), so that the next run is below them with probability 50 % and 90 %; boots 30 s.
    assert Decimal(estimate["costUSD"]["p50"]) == per_allocation(rate, 30, 600)
    assert Decimal(estimate["costUSD"]["p90"]) == per_allocation(rate, 30, 1000)
    assert estimate["startup"]["cold"] == {"p50": "30s", "p90": "30s"}
    assert "DurationFromHistory" in {w["code"] for w in estimate["warnings"]}
    nothing = estimating.estimate(inputs(job()))
    assert "NoExpectedDuration" in {w["code"] for w in nothing["warnings"]}


def test_blocking_reasons_name_the_amounts_and_the_fix() -> None:
    estimate = estimating.estimate(
        inputs(
            job(expectedDuration="1h", maxCostUSD="0.01"),
            available=Decimal("0.05"),
            budgets=[Room("team", Decimal(10), Decimal("0.02")), Room("roomy", Decimal(10), Decimal(10))],
        )
    )
    reasons = {r["code"]: r for r in estimate["blockingReasons"]}
    assert set(reasons) == {"MaxCostBelowHold", "InsufficientCredits", "BudgetExceeded"}
    hold = estimate["holdUSD"]
    assert (
        f"the first hold is {hold} USD but project p has 0.05 USD available"
        == reasons["InsufficientCredits"]["message"]
    )
    assert "Budget team" in reasons["BudgetExceeded"]["message"] and "roomy" not in reasons["BudgetExceeded"]["message"]
    assert "spec.maxCostUSD to at least" in reasons["MaxCostBelowHold"]["fix"]


def test_full_capacity_previews_the_choice_and_warns_while_no_fit_has_no_money_figures() -> None:
    busy = inputs(
        job(expectedDuration="5m"),
        offerings=[offering("only", "0.40", capacity=1)],
        hosts=[Host("n1", "only", "Ready", True, False, None)],
    )
    estimate = estimating.estimate(busy)
    assert estimate["placementPreview"]["offering"] == "only"
    assert "CapacityBusy" in {w["code"] for w in estimate["warnings"]}

    nothing = estimating.estimate(inputs(job(expectedDuration="5m", placement={"maxRateUSDPerHour": "0.01"})))
    assert "costUSD" not in nothing and "holdUSD" not in nothing
    assert [w["code"] for w in nothing["warnings"]] == ["CapacityUnavailable"]
    assert "queueTimeout" in nothing["warnings"][0]["message"]


def test_an_idle_host_is_a_warm_start_without_boot() -> None:
    warm = inputs(
        job(expectedDuration="5m"),
        offerings=[offering("cpu-8c-us", "0.40")],
        hosts=[Host("n1", "cpu-8c-us", "Ready", False, False, NOW + timedelta(minutes=5))],
    )
    estimate = estimating.estimate(warm)
    assert estimate["placementPreview"]["warmReuse"] is True
    assert Decimal(estimate["costUSD"]["p50"]) == per_allocation(Decimal("0.40"), 0, 300)
    assert "ColdStart" not in {w["code"] for w in estimate.get("warnings", [])}


def test_a_gang_holds_for_every_member_and_bounds_its_assembly() -> None:
    estimate = estimating.estimate(
        inputs(job(expectedDuration="1h", distributed={"nodes": 4, "startupTimeout": "10m", "maxAssemblyRetries": 2}))
    )
    rate = Decimal("0.40")
    assert Decimal(estimate["gangHoldUSD"]) == hold_for(rate, Decimal(600)) * 4 == Decimal(estimate["holdUSD"])
    # Every try, every member: the 10m budget and the minute its stop may take.
    assert Decimal(estimate["assemblyBoundUSD"]) == charge(rate, Decimal(660)) * 4 * 3
    assert estimate["topology"] == "4xCPU"


def test_a_gang_is_estimated_on_capacity_for_all_its_members_at_once() -> None:
    four = job(expectedDuration="5m", distributed={"nodes": 4})
    busy = [Host(f"n{i}", "six", "Ready", True, False, None) for i in range(4)]
    waiting = estimating.estimate(inputs(four, offerings=[offering("six", "0.40", capacity=6)], hosts=busy))
    warning = next(w for w in waiting["warnings"] if w["code"] == "CapacityBusy")
    assert "It waits whole" in warning["message"], warning
    assert waiting["placementPreview"]["offering"] == "six" and waiting["topology"] == "4xCPU"

    never = estimating.estimate(inputs(four, offerings=[offering("three", "0.40", capacity=3)]))
    assert [w["code"] for w in never["warnings"]] == ["CapacityUnavailable"]
    assert "The gang needs 4 hosts together" in never["warnings"][0]["message"]


@pytest.mark.parametrize("samples", [[Decimal(7)], [Decimal(1), Decimal(9), Decimal(4)]])
def test_too_few_samples_for_a_p90_bound_use_a_margin_over_the_longest(samples: list[Decimal]) -> None:
    band = estimating._quantiles(samples)
    assert band.p50 == sorted(samples)[(len(samples) + 1) // 2 - 1]
    assert band.p90 == max(samples) * Decimal("1.25")


def test_a_declared_duration_takes_the_measured_spread_of_earlier_runs() -> None:
    runs = [Run(Decimal(30), Decimal(s), False, NOW - timedelta(minutes=s)) for s in range(100, 1100, 100)]
    estimate = estimating.estimate(inputs(job(expectedDuration="10m"), history=runs))
    # The runs' P90/P50 bound is 1000/600: the declared 600 s gets a P90 of 1000 s, not 750 s.
    assert Decimal(estimate["costUSD"]["p90"]) == per_allocation(Decimal("0.40"), 30, 1000)  # boots from history


def _pool_host(name: str = "gpu-a") -> Host:
    from tests.scheduler import make_pool_host

    return make_pool_host(name, "lab", project="p")


def test_a_pool_job_is_priced_at_the_platform_fee_with_no_boot() -> None:
    spec = job(expectedDuration="10m", placement={"pool": "lab"}, resources={"gpu": {"type": ["H100"], "count": 2}})
    estimate = estimating.estimate(inputs(spec, hosts=[_pool_host()]))
    rate = Decimal("0.40")  # 2 GPUs x 0.20
    assert Decimal(estimate["rateUSDPerHour"]) == rate
    assert Decimal(estimate["costUSD"]["p50"]) == per_allocation(rate, 0, 600)
    preview = estimate["placementPreview"]
    assert (preview["pool"], preview["node"]) == ("lab", "gpu-a")
    assert preview["platformFee"] == {"perGPUHour": "0.200000", "perHostHour": "0.050000"}
    assert "offering" not in preview
    assert "warnings" not in estimate  # no cold start, nothing interruptible


def test_a_pool_job_with_no_free_host_still_shows_the_fee_and_why_it_waits() -> None:
    spec = job(expectedDuration="10m", placement={"pool": "lab"}, resources={"gpu": {"type": ["H100"], "count": 1}})
    estimate = estimating.estimate(inputs(spec))
    assert Decimal(estimate["rateUSDPerHour"]) == Decimal("0.20")
    [warning] = estimate["warnings"]
    assert warning["code"] == "CapacityBusy"
    assert "Pool lab has no hosts in project p" in warning["message"]
