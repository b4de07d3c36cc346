"""A Pipeline's estimate from its stages' Job estimates: the sum's band, the largest concurrent hold, and the
stages' blocking reasons and warnings named by stage."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from nodus.apimachinery.money import text
from nodus.billing import estimating
from nodus.billing.pipelineestimating import graph_estimate

# a and b may run together; c waits for both (the fan-in).
EDGES = {"a": [], "b": [], "c": ["a", "b"]}


def stage(p50: str, p90: str, hold: str, **extra: Any) -> dict[str, Any]:
    return {
        "costUSD": {"p50": p50, "p90": p90},
        "holdUSD": hold,
        "concurrentHoldUSD": hold,
        "rateUSDPerHour": "1",
        "pricebookVersion": "v1",
        "validUntil": "2026-12-03T12:00:00Z",
        **extra,
    }


def test_the_sum_and_the_largest_concurrent_hold() -> None:
    estimates = [("a", stage("1", "2", "3")), ("b", stage("1", "1", "4")), ("c", stage("2", "3", "5"))]
    result = graph_estimate(estimates, EDGES, available=Decimal(100), max_cost=None)
    p50, p90 = estimating.sum_of_bands([(Decimal(1), Decimal(2)), (Decimal(1), Decimal(1)), (Decimal(2), Decimal(3))])
    assert result["costUSD"] == {"p50": text(p50), "p90": text(p90)}
    # Independent stages: the sum's median is above the sum of medians (each cost is skewed) and the P90 below the sum
    # of P90s (they rarely all run long).
    assert Decimal(4) < p50 < p90 < Decimal(6)
    # a and b together hold 7; c runs alone (5).
    assert result["largestConcurrentHoldUSD"] == text(Decimal(7))
    assert [s["name"] for s in result["stages"]] == ["a", "b", "c"]
    assert "blockingReasons" not in result and "warnings" not in result


def test_blocking_reasons_and_warnings_name_their_stage() -> None:
    refused = {"code": "InsufficientCredits", "message": "the first hold is 5 USD", "fix": "Add credit."}
    estimates = [
        ("a", stage("1", "2", "3")),
        ("b", stage("1", "1", "4")),
        ("c", stage("2", "3", "5", blockingReasons=[refused])),
    ]
    result = graph_estimate(estimates, EDGES, available=Decimal(6), max_cost=Decimal(2))
    assert result["blockingReasons"] == [{**refused, "message": "stage c: the first hold is 5 USD"}]
    codes = [w["code"] for w in result["warnings"]]
    assert codes == ["MaxCostBelowEstimate", "ConcurrentHoldAboveCredits"]


def test_a_stage_without_capacity_leaves_the_sum_out() -> None:
    unavailable = {"pricebookVersion": "v1", "warnings": [{"code": "CapacityUnavailable", "message": "no offering"}]}
    result = graph_estimate(
        [("a", stage("1", "2", "3")), ("b", unavailable), ("c", stage("1", "2", "3"))], EDGES, Decimal(100), None
    )
    assert "costUSD" not in result
    assert result["warnings"] == [{"code": "CapacityUnavailable", "message": "stage b: no offering"}]


def test_one_band_is_its_own_sum() -> None:
    assert estimating.sum_of_bands([(Decimal("1.5"), Decimal("2"))]) == (Decimal("1.5"), Decimal("2"))
