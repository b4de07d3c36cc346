"""The Budget strategy without a server: defaults, and every invalid spec named by its field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodus.api.kinds.budget import BUDGET


def make_budget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Budget",
        "metadata": {"name": "team-a", "namespace": "p"},
        "spec": {"limitUSD": "250", **spec},
    }


def problems(obj: dict[str, Any]) -> dict[str, str]:
    return {error.field: error.message() for error in BUDGET.strategy.validate(obj)}


def test_period_defaults_to_monthly_and_status_is_the_controllers() -> None:
    obj = make_budget()
    obj["status"] = {"spentUSD": "1"}
    BUDGET.strategy.prepare_for_create(obj)
    assert obj["spec"]["period"] == "Monthly" and "status" not in obj
    assert BUDGET.strategy.validate(obj) == []
    daily = make_budget(period="Daily")
    BUDGET.strategy.prepare_for_create(daily)
    assert daily["spec"]["period"] == "Daily"


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"limitUSD": "0.000001", "period": "Total"}, id="one-micro-dollar-total"),
        pytest.param({"period": "Daily", "description": "GPU experiments"}, id="daily-described"),
        pytest.param({"selector": {}}, id="empty-selector"),
        pytest.param(
            {
                "selector": {
                    "matchLabels": {"nodus.dev/team": "a", "empty": ""},
                    "matchExpressions": [
                        {"key": "tier", "operator": "In", "values": ["gpu", "tpu"]},
                        {"key": "preemptible", "operator": "DoesNotExist"},
                    ],
                }
            },
            id="full-selector",
        ),
    ],
)
def test_valid_budgets(spec: dict[str, Any]) -> None:
    obj = make_budget(**spec)
    BUDGET.strategy.prepare_for_create(obj)
    assert problems(obj) == {}


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        pytest.param({"limitUSD": None}, "spec.limitUSD", "Required", id="limit-missing"),
        pytest.param({"limitUSD": "0"}, "spec.limitUSD", "greater than 0", id="limit-zero"),
        pytest.param({"limitUSD": "-5"}, "spec.limitUSD", "decimal USD string", id="limit-negative"),
        pytest.param({"limitUSD": 12.5}, "spec.limitUSD", "string", id="limit-float"),
        pytest.param({"limitUSD": "1.0000001"}, "spec.limitUSD", "6 fractional digits", id="limit-too-precise"),
        pytest.param({"limitUSD": "2000000000"}, "spec.limitUSD", "at most", id="limit-too-large"),
        pytest.param({"period": "Weekly"}, "spec.period", "Daily", id="period-unknown"),
        pytest.param({"colour": "red"}, "spec.colour", "not part of the schema", id="unknown-field"),
        pytest.param(
            {"selector": {"matchLabels": {"team": "a,b"}}}, "spec.selector.matchLabels[team]", "label value", id="value"
        ),
        pytest.param(
            {"selector": {"matchLabels": {"-team": "a"}}}, "spec.selector.matchLabels[-team]", "label key", id="key"
        ),
        pytest.param(
            {"selector": {"matchExpressions": [{"key": "tier", "operator": "In"}]}},
            "spec.selector.matchExpressions[0].values",
            "needs values",
            id="in-without-values",
        ),
        pytest.param(
            {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists", "values": ["x"]}]}},
            "spec.selector.matchExpressions[0].values",
            "must be empty",
            id="exists-with-values",
        ),
        pytest.param(
            {"selector": {"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]}},
            "spec.selector.matchExpressions[0].operator",
            "In",
            id="operator-unknown",
        ),
        pytest.param(
            {"selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a b"]}]}},
            "spec.selector.matchExpressions[0].values[0]",
            "label value",
            id="expression-value",
        ),
    ],
)
def test_invalid_budgets_name_the_field(spec: dict[str, Any], field: str, words: str) -> None:
    obj = make_budget(**spec)
    if spec.get("limitUSD", "") is None:
        del obj["spec"]["limitUSD"]
    found = problems(obj)
    assert field in found, found
    assert words in found[field], found


def test_status_is_checked_on_the_status_path() -> None:
    obj = make_budget()
    good = {"spentUSD": "1.50", "heldUSD": "0.00", "remainingUSD": "248.50", "periodStart": "2026-12-01T00:00:00Z"}
    assert BUDGET.strategy.validate_status({**obj, "status": good}) == []
    bad = copy.deepcopy(good) | {"spentUSD": 1.5}
    assert [e.field for e in BUDGET.strategy.validate_status({**obj, "status": bad})] == ["status.spentUSD"]
