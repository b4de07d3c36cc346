"""Storage billing's arithmetic: billed bytes, the hourly charge, which hours are owed and at what size."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from nodus.apis.v1 import objects
from nodus.controllers import storagebilling
from nodus.controllers.jobs import planning
from nodus.controllers.storagebilling import Commit, Price

GIB = 2**30
HOUR = timedelta(hours=1)
START = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
SHIPPED = Price(Decimal("0.023"), 10 * GIB)


@pytest.mark.parametrize(
    ("stored", "free", "billed"),
    [
        pytest.param(0, 10 * GIB, 0, id="nothing"),
        pytest.param(10 * GIB, 10 * GIB, 0, id="exactly-free"),
        pytest.param(10 * GIB + 1, 10 * GIB, 1, id="one-byte-over"),
        pytest.param(25 * GIB, 10 * GIB, 15 * GIB, id="fifteen-gib-over"),
        pytest.param(5, 0, 5, id="no-inclusion"),
    ],
)
def test_billed_bytes_are_the_share_above_the_free_inclusion(stored: int, free: int, billed: int) -> None:
    assert storagebilling.billed_bytes(stored, free) == billed


@pytest.mark.parametrize(
    ("billed", "price", "amount"),
    [
        # 0.023 / 730 = 0.0000315068... per GiB-hour
        pytest.param(GIB, SHIPPED, "0.000032", id="one-gib-rounds-up"),
        pytest.param(100 * GIB, SHIPPED, "0.003151", id="hundred-gib"),
        pytest.param(1024 * GIB, SHIPPED, "0.032263", id="one-tib"),
        # 15.8 MiB at the shipped price is 0.4863 micro-dollars: it rounds to nothing, so it is not posted
        pytest.param(16_575_000, SHIPPED, "0.000000", id="below-half-a-micro-dollar"),
        pytest.param(17_100_000, SHIPPED, "0.000001", id="half-a-micro-dollar-rounds-up"),
        # The test cluster's book: 10 USD per GiB-hour, 1 MiB over the inclusion
        pytest.param(2**20, Price(Decimal("7300"), 256 * 2**10), "0.009766", id="test-book"),
        pytest.param(0, SHIPPED, "0.000000", id="nothing-billed"),
    ],
)
def test_an_hour_costs_its_gib_at_the_monthly_rate_over_730_hours(billed: int, price: Price, amount: str) -> None:
    assert storagebilling.hourly_charge(billed, price) == Decimal(amount)


@pytest.mark.parametrize(
    ("elapsed", "deleted", "due"),
    [
        pytest.param(timedelta(0), None, 0, id="just-committed"),
        pytest.param(timedelta(minutes=59, seconds=59), None, 0, id="first-hour-not-over"),
        pytest.param(HOUR, None, 1, id="first-hour-over"),
        pytest.param(HOUR * 5 + timedelta(minutes=30), None, 5, id="in-the-sixth-hour"),
        pytest.param(HOUR * 2, timedelta(seconds=1), 1, id="deleted-at-once-is-one-hour"),
        pytest.param(HOUR * 9, timedelta(0), 1, id="deleted-at-the-start-is-one-hour"),
        pytest.param(HOUR * 9, HOUR * 2 + timedelta(seconds=1), 3, id="deletion-rounds-the-last-hour-up"),
        pytest.param(HOUR * 9, HOUR * 2, 2, id="deleted-on-an-hour-boundary"),
    ],
)
def test_hours_due_are_those_ended_and_on_deletion_the_last_one_rounded_up(
    elapsed: timedelta, deleted: timedelta | None, due: int
) -> None:
    at = START + deleted if deleted is not None else None
    assert storagebilling.hours_due(START, START + elapsed, HOUR, at) == due


def test_each_hour_is_billed_for_what_was_committed_before_it_ended() -> None:
    kept = [Commit(START, 3), Commit(START + timedelta(minutes=90), 4), Commit(START + HOUR * 3, 5)]
    assert [storagebilling.hour_bytes(kept, START, HOUR, n) for n in range(5)] == [3, 7, 7, 12, 12]


def job(outputs: list[dict[str, Any]], **status: Any) -> objects.Job:
    meta = {"name": "j", "namespace": "p", "uid": "u", "creationTimestamp": "2026-11-30T09:00:00Z"}
    spec = {"image": "python:3.12-slim", "command": ["true"]}
    return objects.read(objects.Job, {"metadata": meta, "spec": spec, "status": {"outputs": outputs, **status}})


def test_commits_are_the_non_empty_outputs_oldest_first() -> None:
    found = storagebilling.commits(
        job(
            [
                {"name": "b", "size": 7, "committedTime": "2026-11-30T11:00:00Z"},
                {"name": "empty", "size": 0, "committedTime": "2026-11-30T10:30:00Z"},
                {"name": "a", "size": 3, "committedTime": "2026-11-30T10:00:00Z"},
                {"name": "older", "size": 2},  # written before committedTime existed: from completionTime
            ],
            completionTime="2026-11-30T12:00:00Z",
        )
    )
    assert found == [
        Commit(START, 3),
        Commit(START + HOUR, 7),
        Commit(START + HOUR * 2, 2),
    ]


def test_hour_keys_name_the_job_and_the_hour() -> None:
    assert storagebilling.hour_key("0b7c", 17) == "storage:0b7c:17"


def test_the_jobs_outputs_carry_the_time_their_attempt_committed_them() -> None:
    output = {"name": "model", "path": "/nodus/outputs/m", "sha256": "c" * 64, "size": 10}
    attempt = {
        "metadata": {"name": "j-0-1", "creationTimestamp": "2026-11-30T09:00:00Z"},
        "spec": {"job": "j", "jobUID": "u", "index": 0, "number": 1},
        "status": {"phase": "Succeeded", "finishTime": "2026-11-30T10:00:00Z", "outputs": [output]},
    }
    body = {
        "metadata": {"name": "j", "namespace": "p", "uid": "u", "generation": 1},
        "spec": {"image": "python:3.12-slim", "command": ["true"]},
        "status": {"phase": "Running"},
    }
    decided = planning.plan(body, [attempt], START + HOUR)
    assert decided.status["outputs"] == [{**output, "committedTime": "2026-11-30T10:00:00Z", "index": 0}]


def test_the_jobs_cost_keeps_what_storage_was_charged_and_is_not_final_while_bytes_are_billed() -> None:
    attempt = {
        "metadata": {"name": "j-0-1", "creationTimestamp": "2026-11-30T09:00:00Z"},
        "spec": {"job": "j", "jobUID": "u", "index": 0, "number": 1},
        "status": {
            "phase": "Succeeded",
            "scheduledTime": "2026-11-30T09:00:00Z",
            "finishTime": "2026-11-30T10:00:00Z",
            "cost": {"totalUSD": "0.50", "heldUSD": "0.00", "bySegment": {"runningUSD": "0.50"}, "final": True},
        },
    }
    status = {
        "phase": "Succeeded",
        "storage": {"bytes": 11 * GIB, "billedBytes": GIB},
        "cost": {"totalUSD": "0.500064", "bySegment": {"runningUSD": "0.50", "storageUSD": "0.000064"}},
    }
    body = {
        "metadata": {"name": "j", "namespace": "p", "uid": "u", "generation": 1},
        "spec": {"image": "python:3.12-slim", "command": ["true"]},
        "status": status,
    }
    cost = planning.plan(body, [attempt], START + HOUR).status["cost"]
    assert cost["totalUSD"] == "0.500064"
    assert cost["bySegment"] == {"runningUSD": "0.50", "storageUSD": "0.000064"}
    assert cost["final"] is False
    status["storage"] = {"bytes": 3, "billedBytes": 0}
    assert planning.plan(body, [attempt], START + HOUR).status["cost"]["final"] is True
