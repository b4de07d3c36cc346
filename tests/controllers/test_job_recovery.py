"""Recovery in the Job controller's decisions: what a new attempt restores, which losses count, suspends
that checkpoint first, requested checkpoints, and the Job's ``status.checkpoint`` (ADR 0024)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from nodus.apimachinery import units
from nodus.apis.v1 import labels
from nodus.controllers.jobs import planning
from tests.controllers.test_job_planning import NOW, make_attempt, make_job, names

MANIFEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


def at(seconds_ago: float) -> str:
    return units.format_time(NOW - timedelta(seconds=seconds_ago))


def ran(seconds: float, **status: Any) -> dict[str, Any]:
    """Status fields of an attempt that ran ``seconds`` and ended a minute ago."""
    return {"startTime": at(60 + seconds), "finishTime": at(60), **status}


def committed(seq: int, manifest: str = MANIFEST, seconds_ago: float = 70) -> dict[str, Any]:
    return {"checkpoint": {"seq": seq, "manifest": manifest, "size": 10 * seq, "time": at(seconds_ago)}}


def test_a_replacement_restores_the_newest_checkpoint_of_its_index() -> None:
    job = make_job("Running")
    attempts = [
        make_attempt(0, 1, "Lost", reason="Preempted", **ran(300), **committed(2, OTHER, 200)),
        make_attempt(0, 2, "Lost", reason="Preempted", **ran(300), **committed(5)),
    ]
    attempts[1]["spec"]["restore"] = {"seq": 2, "manifest": OTHER}
    decided = planning.plan(job, attempts, NOW)
    assert names(decided.create) == ["train-0-3"]
    restore = decided.create[0]["spec"]["restore"]
    assert restore["seq"] == 5 and restore["manifest"] == MANIFEST and restore["attempt"] == "train-0-2"
    assert decided.status["phase"] == "Recovering"
    assert decided.status["checkpoint"] == {"seq": 5, "size": 50, "time": at(70), "restoredFromSeq": 2}


def test_a_replacement_without_any_checkpoint_starts_from_nothing() -> None:
    decided = planning.plan(make_job("Running"), [make_attempt(0, 1, "Lost", reason="NodeLost", **ran(10))], NOW)
    assert "restore" not in decided.create[0]["spec"]
    assert "checkpoint" not in decided.status


@pytest.mark.parametrize(
    ("continuity", "expected"),
    [
        pytest.param("Restartable", {"resumeCursor": "offset=42"}, id="restartable-gets-the-cursor"),
        pytest.param("Ephemeral", {}, id="ephemeral-gets-nothing"),
    ],
)
def test_what_other_continuities_carry(continuity: str, expected: dict[str, Any]) -> None:
    job = make_job("Running", recovery={"maxAttempts": 3, "continuity": continuity})
    lost = make_attempt(0, 1, "Lost", reason="Preempted", resumeCursor="offset=42", **ran(30), **committed(1))
    spec = planning.plan(job, [lost], NOW).create[0]["spec"]
    assert {k: spec[k] for k in ("restore", "resumeCursor") if k in spec} == expected


def test_losses_after_progress_do_not_use_up_max_attempts() -> None:
    job = make_job("Running", recovery={"maxAttempts": 2, "minProgressDuration": "2m"})
    attempts = [make_attempt(0, n, "Lost", reason="Preempted", **ran(600)) for n in (1, 2, 3, 4)]
    decided = planning.plan(job, attempts, NOW)
    assert names(decided.create) == ["train-0-5"]
    # Two losses without progress (each ran 30 s) exhaust it.
    attempts += [make_attempt(0, n, "Lost", reason="NodeLost", **ran(30)) for n in (5, 6)]
    decided = planning.plan(job, attempts, NOW)
    assert decided.status["phase"] == "Failed"
    assert decided.status["reason"] == "RecoveryExhausted"
    assert "2 times before running 2m" in decided.status["message"]


def test_on_interruption_fail_fails_instead_of_recovering() -> None:
    job = make_job("Running", recovery={"maxAttempts": 3, "onInterruption": "Fail"})
    decided = planning.plan(job, [make_attempt(0, 1, "Lost", reason="Preempted", **ran(600))], NOW)
    assert decided.create == []
    assert decided.status["phase"] == "Failed" and decided.status["reason"] == "Interrupted"
    assert "train-0-1" in decided.status["message"] and "Preempted" in decided.status["message"]


def test_a_suspend_checkpoints_before_it_stops() -> None:
    job = make_job("Running", state="Suspended")
    running = make_attempt(0, 1, "Running", startTime=at(100))
    decided = planning.plan(job, [running], NOW)
    assert [(a["metadata"]["name"], reason) for a, reason in decided.stop] == [("train-0-1", "Suspended")]
    assert decided.checkpoint_first
    assert decided.status["phase"] == "Suspending"


def test_a_suspending_job_says_what_it_waits_for_and_until_when() -> None:
    """Reason Suspending while attempts run, naming the checkpoint's deadline (10 minutes); Suspended once none
    does. The deadline asked of the stop is the one the message names, and it stays what the stop says."""
    job = make_job("Running", state="Suspended")
    running = make_attempt(0, 1, "Running", startTime=at(100))
    decided = planning.plan(job, [running], NOW)
    deadline = units.format_time(NOW + timedelta(minutes=10))
    assert decided.stop_deadline == deadline
    assert decided.status["reason"] == "Suspending"
    message = decided.status["message"]
    assert "waiting for 1 running attempt to take a checkpoint and stop" in message, message
    assert f"by {deadline} at the latest" in message and "given up" in message, message
    assert decided.status["fix"]

    running["spec"]["stop"] = {"reason": "Suspended", "checkpoint": True, "deadline": deadline}
    later = planning.plan(job, [running], NOW + timedelta(seconds=40))
    assert later.status["reason"] == "Suspending" and f"by {deadline}" in later.status["message"]

    stopped = make_attempt(0, 1, "Stopped", startTime=at(100), finishTime=at(1))
    done = planning.plan(job, [stopped], NOW)
    assert done.status["phase"] == "Suspended" and done.status["reason"] == "Suspended"


def test_an_ephemeral_suspend_names_the_kill() -> None:
    job = make_job("Running", state="Suspended", recovery={"continuity": "Ephemeral"})
    running = make_attempt(0, 1, "Running", startTime=at(100))
    running["spec"]["stop"] = {"reason": "Suspended", "gracePeriodSeconds": 30, "requestedTime": at(10)}
    decided = planning.plan(job, [running], NOW)
    assert decided.status["reason"] == "Suspending"
    assert f"waiting for 1 running attempt to stop, by {at(-20)} at the latest." in decided.status["message"]


def test_an_ephemeral_suspend_stops_without_a_checkpoint() -> None:
    job = make_job("Running", state="Suspended", recovery={"continuity": "Ephemeral"})
    decided = planning.plan(job, [make_attempt(0, 1, "Running", startTime=at(100))], NOW)
    assert decided.stop and not decided.checkpoint_first


def test_three_failed_suspend_checkpoints_keep_the_job_running_with_suspend_failed() -> None:
    job = make_job("Running", state="Suspended")
    failure = {"reason": "CheckpointUploadFailed", "message": "the upload failed: 503", "time": at(5)}
    running = make_attempt(0, 1, "Running", startTime=at(100), checkpoint={"stopFailures": 2, "lastFailure": failure})
    decided = planning.plan(job, [running], NOW)
    assert decided.status["phase"] == "Suspending" and decided.status["suspendFailures"] == 2
    running["status"]["checkpoint"]["stopFailures"] = 3
    decided = planning.plan(job, [running], NOW)
    assert decided.status["phase"] == "Running"
    assert decided.status["suspendFailures"] == 3
    assert decided.status["reason"] == "SuspendFailed"
    assert "the upload failed: 503" in decided.status["message"]
    condition = next(c for c in decided.status["conditions"] if c["type"] == "SuspendFailed")
    assert condition["status"] == "True"

    # Back to Running: the count resets and the stop still pending on the attempt is withdrawn.
    running["spec"]["stop"] = {"reason": "Suspended", "checkpoint": True}
    resumed = make_job("Running", state="Running")
    resumed["status"] = decided.status
    decided = planning.plan(resumed, [running], NOW)
    assert "suspendFailures" not in decided.status
    assert [(a["metadata"]["name"], patch) for a, patch in decided.patch] == [("train-0-1", {"stop": None})]
    condition = next(c for c in decided.status["conditions"] if c["type"] == "SuspendFailed")
    assert condition["status"] == "False"


def test_a_requested_checkpoint_reaches_running_attempts_once() -> None:
    job = make_job("Running")
    job["metadata"]["annotations"] = {labels.CHECKPOINT_REQUESTED_AT: "2026-11-29T11:59:00Z"}
    running = make_attempt(0, 1, "Running", startTime=at(100))
    decided = planning.plan(job, [running], NOW)
    assert [patch for _, patch in decided.patch] == [{"checkpointRequest": "2026-11-29T11:59:00Z"}]
    assert decided.status["handledRequests"] == {"checkpoint": "2026-11-29T11:59:00Z"}
    running["spec"]["checkpointRequest"] = "2026-11-29T11:59:00Z"
    assert planning.plan(job, [running], NOW).patch == []


def test_an_edited_interval_reaches_running_attempts() -> None:
    job = make_job("Running", recovery={"checkpoint": {"interval": "10m"}})
    running = make_attempt(0, 1, "Running", startTime=at(100))
    running["spec"]["recovery"] = {"checkpoint": {"interval": "auto"}}
    decided = planning.plan(job, [running], NOW)
    assert [patch for _, patch in decided.patch] == [{"recovery": {"checkpoint": {"interval": "10m"}}}]


def test_attempts_pin_the_recovery_policy() -> None:
    recovery = {"maxAttempts": 3, "continuity": "Checkpointed", "checkpoint": {"interval": "5m", "paths": ["/x"]}}
    decided = planning.plan(make_job("Queued", recovery=recovery, completeByTime=at(-3600)), [], NOW)
    assert decided.create[0]["spec"]["recovery"] == recovery
    assert decided.create[0]["spec"]["completeByTime"] == at(-3600)


def test_storage_counts_the_latest_checkpoint_of_each_index_until_retention_ends() -> None:
    job = make_job("Running", completions=2, parallelism=2)
    attempts = [
        make_attempt(0, 1, "Running", startTime=at(300), **committed(3)),
        make_attempt(1, 1, "Lost", reason="Preempted", **ran(300), **committed(1)),
        make_attempt(1, 2, "Running", startTime=at(30), **committed(2)),
    ]
    decided = planning.plan(job, attempts, NOW)
    assert decided.status["storage"] == {"bytes": 30 + 20}

    finished = make_job("Succeeded", recovery={"checkpoint": {"retainAfterFinish": "1h"}})
    finished["status"].update(completionTime=at(1800), checkpoint={"seq": 3})
    done = [make_attempt(0, 1, "Succeeded", **ran(300), **committed(3))]
    decided = planning.plan(finished, done, NOW)
    assert decided.status["storage"] == {"bytes": 30}
    assert decided.requeue_after == pytest.approx(1800)
    finished["status"] = decided.status
    decided = planning.plan(finished, done, NOW + timedelta(hours=1))
    assert decided.status["storage"] == {"bytes": 0}


def test_a_replacement_avoids_the_offering_that_preempted_its_slot() -> None:
    placement = {"offering": "rtx4090-24g-x1-us-spot", "interruptible": True}
    lost = make_attempt(0, 1, "Lost", reason="Preempted", placement=placement, **ran(300))
    assert planning.plan(make_job("Running"), [lost], NOW).create[0]["spec"]["avoidOfferings"] == [
        "rtx4090-24g-x1-us-spot"
    ]
    lost["status"]["reason"] = "NodeLost"
    assert "avoidOfferings" not in planning.plan(make_job("Running"), [lost], NOW).create[0]["spec"]


def test_a_replacement_avoids_the_offering_that_had_no_capacity() -> None:
    placement = {"offering": "a10g-24g-x1-us-spot", "interruptible": True}
    lost = make_attempt(0, 1, "Lost", reason="CapacityBusy", placement=placement, **ran(0))
    assert planning.plan(make_job("Running"), [lost], NOW).create[0]["spec"]["avoidOfferings"] == [
        "a10g-24g-x1-us-spot"
    ]
