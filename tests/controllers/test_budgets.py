"""The Budget status copy and the retries a Budget's change triggers: pure functions, no server."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodus.apis.v1 import objects
from nodus.client.workqueue import WorkQueue
from nodus.controllers import billing
from nodus.controllers.budgets import shown

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def budget_object(status: dict[str, Any] | None = None, generation: int = 1, limit: str = "10") -> dict[str, Any]:
    return {
        "metadata": {"name": "team-a", "namespace": "p", "uid": "u", "generation": generation},
        "spec": {"limitUSD": limit, "period": "Monthly"},
        **({"status": status} if status is not None else {}),
    }


def budget(status: dict[str, Any] | None = None, generation: int = 1) -> objects.Budget:
    return objects.read(objects.Budget, budget_object(status, generation))


def ledger(spent: str, held: str, remaining: str, limit: str = "10.00") -> dict[str, Any]:
    committed = f"{float(spent) + float(held):.2f}"
    return {
        "uid": "u",
        "limitUSD": limit,
        "spentUSD": spent,
        "heldUSD": held,
        "committedUSD": committed,
        "remainingUSD": remaining,
        "periodStart": "2026-11-01T00:00:00Z",
        "periodEnd": "2026-12-01T00:00:00Z",
    }


@pytest.mark.parametrize(
    ("figures", "exhausted", "reason"),
    [
        pytest.param(ledger("2.00", "3.00", "5.00"), "False", "WithinLimit", id="room-left"),
        pytest.param(ledger("6.00", "4.00", "0.00"), "True", "LimitReached", id="exactly-exhausted"),
    ],
)
def test_the_status_copies_the_ledger(figures: dict[str, Any], exhausted: str, reason: str) -> None:
    status = shown(budget(), figures, NOW)
    assert {k: status[k] for k in ("spentUSD", "heldUSD", "remainingUSD", "periodStart", "periodEnd")} == {
        k: figures[k] for k in ("spentUSD", "heldUSD", "remainingUSD", "periodStart", "periodEnd")
    }
    [condition] = status["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == ("Exhausted", exhausted, reason)
    assert status["observedGeneration"] == 1 and condition["lastTransitionTime"] == "2026-11-29T12:00:00Z"


def test_unchanged_figures_write_the_same_status() -> None:
    first = shown(budget(), ledger("2.00", "3.00", "5.00"), NOW)
    later = datetime(2026, 11, 29, 13, 0, 0, tzinfo=UTC)
    assert shown(budget(first), ledger("2.00", "3.00", "5.00"), later) == first  # nothing to write
    moved = shown(budget(first), ledger("9.00", "1.00", "0.00"), later)
    assert moved["conditions"][0]["lastTransitionTime"] == "2026-11-29T13:00:00Z"


class Attempts:
    """Just enough of an informer: the attempts waiting for a Budget, by project."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        assert index == billing.BUDGET_WAIT_INDEX
        return [{"metadata": {"name": n, "namespace": value}} for n in self.names] if value == "p" else []


def test_a_budgets_spec_change_or_deletion_retries_the_waiting_attempts() -> None:
    queue: WorkQueue[Any] = WorkQueue()
    handler = billing.enqueue_waiting_for_budget(queue, Attempts("j-0-1", "k-0-1"))  # type: ignore[arg-type]
    old = budget_object()
    handler(old, {**old, "status": {"spentUSD": "1.00"}})  # a status copy: nothing to retry
    assert len(queue) == 0
    handler(old, budget_object(limit="20"))
    assert len(queue) == 2
    other: WorkQueue[Any] = WorkQueue()
    billing.enqueue_waiting_for_budget(other, Attempts("j-0-1"))(old, None)  # type: ignore[arg-type]
    assert len(other) == 1


@pytest.mark.parametrize(
    ("status", "indexed"),
    [
        pytest.param({"reason": "BudgetExceeded", "phase": "Provisioning"}, ["p"], id="waiting"),
        pytest.param({"reason": "BudgetExceeded", "phase": "Stopped"}, [], id="finished"),
        pytest.param({"reason": "InsufficientCredits"}, [], id="other-reason"),
    ],
)
def test_attempts_waiting_for_a_budget_are_indexed_by_project(status: dict[str, Any], indexed: list[str]) -> None:
    spec = {"job": "j", "jobUID": "j-uid", "index": 0, "number": 1}
    assert billing.waiting_for_budget({"metadata": {"namespace": "p"}, "spec": spec, "status": status}) == indexed
