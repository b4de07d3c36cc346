"""The Job controller's gang decisions: epochs of rank attempts, assembly, restarts, gang checkpoints."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels
from nodus.apis.v1.attempt import AttemptPlacement
from nodus.controllers.jobs import gangreporting, gangs, planning
from nodus.controllers.jobs.gangplanning import TimeScales
from tests.controllers.test_job_planning import NOW, make_job, names

Object = dict[str, Any]


def gang_job(nodes: int = 2, **distributed: Any) -> Object:
    return make_job(
        distributed={"nodes": nodes, "launcher": "Torchrun", "maxAssemblyRetries": 2, **distributed},
        resources={"gpu": {"count": 1}},
    )


def rank(number: int, r: int, phase: str, size: int = 2, **status: Any) -> Object:
    scheduled = units.format_time(NOW - timedelta(minutes=1))
    base: Object = {
        "scheduledTime": scheduled,
        "provisioningTime": scheduled,
        "placement": {"offering": "h100-x1-us", "regionClass": "us"},
    }
    if phase == "Pending":
        base = {}
    return {
        "metadata": {
            "name": f"train-0-{number}-r{r}",
            "namespace": "p",
            "uid": f"a-{number}-{r}",
            "creationTimestamp": units.format_time(NOW - timedelta(seconds=600 - number)),
        },
        "spec": {
            "index": 0,
            "number": number,
            "rank": r,
            "job": "train",
            "jobUID": "job-uid",
            "gang": {
                "size": size,
                "epoch": number,
                "gpusPerNode": 1,
                "members": [f"train-0-{number}-r{i}" for i in range(size)],
            },
            **({"node": f"n{number}{r}"} if phase != "Pending" else {}),
        },
        "status": {"phase": phase, **base, **status},
    }


def running(number: int, r: int, **status: Any) -> Object:
    started = units.format_time(NOW - timedelta(minutes=10))
    gang = {"registeredTime": started, "probedTime": started, "probe": {"rttMs": "0.1", "busGbps": "5"}}
    if r == 0:
        gang["rendezvous"] = "127.0.0.1:29500"
    return rank(number, r, "Running", startTime=started, gang=gang, **status)


def test_an_admitted_gang_creates_one_attempt_per_rank_with_its_peers() -> None:
    decided = planning.plan(gang_job(3), [], NOW)
    assert names(decided.create) == ["train-0-1-r0", "train-0-1-r1", "train-0-1-r2"]
    member = decided.create[1]
    assert member["spec"]["rank"] == 1
    assert member["spec"]["gang"]["members"] == names(decided.create)
    assert member["spec"]["gang"]["launcher"] == "Torchrun"
    assert member["spec"]["resources"]["gpu"]["count"] == 1
    assert member["metadata"]["labels"][labels.GANG_EPOCH] == "1"
    assert decided.status["gang"]["phase"] == "Queued"


def test_gang_phases_follow_the_ranks_through_assembly() -> None:
    job = gang_job()
    registered = {"registeredTime": units.format_time(NOW)}
    probed = {**registered, "probedTime": units.format_time(NOW)}
    cases = [
        ([rank(1, 0, "Pending"), rank(1, 1, "Pending")], "Queued"),
        ([rank(1, 0, "Provisioning"), rank(1, 1, "Starting", gang=registered)], "Assembling"),
        ([rank(1, 0, "Starting", gang=registered), rank(1, 1, "Starting", gang=probed)], "Meshing"),
        ([rank(1, 0, "Starting", gang=probed), running(1, 1)], "Starting"),
        ([running(1, 0), running(1, 1)], "Running"),
    ]
    for attempts, expected in cases:
        decided = planning.plan(job, attempts, NOW)
        assert decided.status["gang"]["phase"] == expected, attempts
    decided = planning.plan(job, [running(1, 0), running(1, 1)], NOW)
    gang = decided.status["gang"]
    assert gang["started"] == 2 and gang["ready"] == 2 and gang["size"] == 2 and gang["epoch"] == 1
    assert gang["rendezvous"] == "127.0.0.1:29500"
    assert gang["probe"]["path"] == "Private" and gang["transport"] == "Private"
    assert [m["path"] for m in gang["members"]] == ["Private", "Private"]
    assert decided.status["phase"] == "Running"


def test_a_lost_rank_stops_the_others_and_the_next_epoch_waits_for_them() -> None:
    job = gang_job()
    lost = rank(1, 1, "Lost", reason="NodeLost", startTime=units.format_time(NOW - timedelta(minutes=5)))
    decided = planning.plan(job, [running(1, 0), lost], NOW)
    assert [(a["metadata"]["name"], why) for a, why in decided.stop] == [("train-0-1-r0", "GangRestart")]
    assert decided.create == []
    assert decided.status["gang"]["phase"] == "Recovering"
    stopped = rank(1, 0, "Stopped", startTime=units.format_time(NOW - timedelta(minutes=9)))
    decided = planning.plan(job, [stopped, lost], NOW)
    assert names(decided.create) == ["train-0-2-r0", "train-0-2-r1"]
    assert decided.status["failed"] == 0  # a loss, not the customer's failure


def test_a_rank_that_fails_after_its_peer_was_lost_is_not_a_customer_failure() -> None:
    lost = rank(1, 0, "Lost", reason="NodeLost", startTime=units.format_time(NOW))
    failed = rank(1, 1, "Failed", reason="Error", startTime=units.format_time(NOW))
    decided = planning.plan(gang_job(), [lost, failed], NOW)
    assert decided.status["failed"] == 0
    assert names(decided.create) == ["train-0-2-r0", "train-0-2-r1"]


def test_gang_losses_count_against_max_attempts() -> None:
    job = gang_job()
    attempts = []
    for number in (1, 2, 3):
        attempts += [rank(number, 0, "Stopped", startTime=units.format_time(NOW)), rank(number, 1, "Lost")]
        attempts[-1]["status"].update(reason="NodeLost", startTime=units.format_time(NOW))
    decided = planning.plan(job, attempts, NOW)
    assert decided.status["reason"] == "RecoveryExhausted"


def test_an_assembly_that_outlives_its_startup_timeout_is_stopped_and_placed_again() -> None:
    job = gang_job(startupTimeout="5m")
    waiting = [rank(1, 0, "Starting", gang={"registeredTime": units.format_time(NOW)}), rank(1, 1, "Provisioning")]
    decided = planning.plan(job, waiting, NOW)
    assert decided.stop == [] and decided.requeue_after is not None and decided.requeue_after > 200
    later = NOW + timedelta(minutes=5)
    decided = planning.plan(job, waiting, later)
    assert {why for _, why in decided.stop} == {"AssemblyTimeout"}
    scaled = planning.plan(job, waiting, NOW + timedelta(seconds=7), scales=TimeScales(assembly=0.02))
    assert {why for _, why in scaled.stop} == {"AssemblyTimeout"}


def timed_out(number: int) -> list[Object]:
    stop = {"reason": "AssemblyTimeout"}
    first = rank(number, 0, "Stopped", gang={"registeredTime": units.format_time(NOW)})
    second = rank(number, 1, "Stopped")
    for attempt in (first, second):
        attempt["spec"]["stop"] = stop
    return [first, second]


def test_too_many_failed_assemblies_fail_the_job_naming_the_missing_rank() -> None:
    job = gang_job()
    decided = planning.plan(job, timed_out(1) + timed_out(2), NOW)
    assert names(decided.create) == ["train-0-3-r0", "train-0-3-r1"]
    decided = planning.plan(job, timed_out(1) + timed_out(2) + timed_out(3), NOW)
    assert decided.status["phase"] == "Failed"
    assert decided.status["reason"] == "GangAssemblyFailed"
    assert "rank 1 (train-0-3-r1 on h100-x1-us) its host never registered" in decided.status["message"]
    assert "maxAssemblyRetries is 2" in decided.status["message"]


def shard(request: str, seq: int) -> Object:
    return {"request": request, "seq": seq, "manifest": f"sha256:{seq:064x}", "size": 10}


def test_a_new_epoch_restores_the_newest_checkpoint_every_rank_committed() -> None:
    first = running(1, 0)
    second = rank(1, 1, "Lost", reason="NodeLost", startTime=units.format_time(NOW))
    first["status"]["phase"] = "Stopped"
    first["status"]["gang"]["shards"] = [shard("2026-11-29T11:50:00Z", 1), shard("2026-11-29T11:55:00Z", 2)]
    second["status"]["gang"] = {"shards": [shard("2026-11-29T11:50:00Z", 1)]}
    decided = planning.plan(gang_job(), [first, second], NOW)
    r0, r1 = decided.create
    assert r0["spec"]["restore"]["seq"] == 1 and r0["spec"]["restore"]["attempt"] == "train-0-1-r0"
    assert r1["spec"]["restore"]["attempt"] == "train-0-1-r1"
    assert [s["rank"] for s in r1["spec"]["gang"]["restoreShards"]] == [0, 1]


def test_a_running_gang_is_asked_for_a_checkpoint_every_interval() -> None:
    job = gang_job()
    job["spec"]["recovery"] = {"maxAttempts": 3, "checkpoint": {"interval": "5m"}}
    decided = planning.plan(job, [running(1, 0), running(1, 1)], NOW)
    requests = {a["metadata"]["name"]: p["checkpointRequest"] for a, p in decided.patch}
    assert requests == {"train-0-1-r0": units.format_time(NOW), "train-0-1-r1": units.format_time(NOW)}
    asked = [running(1, 0), running(1, 1)]
    for attempt in asked:
        attempt["spec"]["checkpointRequest"] = units.format_time(NOW - timedelta(minutes=1))
    decided = planning.plan(job, asked, NOW)
    assert decided.patch == [] and decided.requeue_after == 240


def test_rank_zero_of_a_ray_gang_ends_it() -> None:
    job = gang_job(launcher="Ray")
    done = rank(1, 0, "Succeeded", startTime=units.format_time(NOW))
    decided = planning.plan(job, [done, running(1, 1)], NOW)
    assert [(a["metadata"]["name"], why) for a, why in decided.stop] == [("train-0-1-r1", "GangComplete")]
    stopped = rank(1, 1, "Stopped", startTime=units.format_time(NOW))
    decided = planning.plan(job, [done, stopped], NOW)
    assert decided.status["phase"] == "Succeeded"


def test_transport_direct_refuses_a_public_path() -> None:
    a = {"offering": "x", "provider": "sim", "region": "us-east"}
    b = {"offering": "y", "provider": "other", "region": "us-east"}
    placed = AttemptPlacement.model_validate
    assert gangreporting.path_between(placed(a), placed(b)) == "Public"
    assert gangreporting.path_between(placed(a), placed({**b, "provider": "sim", "region": "us-west"})) == "Direct"
    first, second = rank(1, 0, "Provisioning"), rank(1, 1, "Provisioning")
    first["status"]["placement"] = a
    second["status"]["placement"] = b
    decided = planning.plan(gang_job(transport="Direct"), [first, second], NOW)
    assert {why for _, why in decided.stop} == {"AssemblyFailed"}
    decided = planning.plan(gang_job(transport="Auto"), [first, second], NOW)
    assert decided.stop == []


def test_a_rank_lost_before_the_gang_assembled_is_an_assembly_failure_not_a_loss() -> None:
    job = gang_job()
    booting = rank(1, 0, "Starting", gang={"registeredTime": units.format_time(NOW)})
    failed_boot = rank(1, 1, "Lost", reason="BootFailed", message="The host failed to boot (simulated).")
    decided = planning.plan(job, [booting, failed_boot], NOW)
    assert [(a["metadata"]["name"], why) for a, why in decided.stop] == [("train-0-1-r0", "GangRestart")]
    meshed_out = rank(1, 0, "Lost", reason="MeshFailed", message="rank 1 (train-0-1-r1) has ended (Lost)")
    decided = planning.plan(job, [meshed_out, failed_boot], NOW)
    assert names(decided.create) == ["train-0-2-r0", "train-0-2-r1"]
    assert decided.status["attempts"]["total"] == 2
    (epoch,) = gangs.epochs_of([meshed_out, failed_boot])
    phase, reason, message = epoch.outcome() or ("", "", "")
    assert (phase, reason) == ("Stopped", "AssemblyFailed")
    assert "Rank 0 (train-0-1-r0 on h100-x1-us) was lost before the gang assembled" in message
    # Three such tries in a row (maxAssemblyRetries 2) fail the Job; none of them used up recovery.maxAttempts.
    tries = [
        a for n in (1, 2, 3) for a in (rank(n, 0, "Lost", reason="MeshFailed"), rank(n, 1, "Lost", reason="BootFailed"))
    ]
    decided = planning.plan(job, tries, NOW)
    assert decided.status["reason"] == "GangAssemblyFailed"


def test_a_notice_to_one_rank_asks_every_rank_for_a_gang_checkpoint_and_waits_for_their_shards() -> None:
    job = gang_job()
    notice = units.format_time(NOW - timedelta(seconds=2))
    noticed = running(1, 1)
    noticed["status"]["gang"]["notice"] = notice
    decided = planning.plan(job, [running(1, 0), noticed], NOW)
    assert {a["metadata"]["name"]: p for a, p in decided.patch} == {
        "train-0-1-r0": {"checkpointRequest": notice},
        "train-0-1-r1": {"checkpointRequest": notice},
    }
    # The noticed rank is gone; rank 0 is still saving its shard: it is not stopped until it has, or 2 minutes pass.
    saving = running(1, 0)
    saving["spec"]["checkpointRequest"] = notice
    lost = rank(1, 1, "Lost", reason="Preempted", startTime=units.format_time(NOW - timedelta(minutes=5)))
    lost["status"]["gang"] = {"notice": notice}
    decided = planning.plan(job, [saving, lost], NOW)
    assert decided.stop == [] and decided.requeue_after is not None
    assert [why for _, why in planning.plan(job, [saving, lost], NOW + timedelta(minutes=2)).stop] == ["GangRestart"]
    saving["status"]["checkpoint"] = {"handledRequest": notice, "seq": 3, "manifest": "sha256:" + "e" * 64}
    assert [why for _, why in planning.plan(job, [saving, lost], NOW).stop] == ["GangRestart"]
