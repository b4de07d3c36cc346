"""The Projects' credits copy and what queues a project for it: pure functions, no server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodus.apis.v1 import objects
from nodus.client.workqueue import WorkQueue
from nodus.controllers.credits import enqueue_on_cost, shown


def test_the_copy_is_the_three_figures_of_the_credits_answer() -> None:
    answer = {
        "kind": "Credits",
        "apiVersion": "nodus.dev/v1",
        "project": "p",
        "balanceUSD": "100.00",
        "heldUSD": "12.50",
        "availableUSD": "87.50",
    }
    assert shown(answer) == {"balanceUSD": "100.00", "heldUSD": "12.50", "availableUSD": "87.50"}


def attempt(phase: str = "Running", cost: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = {"job": "j", "jobUID": "j-uid", "index": 0, "number": 1}
    status: dict[str, Any] = {"phase": phase, **({"cost": cost} if cost is not None else {})}
    return {"metadata": {"name": "j-0-1", "namespace": "p", "uid": "a-uid"}, "spec": spec, "status": status}


def job(phase: str = "Running", cost: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, **({"cost": cost} if cost is not None else {})}
    return {"metadata": {"name": "j", "namespace": "p", "uid": "j-uid"}, "spec": {}, "status": status}


HELD = {"totalUSD": "0.00", "heldUSD": "2.00"}
CAPTURED = {"totalUSD": "0.50", "heldUSD": "1.50"}
STORAGE = {"totalUSD": "0.50", "bySegment": {"storageUSD": "0.01"}}


@pytest.mark.parametrize(
    ("kind", "old", "new", "queued"),
    [
        pytest.param(objects.Attempt, attempt(), attempt(cost=HELD), True, id="attempt-first-hold"),
        pytest.param(objects.Attempt, attempt(cost=HELD), attempt(cost=CAPTURED), True, id="attempt-capture"),
        pytest.param(objects.Attempt, None, attempt(cost=HELD), True, id="attempt-seen-with-a-cost"),
        pytest.param(objects.Attempt, None, attempt(), False, id="attempt-created"),
        pytest.param(objects.Attempt, attempt(cost=HELD), attempt("Succeeded", HELD), False, id="attempt-phase-only"),
        pytest.param(objects.Attempt, attempt(cost=HELD), attempt(cost=HELD), False, id="attempt-resync"),
        pytest.param(objects.Job, job(cost=CAPTURED), job(cost=STORAGE), True, id="job-storage-charge"),
        pytest.param(objects.Job, job(cost=CAPTURED), job("Succeeded", CAPTURED), False, id="job-phase-only"),
        pytest.param(objects.Job, job(cost=CAPTURED), None, True, id="job-gone-with-its-cost"),
    ],
)
def test_money_moved_for_an_attempt_or_a_job_queues_its_project(
    kind: type[objects.Attempt] | type[objects.Job],
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    queued: bool,
) -> None:
    queue: WorkQueue[Any] = WorkQueue()
    enqueue_on_cost(queue, kind)(old, new)
    assert len(queue) == (1 if queued else 0)
    if queued:
        assert asyncio.run(queue.get()) == (None, "p")
