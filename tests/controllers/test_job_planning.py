"""The Job controller's decisions, as a pure function of the Job, its attempts and the time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nodus.apimachinery import units, workloads
from nodus.apis.v1 import labels
from nodus.controllers.jobs import planning, ranges

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def make_job(phase: str = "Queued", **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if phase != "Pending":
        status["conditions"] = [
            {
                "type": "Admitted",
                "status": "True",
                "reason": "Admitted",
                "message": "",
                "lastTransitionTime": units.format_time(NOW - timedelta(minutes=1)),
            }
        ]
    return {
        "metadata": {
            "name": "train",
            "namespace": "p",
            "uid": "job-uid",
            "generation": 1,
            "finalizers": [labels.STOP_ATTEMPTS],
        },
        "spec": {
            "image": "python:3.12",
            "command": ["true"],
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": 6,
            "recovery": {"maxAttempts": 3},
            "placement": {"queueTimeout": "24h"},
            "state": "Running",
            **spec,
        },
        "status": status,
    }


def make_attempt(index: int, number: int, phase: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"train-{index}-{number}",
            "namespace": "p",
            "uid": f"a-{index}-{number}",
            "creationTimestamp": units.format_time(NOW - timedelta(seconds=60 - number)),
        },
        "spec": {
            "index": index,
            "number": number,
            "job": "train",
            "jobUID": "job-uid",
            **({"node": "n1"} if phase not in ("Pending",) else {}),
        },
        "status": {"phase": phase, **status},
    }


def names(attempts: list[dict[str, Any]]) -> list[str]:
    return [a["metadata"]["name"] for a in attempts]


def test_a_pending_job_is_admitted_and_gets_its_first_attempt() -> None:
    job = make_job("Pending")
    job["metadata"]["finalizers"] = []
    decided = planning.plan(job, [], NOW)
    assert decided.status["phase"] == "Queued"
    assert decided.add_finalizer
    assert names(decided.create) == ["train-0-1"]
    created = decided.create[0]
    assert created["metadata"]["ownerReferences"][0]["controller"] is True
    assert created["metadata"]["labels"] == {
        "nodus.dev/job": "train",
        "nodus.dev/index": "0",
        workloads.LABEL: workloads.signature(job["spec"]),
    }
    assert created["spec"]["command"] == ["true"]
    assert decided.status["conditions"][0]["message"] == "Admitted."
    assert decided.status["image"] == {"reference": job["spec"]["image"]}


def test_the_first_resolved_digest_is_the_jobs_and_pins_every_later_attempt() -> None:
    digest = "sha256:" + "ab" * 32
    reference = "127.0.0.1:5000/nodus/python:3.11"
    job = make_job("Pending", image=reference)
    admitted = planning.plan(job, [], NOW)
    assert admitted.create[0]["spec"]["image"] == reference
    job["status"] = admitted.status
    failed = make_attempt(
        0, 1, "Failed", reason="Error", image={"reference": reference, "digest": digest, "user": "1000"}
    )
    decided = planning.plan(job, [failed], NOW)
    assert decided.status["image"] == {"reference": reference, "digest": digest, "user": "1000"}
    job["status"] = decided.status
    replacement = planning.plan(job, [failed], NOW).create[0]
    assert replacement["spec"]["image"] == f"{reference}@{digest}"


def test_parallelism_bounds_the_attempts_created() -> None:
    decided = planning.plan(make_job(completions=10, parallelism=3), [make_attempt(0, 1, "Succeeded")], NOW)
    assert names(decided.create) == ["train-1-1", "train-2-1", "train-3-1"]


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        pytest.param(["Pending"], "Queued", id="queued"),
        pytest.param(["Provisioning"], "Provisioning", id="provisioning"),
        pytest.param(["Starting"], "Provisioning", id="starting"),
        pytest.param(["Running"], "Running", id="running"),
    ],
)
def test_the_phase_follows_the_live_attempts(phases: list[str], expected: str) -> None:
    attempts = [make_attempt(0, 1, phase) for phase in phases]
    assert planning.plan(make_job(), attempts, NOW).status["phase"] == expected


def test_a_customer_failure_starts_a_new_attempt_until_the_backoff_limit() -> None:
    attempts = [make_attempt(0, 1, "Failed", message="Exit code 1.")]
    decided = planning.plan(make_job(backoffLimit=1), attempts, NOW)
    assert names(decided.create) == ["train-0-2"]
    attempts.append(
        make_attempt(0, 2, "Failed", message="Exit code 1. Last log lines:\nboom", finishTime="2026-11-29T11:59:59Z")
    )
    decided = planning.plan(make_job(backoffLimit=1), attempts, NOW)
    assert decided.status["phase"] == "Failed"
    assert decided.status["reason"] == "BackoffLimitExceeded"
    assert "boom" in decided.status["message"]
    assert decided.create == []


def test_lost_capacity_is_replaced_until_recovery_is_exhausted() -> None:
    lost = [make_attempt(0, n, "Lost", reason="NodeLost") for n in (1, 2)]
    decided = planning.plan(make_job(), lost, NOW)
    assert names(decided.create) == ["train-0-3"]
    assert decided.status["phase"] == "Recovering"
    decided = planning.plan(make_job(), [*lost, make_attempt(0, 3, "Lost")], NOW)
    assert decided.status["reason"] == "RecoveryExhausted"


def test_lost_capacity_does_not_count_as_a_failure() -> None:
    decided = planning.plan(make_job(backoffLimit=0), [make_attempt(0, 1, "Lost")], NOW)
    assert decided.status["failed"] == 0
    assert names(decided.create) == ["train-0-2"]


def test_success_when_every_index_succeeded() -> None:
    attempts = [make_attempt(i, 1, "Succeeded") for i in range(3)]
    decided = planning.plan(make_job(completions=3, parallelism=3), attempts, NOW)
    assert decided.status["phase"] == "Succeeded"
    assert decided.status["completedIndexes"] == "0-2"
    assert "reason" not in decided.status


def test_suspend_stops_live_attempts_and_resume_counts_suspended_time() -> None:
    running = make_attempt(0, 1, "Running")
    job = make_job(state="Suspended")
    job["status"]["timeoutStartTime"] = units.format_time(NOW - timedelta(minutes=5))
    decided = planning.plan(job, [running], NOW)
    assert [(a["metadata"]["name"], why) for a, why in decided.stop] == [("train-0-1", "Suspended")]
    assert decided.status["phase"] == "Suspending"
    suspended = {**job, "status": decided.status}
    stopped = make_attempt(0, 1, "Stopped")
    decided = planning.plan(suspended, [stopped], NOW)
    assert decided.status["phase"] == "Suspended"
    resumed = {**suspended, "spec": {**suspended["spec"], "state": "Running"}, "status": decided.status}
    decided = planning.plan(resumed, [stopped], NOW + timedelta(minutes=2))
    assert decided.status["suspendedDuration"] == "2m0s"
    assert names(decided.create) == ["train-0-2"]


def test_timeout_counts_from_first_provisioning_and_moves_with_the_spec() -> None:
    scheduled = units.format_time(NOW - timedelta(seconds=30))
    attempt = make_attempt(0, 1, "Running", scheduledTime=scheduled)
    decided = planning.plan(make_job(timeout="1m"), [attempt], NOW)
    assert decided.status["timeoutStartTime"] == scheduled
    assert decided.status["timeoutTime"] == units.format_time(NOW + timedelta(seconds=30))
    assert decided.requeue_after == pytest.approx(30)
    decided = planning.plan(make_job(timeout="20s"), [attempt], NOW)
    assert decided.status["reason"] == "DeadlineExceeded"
    assert [why for _, why in decided.stop] == ["DeadlineExceeded"]


def test_queue_timeout_fails_with_capacity_unavailable() -> None:
    waiting = make_attempt(0, 1, "Pending", reason="Unschedulable", message="No offering fits: 3 are full.")
    decided = planning.plan(make_job(placement={"queueTimeout": "30s"}), [waiting], NOW)
    assert decided.status["reason"] == "CapacityUnavailable"
    assert "3 are full" in decided.status["message"]
    decided = planning.plan(make_job(placement={"queueTimeout": "5m"}), [waiting], NOW)
    assert decided.status["phase"] == "Queued"
    assert decided.status["reason"] == "Unschedulable"


def test_cancel_is_final() -> None:
    decided = planning.plan(make_job(state="Cancelled"), [make_attempt(0, 1, "Running")], NOW)
    assert decided.status["phase"] == "Cancelled"
    assert [why for _, why in decided.stop] == ["Cancelled"]


def test_deletion_stops_attempts_then_lifts_the_finalizer() -> None:
    job = make_job()
    job["metadata"]["deletionTimestamp"] = units.format_time(NOW)
    decided = planning.plan(job, [make_attempt(0, 1, "Running")], NOW)
    assert [why for _, why in decided.stop] == ["Deleted"] and not decided.remove_finalizer
    decided = planning.plan(job, [make_attempt(0, 1, "Stopped")], NOW)
    assert decided.remove_finalizer


def test_ttl_deletes_a_finished_job() -> None:
    job = make_job("Succeeded", ttlSecondsAfterFinished=60)
    job["status"]["completionTime"] = units.format_time(NOW - timedelta(seconds=30))
    assert planning.plan(job, [], NOW).requeue_after == pytest.approx(30)
    assert planning.plan(job, [], NOW + timedelta(seconds=31)).delete_job


def test_a_restart_request_stops_running_attempts_once() -> None:
    job = make_job()
    job["metadata"]["annotations"] = {labels.RESTART_REQUESTED_AT: "2026-11-29T11:00:00Z"}
    decided = planning.plan(job, [make_attempt(0, 1, "Running")], NOW)
    assert [why for _, why in decided.stop] == ["Restart"]
    assert decided.status["handledRequests"] == {"restart": "2026-11-29T11:00:00Z"}
    again = {**job, "status": decided.status}
    assert planning.plan(again, [make_attempt(0, 1, "Running")], NOW).stop == []


def test_a_url_input_is_admitted_and_pinned_into_the_attempt() -> None:
    digest = "a" * 64
    job = make_job("Pending", inputs=[{"name": "x", "url": {"url": "https://e/x", "sha256": digest}}])
    decided = planning.plan(job, [], NOW)
    assert decided.status["phase"] == "Queued"
    assert decided.status["inputs"] == [{"name": "x", "sha256": digest}]
    assert decided.create[0]["spec"]["inputs"] == [{"name": "x", "url": "https://e/x", "sha256": digest}]


def test_a_missing_secret_keeps_the_job_pending_with_the_reason() -> None:
    job = make_job("Pending", env=[{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}])
    decided = planning.plan(job, [], NOW)
    assert decided.status["phase"] == "Pending"
    assert decided.status["reason"] == "SecretNotFound"
    assert decided.create == []


def test_an_attempt_that_failed_on_a_digest_mismatch_fails_the_job_at_once() -> None:
    failed = make_attempt(0, 1, "Failed", reason="InputDigestMismatch", message="sha256 of x is b, expected a")
    decided = planning.plan(make_job(), [failed], NOW)
    assert decided.status["phase"] == "Failed"
    assert decided.status["reason"] == "InputDigestMismatch"
    assert decided.create == []


def test_outputs_of_the_succeeded_attempt_are_the_jobs() -> None:
    output = {"name": "model", "path": "/nodus/outputs/m", "sha256": "c" * 64, "size": 10}
    succeeded = make_attempt(0, 1, "Succeeded", outputs=[output])
    decided = planning.plan(make_job(), [succeeded], NOW)
    assert decided.status["outputs"] == [{**output, "index": 0}]
    assert decided.status["storage"] == {"bytes": 10}


@pytest.mark.parametrize(
    ("indexes", "text"),
    [
        pytest.param([], "", id="none"),
        pytest.param([0], "0", id="one"),
        pytest.param([0, 1, 2, 3, 5], "0-3,5", id="ranges"),
        pytest.param([7, 1, 2, 9, 8], "1-2,7-9", id="unordered"),
    ],
)
def test_completed_indexes_are_compressed(indexes: list[int], text: str) -> None:
    assert ranges.compress(indexes) == text


def test_every_status_reason_has_a_served_docs_page() -> None:
    from nodus.api import reasons  # the server registers the controllers' codes beside its own
    from nodus.apis.v1 import statusreasons

    for entry in statusreasons.all_status_reasons():
        assert reasons.reason(entry.code).fix == entry.fix


def test_a_job_on_a_missing_pool_waits_naming_it_and_a_pool_admits_it() -> None:
    job = make_job("Pending", placement={"pool": "mine", "queueTimeout": "24h"})
    waiting = planning.plan(job, [], NOW)
    assert waiting.status["phase"] == "Pending"
    assert waiting.status["reason"] == "PoolNotFound"
    assert "Pool mine (spec.placement.pool) does not exist in this project" in waiting.status["message"]
    assert waiting.create == []
    pools = {("pools", "mine"): {"metadata": {"name": "mine", "namespace": "p"}, "spec": {}}}
    admitted = planning.plan(job, [], NOW, lambda plural, name: pools.get((plural, name)))
    assert admitted.status.get("reason") != "PoolNotFound"
    assert [a["spec"]["placement"]["pool"] for a in admitted.create] == ["mine"]


def test_a_job_that_has_run_stays_running_between_indexes() -> None:
    job = make_job(completions=2)
    job["status"]["startTime"] = units.format_time(NOW - timedelta(seconds=10))
    decided = planning.plan(job, [make_attempt(0, 1, "Succeeded")], NOW)
    assert names(decided.create) == ["train-1-1"]
    assert decided.status["phase"] == "Running"
    lost = planning.plan(job, [make_attempt(0, 1, "Lost")], NOW)
    assert lost.status["phase"] == "Recovering"


def test_a_running_attempt_whose_hold_cannot_be_extended_gives_the_job_its_stop_by_time() -> None:
    edge = units.format_time(NOW + timedelta(minutes=4))
    unfunded = make_attempt(
        0,
        1,
        "Running",
        startTime=units.format_time(NOW - timedelta(minutes=5)),
        reason="InsufficientCredits",
        message="the hold needs 1.00 USD but project p has 0.20 USD available",
        stopByTime=edge,
    )
    decided = planning.plan(make_job("Running"), [unfunded], NOW)
    assert decided.status["stopByTime"] == edge
    funded = {c["type"]: c for c in decided.status["conditions"]}["Funded"]
    assert funded["status"] == "False" and funded["reason"] == "InsufficientCredits"
    assert edge in funded["message"] and decided.status["reason"] == "InsufficientCredits"

    # Funds arrived: the billing controller cleared the wait; the edge and the condition go with it.
    unfunded["status"].update(reason=None, message=None, stopByTime=None)
    job = make_job("Running")
    job["status"].update(stopByTime=edge, conditions=decided.status["conditions"])
    again = planning.plan(job, [unfunded], NOW)
    assert "stopByTime" not in again.status
    assert {c["type"]: c for c in again.status["conditions"]}["Funded"]["status"] == "True"
