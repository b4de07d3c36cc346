"""What an attempt owes, per segment, from its own times: a pure function, table-driven."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from nodus.apis.v1 import objects
from nodus.controllers import billing

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def attempt(phase: str, node: str | None = "n1", **times: str) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "placement": {"rateUSDPerHour": "3.6"}, **times}
    spec: dict[str, Any] = {"job": "j", "jobUID": "j-uid", "index": 0, "number": 1, **({"node": node} if node else {})}
    return {"metadata": {"name": "a", "namespace": "p", "uid": "u"}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("obj", "restore", "seconds", "closed"),
    [
        pytest.param(attempt("Provisioning"), False, None, (), id="not-bound-yet"),
        pytest.param(
            attempt("Provisioning", node=None, scheduledTime="2026-11-29T11:50:00Z"),
            False,
            {},
            (),
            id="waiting-for-its-hold-bills-nothing",
        ),
        pytest.param(
            attempt(
                "Running",
                scheduledTime="2026-11-29T11:50:00Z",
                provisioningTime="2026-11-29T11:59:00Z",
                startTime="2026-11-29T11:59:05Z",
            ),
            False,
            {"Boot": "5", "Running": "55"},
            ("Boot",),
            id="billing-starts-with-capacity-not-placement",
        ),
        pytest.param(
            attempt("Provisioning", scheduledTime="2026-11-29T11:59:30Z"),
            False,
            {"Boot": "30", "Running": "0"},
            (),
            id="booting-nothing-closed",
        ),
        pytest.param(
            attempt("Running", scheduledTime="2026-11-29T11:59:00Z", startTime="2026-11-29T11:59:20Z"),
            False,
            {"Boot": "20", "Running": "40"},
            ("Boot",),
            id="running-boot-closed",
        ),
        pytest.param(
            attempt(
                "Succeeded",
                scheduledTime="2026-11-29T11:58:00Z",
                startTime="2026-11-29T11:58:10Z",
                finishTime="2026-11-29T11:58:55Z",
            ),
            False,
            {"Boot": "10", "Running": "45", "Teardown": "5"},
            ("Boot", "Running", "Teardown"),
            id="finished-rounded-to-the-minute",
        ),
        pytest.param(
            attempt(
                "Succeeded",
                scheduledTime="2026-11-29T11:50:00Z",
                startTime="2026-11-29T11:50:00Z",
                finishTime="2026-11-29T11:52:00Z",
            ),
            True,
            {"Restore": "0", "Running": "120", "Teardown": "0"},
            ("Restore", "Running", "Teardown"),
            id="replacement-whole-minutes",
        ),
        pytest.param(
            attempt("Lost", scheduledTime="2026-11-29T11:59:00Z", finishTime="2026-11-29T11:59:40Z"),
            False,
            {"Boot": "40", "Running": "0", "Teardown": "20"},
            ("Boot", "Running", "Teardown"),
            id="lost-while-booting",
        ),
    ],
)
def test_billed_seconds(
    obj: dict[str, Any], restore: bool, seconds: dict[str, str] | None, closed: tuple[str, ...]
) -> None:
    owed = billing.bill(objects.read(objects.Attempt, obj), NOW, restore)
    if seconds is None:
        assert owed is None
        return
    assert owed is not None
    assert {k: v for k, v in owed.seconds.items()} == {k: Decimal(v) for k, v in seconds.items()}
    assert owed.closed == closed


def test_a_nodus_fault_is_covered_and_a_preemption_is_not() -> None:
    times = {
        "scheduledTime": "2026-11-29T11:59:00Z",
        "startTime": "2026-11-29T11:59:10Z",
        "finishTime": "2026-11-29T11:59:50Z",
    }
    lost = attempt("Lost", reason="NodeLost", **times)
    preempted = attempt("Lost", reason="Preempted", **times)
    assert billing.bill(objects.read(objects.Attempt, lost), NOW, False).covered  # type: ignore[union-attr]
    assert not billing.bill(objects.read(objects.Attempt, preempted), NOW, False).covered  # type: ignore[union-attr]


def test_charges_are_rate_times_seconds_to_the_micro_dollar() -> None:
    obj = attempt(
        "Succeeded",
        scheduledTime="2026-11-29T11:58:00Z",
        startTime="2026-11-29T11:58:10Z",
        finishTime="2026-11-29T11:58:55Z",
    )
    owed = billing.bill(objects.read(objects.Attempt, obj), NOW, False)
    assert owed is not None
    assert owed.amounts() == {"Boot": Decimal("0.01"), "Running": Decimal("0.045"), "Teardown": Decimal("0.005")}


@pytest.mark.parametrize(
    ("obj", "charged", "held", "now", "expected"),
    [
        pytest.param(
            attempt("Running", scheduledTime="2026-11-29T11:50:00Z", provisioningTime="2026-11-29T11:59:00Z"),
            "0.005",
            "0.6",
            NOW,
            "2026-11-29T12:09:05Z",
            id="from-the-billing-start",
        ),
        pytest.param(
            attempt("Running", scheduledTime="2026-11-29T11:50:00Z", provisioningTime="2026-11-29T11:59:00Z"),
            "0.005",
            "0.6",
            datetime(2026, 11, 29, 12, 3, 30, tzinfo=UTC),
            "2026-11-29T12:09:05Z",
            id="the-clock-does-not-move-it",
        ),
        pytest.param(
            attempt("Provisioning", node=None, scheduledTime="2026-11-29T11:50:00Z"),
            "0",
            "0.6",
            NOW,
            "2026-11-29T12:10:00Z",
            id="without-capacity-from-now",
        ),
        pytest.param(
            {
                **attempt("Provisioning", node=None, scheduledTime="2026-11-29T11:50:00Z"),
                "status": {
                    "cost": {"fundedUntilTime": "2026-11-29T11:58:00Z"},
                    "scheduledTime": "2026-11-29T11:50:00Z",
                },
            },
            "0",
            "0.6",
            NOW,
            "2026-11-29T11:58:00Z",
            id="without-capacity-kept-as-first-shown",
        ),
    ],
)
def test_the_funded_edge_moves_with_the_ledger_not_the_clock(
    obj: dict[str, Any], charged: str, held: str, now: datetime, expected: str
) -> None:
    """3.6 USD/h is 0.001 USD/s: 0.605 USD charged and held fund 605 s from the billing start."""
    view = objects.read(objects.Attempt, obj)
    assert billing.funded_until(view, Decimal("3.6"), Decimal(charged), Decimal(held), now) == expected


def test_a_pool_attempt_bills_at_its_placement_rate_the_platform_fee() -> None:
    """A pool placement has no offering: its charges are its placement's rate (2 GPUs x 0.20 USD) times seconds."""
    obj = attempt(
        "Succeeded",
        scheduledTime="2026-11-29T11:00:00Z",
        provisioningTime="2026-11-29T11:00:00Z",
        startTime="2026-11-29T11:00:00Z",
        finishTime="2026-11-29T11:30:00Z",
    )
    obj["status"]["placement"] = {
        "pool": "lab",
        "node": "gpu-a",
        "provider": "pool",
        "gpuIndexes": [0, 1],
        "rateUSDPerHour": "0.400000",
    }
    bill = billing.bill(objects.read(objects.Attempt, obj), NOW, restore=False)
    assert bill is not None
    assert bill.rate == Decimal("0.4")
    assert bill.amounts() == {"Boot": Decimal(0), "Running": Decimal("0.2"), "Teardown": Decimal(0)}
