"""The Pipeline controller's decision, as tables: which stage Jobs to create, which to suspend, resume or cancel,
and what the Pipeline shows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodus.apis.v1 import objects, stagegraph
from nodus.controllers.pipelineplanning import Plan
from nodus.controllers.pipelineplanning import plan as plan_owned

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SPEC = {"image": "python:3.11", "command": ["true"], "resources": {"cpu": "1"}}


def pipeline(state: str = "Running", max_cost: str | None = None, continue_b: bool = False) -> objects.Pipeline:
    """a, b -> c (c reads a's output), the fan-in of the e2e test."""
    c_spec = {**SPEC, "inputs": [{"name": "a", "fromStage": {"stage": "a", "output": "outputs"}}]}
    spec: dict[str, Any] = {
        "state": state,
        "stages": [
            {"name": "a", "template": {"spec": SPEC}},
            {"name": "b", "template": {"spec": SPEC}, "continueOnFailure": continue_b},
            {"name": "c", "dependsOn": ["b"], "template": {"spec": c_spec}},
        ],
    }
    if max_cost is not None:
        spec["maxCostUSD"] = max_cost
    return objects.read(
        objects.Pipeline, {"metadata": {"name": "p", "namespace": "x", "uid": "u1", "generation": 1}, "spec": spec}
    )


def job(stage: str, phase: str, state: str = "Running", cost: str | None = None) -> objects.Job:
    status: dict[str, Any] = {"phase": phase}
    if cost is not None:
        status["cost"] = {"totalUSD": cost}
    return objects.read(
        objects.Job,
        {
            "metadata": {"name": stagegraph.job_name("p", stage), "creationTimestamp": "2026-12-03T11:00:00Z"},
            "spec": {**SPEC, "state": state},
            "status": status,
        },
    )


def plan(p: objects.Pipeline, jobs: dict[str, objects.Job], now: datetime) -> Plan:
    """The decision for ``p`` owning ``jobs`` (by stage, for the tables' readability)."""
    return plan_owned(p, list(jobs.values()), now)


def created(decided: Plan) -> list[str]:
    return [c.stage for c in decided.create]


def stage_phases(status: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["phase"] for s in status["stages"]}


@pytest.mark.parametrize(
    ("jobs", "create", "phase", "stages"),
    [
        pytest.param({}, ["a", "b"], "Running", {"a": "Running", "b": "Running", "c": "Waiting"}, id="roots-start"),
        pytest.param(
            {"a": job("a", "Succeeded"), "b": job("b", "Running")},
            [],
            "Running",
            {"a": "Succeeded", "b": "Running", "c": "Waiting"},
            id="fan-in-waits-for-every-upstream",
        ),
        pytest.param(
            {"a": job("a", "Succeeded"), "b": job("b", "Succeeded")},
            ["c"],
            "Running",
            {"a": "Succeeded", "b": "Succeeded", "c": "Running"},
            id="fan-in-starts",
        ),
        pytest.param(
            {"a": job("a", "Succeeded"), "b": job("b", "Succeeded"), "c": job("c", "Succeeded")},
            [],
            "Succeeded",
            {"a": "Succeeded", "b": "Succeeded", "c": "Succeeded"},
            id="all-done",
        ),
    ],
)
def test_stages_start_in_dependency_order(
    jobs: dict[str, objects.Job], create: list[str], phase: str, stages: dict[str, str]
) -> None:
    decided = plan(pipeline(), jobs, NOW)
    assert created(decided) == create
    assert decided.states == {}
    assert decided.status["phase"] == phase
    assert stage_phases(decided.status) == stages


def test_a_failed_stage_fails_the_pipeline_and_cancels_what_runs() -> None:
    decided = plan(pipeline(), {"a": job("a", "Running"), "b": job("b", "Failed")}, NOW)
    assert created(decided) == []
    assert decided.states == {"p-a": "Cancelled"}
    assert decided.status["phase"] == "Failed"
    assert "Stage b failed" in decided.status["message"]
    assert stage_phases(decided.status)["c"] == "Skipped"
    failed = next(c for c in decided.status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == "StageFailed"
    # Once the cancel landed the failure is still named after the stage that failed, not the cancelled one.
    later = plan(pipeline(), {"a": job("a", "Cancelled", "Cancelled"), "b": job("b", "Failed")}, NOW)
    assert "Stage b failed" in later.status["message"] and later.states == {}


def test_continue_on_failure_skips_only_what_depends_on_the_stage() -> None:
    running = plan(pipeline(continue_b=True), {"a": job("a", "Running"), "b": job("b", "Failed")}, NOW)
    assert running.states == {} and running.status["phase"] == "Running"
    assert stage_phases(running.status)["c"] == "Skipped"
    done = plan(pipeline(continue_b=True), {"a": job("a", "Succeeded"), "b": job("b", "Failed")}, NOW)
    assert done.status["phase"] == "Succeeded" and "b, c did not succeed" in done.status["message"]


@pytest.mark.parametrize(
    ("state", "states", "phase"),
    [
        pytest.param("Suspended", {"p-a": "Suspended"}, "Suspended", id="suspend-cascades"),
        pytest.param("Cancelled", {"p-a": "Cancelled"}, "Cancelled", id="cancel-cascades"),
    ],
)
def test_state_cascades_to_unfinished_stage_jobs(state: str, states: dict[str, str], phase: str) -> None:
    jobs = {"a": job("a", "Running"), "b": job("b", "Succeeded")}
    decided = plan(pipeline(state), jobs, NOW)
    assert created(decided) == []
    assert decided.states == states
    assert decided.status["phase"] == phase


def test_resuming_sets_the_suspended_stage_jobs_running() -> None:
    decided = plan(pipeline(), {"a": job("a", "Suspended", "Suspended")}, NOW)
    assert decided.states == {"p-a": "Running"}
    assert created(decided) == ["b"]


def test_max_cost_caps_the_sum_of_the_stages() -> None:
    within = plan(pipeline(max_cost="5"), {"a": job("a", "Succeeded", cost="1.5"), "b": job("b", "Running")}, NOW)
    assert within.remaining_usd is not None and str(within.remaining_usd) == "3.5"
    spent = {"a": job("a", "Succeeded", cost="3"), "b": job("b", "Succeeded", cost="2")}
    over = plan(pipeline(max_cost="5"), spent, NOW)
    assert created(over) == [] and over.status["phase"] == "Failed"
    assert next(c for c in over.status["conditions"] if c["type"] == "Failed")["reason"] == "MaxCostReached"
    assert over.status["costUSD"] == "5"


def test_status_shows_each_stage_job_and_cost() -> None:
    decided = plan(pipeline(), {"a": job("a", "Succeeded", cost="0.25")}, NOW)
    first = decided.status["stages"][0]
    assert first == {"name": "a", "phase": "Succeeded", "job": "p-a", "costUSD": "0.25"}
    assert decided.status["succeeded"] == 1 and decided.status["startTime"] == "2026-12-03T11:00:00Z"


def test_a_finished_stage_whose_job_was_deleted_is_not_run_again() -> None:
    first = plan(pipeline(), {"a": job("a", "Succeeded", cost="0.5"), "b": job("b", "Running")}, NOW)
    shown = objects.read(
        objects.Pipeline,
        {**pipeline().model_dump(by_alias=True, exclude_none=True), "status": first.status},
    )
    # a's Job is deleted (ttlSecondsAfterFinished): it stays Succeeded with its cost, and is not created again.
    again = plan(shown, {"b": job("b", "Running")}, NOW)
    assert created(again) == []
    assert again.status["stages"][0] == first.status["stages"][0]
    assert again.status["costUSD"] == "0.5"
