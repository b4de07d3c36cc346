"""Jobs run for real: kubectl and the kubernetes client, real controllers, real agent processes.

Every test drives the system the way a user would and checks what a user would see: phases, the
Job's counts and reasons, the Attempts, and the logs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.running.conftest import Running
from tests.support.images import registry_python_image
from tests.support.objects import API, job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # long end-to-end: make test-slow (CI runs both tiers)


def kubectl(binary: Path, running: Running, project: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [str(binary), "--kubeconfig", str(running.cluster.kubeconfig("admin", project)), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def shell(script: str, **spec: Any) -> dict[str, Any]:
    """A Job spec running ``script`` under /bin/sh on one CPU-only host."""
    return {"command": ["/bin/sh", "-c", script], "resources": {"cpu": "1"}, **spec}


def create(running: Running, project: str, name: str, **spec: Any) -> dict[str, Any]:
    body = job(name, **spec)
    if "resources" in spec:
        body["spec"]["resources"] = spec["resources"]
    with running.client() as client:
        response = client.post(f"{API}/namespaces/{project}/jobs", json=body)
        assert response.status_code == 201, response.text
        return dict(response.json())


def patch_spec(running: Running, project: str, name: str, spec: dict[str, Any]) -> None:
    with running.client() as client:
        response = client.patch(
            f"{API}/namespaces/{project}/jobs/{name}",
            json={"spec": spec},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text


def job_log(running: Running, project: str, name: str, **params: Any) -> str:
    with running.client() as client:
        response = client.get(f"{API}/namespaces/{project}/jobs/{name}/log", params=params)
        assert response.status_code == 200, response.text
        return response.text


def test_hello_world_reaches_succeeded_through_kubectl(running: Running, kubectl_binary: Path) -> None:
    project = running.project()
    manifest = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": "hello"},
        "spec": {
            "image": registry_python_image(),
            "command": ["/bin/sh", "-c", 'echo "hello from index $NODUS_INDEX on $NODUS_NODE"'],
            "resources": {"gpu": {"type": ["H100"], "count": 1}},
        },
    }
    kubectl(kubectl_binary, running, project, "apply", "-f", "-", stdin=yaml.safe_dump(manifest))
    done = running.wait_phase(project, "hello", "Succeeded", "Failed")
    status = done["status"]
    assert status["phase"] == "Succeeded", status
    assert status["succeeded"] == 1
    assert status["completedIndexes"] == "0"
    assert status["placement"]["offering"].startswith("h100-")
    assert status["startTime"] and status["completionTime"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Complete"] == "True"
    assert "hello from index 0 on h100-" in job_log(running, project, "hello")

    table = kubectl(kubectl_binary, running, project, "get", "nj", "hello")
    assert "Succeeded" in table and "1/1" in table
    attempt = json.loads(kubectl(kubectl_binary, running, project, "get", "attempts", "hello-0-1", "-o", "json"))
    assert attempt["status"]["phase"] == "Succeeded"
    assert attempt["status"]["exitCode"] == 0
    assert "chose h100-" in attempt["status"]["placement"]["explain"]
    assert attempt["metadata"]["ownerReferences"][0]["name"] == "hello"


@pytest.mark.slow  # fifty containers started and removed, about 50 s (slow tier)
def test_indexed_job_spreads_over_two_offerings(running: Running) -> None:
    project = running.project()
    offerings = ["cpu-8c-us", "cpu-8c-eu"]
    with running.client() as client:
        for offering in offerings:
            assert client.get(f"{API}/offerings/{offering}").status_code == 200, f"price book lacks {offering}"
    spec = shell(
        'echo "index=$NODUS_INDEX completion=$JOB_COMPLETION_INDEX"; sleep 0.2',
        completions=50,
        parallelism=8,
        placement={"offerings": offerings, "profile": "Cost"},
    )
    create(running, project, "indexed", **spec)
    done = running.wait_phase(project, "indexed", "Succeeded", "Failed", timeout=240)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["completedIndexes"] == "0-49"
    attempts = running.attempts(project, "indexed")
    succeeded = [a for a in attempts if a["status"]["phase"] == "Succeeded"]
    assert sorted(a["spec"]["index"] for a in succeeded) == list(range(50))
    assert {a["spec"]["offering"] for a in succeeded} == set(offerings)
    assert "index=17 completion=17" in job_log(running, project, "indexed", index=17)


def test_failing_job_reaches_backoff_limit_with_its_last_log_lines(running: Running) -> None:
    project = running.project()
    create(running, project, "failing", **shell("echo starting; echo 'disk is full' >&2; exit 3", backoffLimit=1))
    done = running.wait_phase(project, "failing", "Failed")
    status = done["status"]
    assert status["reason"] == "BackoffLimitExceeded"
    assert "disk is full" in status["message"] and "Exit code 3" in status["message"]
    assert status["failed"] == 2
    assert status["fix"]
    attempts = running.attempts(project, "failing")
    assert sorted(a["metadata"]["name"] for a in attempts) == ["failing-0-1", "failing-0-2"]
    assert all(a["status"]["exitCode"] == 3 for a in attempts)
    assert "disk is full" in job_log(running, project, "failing", attempt=1)


def test_timeout_fails_the_job_with_deadline_exceeded(running: Running) -> None:
    project = running.project()
    create(running, project, "slow", **shell("sleep 120", timeout="3s"))
    done = running.wait_phase(project, "slow", "Failed")
    assert done["status"]["reason"] == "DeadlineExceeded"
    assert done["status"]["timeoutStartTime"] and done["status"]["timeoutTime"]
    running.wait_for(
        "the attempt to stop", lambda: all(a["status"]["phase"] == "Stopped" for a in running.attempts(project, "slow"))
    )


def test_suspend_stops_attempts_and_resume_finishes(running: Running) -> None:
    project = running.project()
    script = "trap 'echo got TERM; exit 143' TERM; i=0; while [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; echo done"
    create(running, project, "pausable", **shell(script))
    running.wait_phase(project, "pausable", "Running")
    patch_spec(running, project, "pausable", {"state": "Suspended"})
    suspended = running.wait_phase(project, "pausable", "Suspended")
    assert suspended["status"]["reason"] == "Suspended"
    first = running.attempts(project, "pausable")
    assert [a["status"]["phase"] for a in first] == ["Stopped"]
    assert "got TERM" in job_log(running, project, "pausable", attempt=1)
    patch_spec(running, project, "pausable", {"state": "Running"})
    done = running.wait_phase(project, "pausable", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["failed"] == 0
    assert done["status"]["attempts"]["total"] == 2
    assert done["status"].get("suspendedDuration")


def test_cancel_stops_for_good(running: Running) -> None:
    project = running.project()
    create(running, project, "doomed", **shell("sleep 120"))
    running.wait_phase(project, "doomed", "Running")
    patch_spec(running, project, "doomed", {"state": "Cancelled"})
    done = running.wait_phase(project, "doomed", "Cancelled")
    assert done["status"]["reason"] == "Cancelled"
    running.wait_for(
        "the attempt to stop",
        lambda: [a["status"]["phase"] for a in running.attempts(project, "doomed")] == ["Stopped"],
    )
    with running.client() as client:
        response = client.patch(
            f"{API}/namespaces/{project}/jobs/doomed",
            json={"spec": {"state": "Running"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 422, response.text


def test_deleting_a_running_job_stops_its_attempts_first(running: Running) -> None:
    project = running.project()
    script = "trap 'echo stopping cleanly; exit 0' TERM; while true; do sleep 0.1; done"
    create(running, project, "deleted", **shell(script))
    running.wait_phase(project, "deleted", "Running")
    with running.client() as client:
        response = client.delete(f"{API}/namespaces/{project}/jobs/deleted")
        assert response.status_code in (200, 202), response.text
        assert response.json()["metadata"]["deletionTimestamp"]
        assert "nodus.dev/stop-attempts" in response.json()["metadata"]["finalizers"]

        def gone() -> bool:
            return client.get(f"{API}/namespaces/{project}/jobs/deleted").status_code == 404

        running.wait_for("the job to be deleted", gone)
        running.wait_for("its attempts to be collected", lambda: running.attempts(project, "deleted") == [])


def test_a_killed_node_is_replaced_on_another(running: Running) -> None:
    project = running.project()
    # The first attempt outlives any delay of the kill on a loaded machine; its replacement is quick.
    script = 'echo attempt $NODUS_ATTEMPT_NUMBER; [ "$NODUS_ATTEMPT_NUMBER" = 1 ] && sleep 120; echo finished'
    create(running, project, "survivor", **shell(script))
    running.wait_phase(project, "survivor", "Running")
    node = running.attempts(project, "survivor")[0]["spec"]["node"]
    killed = subprocess.run(
        [sys.executable, "-m", "nodus", "sim", "kill", node, "--kubeconfig", str(running.cluster.kubeconfig("admin"))],
        check=False,
        capture_output=True,
        text=True,
    )
    assert killed.returncode == 0, killed.stderr
    done = running.wait_phase(project, "survivor", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    attempts = sorted(running.attempts(project, "survivor"), key=lambda a: a["spec"]["number"])
    assert [a["status"]["phase"] for a in attempts] == ["Lost", "Succeeded"]
    assert attempts[0]["status"]["reason"] == "NodeLost"
    # The lost attempt's time was Nodus's fault: covered (a boot of 0 s on a warm host has nothing to
    # cover), and its boot, charged when it closed at the start, refunded: the project paid nothing.
    lost = running.wait_for(
        "the lost attempt's final cost",
        lambda: (c := running.attempts(project, "survivor")[0]["status"].get("cost") or {}).get("final") and c,
    )
    assert lost["totalUSD"] == "0.00", lost
    assert "Running" in lost["bySegment"]["coveredByNodus"]
    assert attempts[1]["spec"]["node"] != node
    assert done["status"]["failed"] == 0


def test_queue_timeout_when_nothing_fits(running: Running) -> None:
    project = running.project()
    create(
        running,
        project,
        "unplaceable",
        placement={"maxRateUSDPerHour": "0.01", "queueTimeout": "4s"},
    )
    queued = running.wait_phase(project, "unplaceable", "Queued")
    running.wait_for(
        "the reason to say why",
        lambda: running.job(project, "unplaceable")["status"].get("reason") == "Unschedulable",
    )
    assert queued["status"]["phase"] == "Queued"
    message = running.job(project, "unplaceable")["status"]["message"]
    assert "maxRateUSDPerHour" in message
    done = running.wait_phase(project, "unplaceable", "Failed")
    assert done["status"]["reason"] == "CapacityUnavailable"
    assert "maxRateUSDPerHour" in done["status"]["message"]


def test_kubernetes_client_reads_a_finished_job(running: Running) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    project = running.project()
    config = kubernetes.config.new_client_from_config(str(running.cluster.kubeconfig("alice", project)))
    api = kubernetes.client.CustomObjectsApi(config)
    body = job("viaclient", **shell("echo from the kubernetes client"))
    api.create_namespaced_custom_object("nodus.dev", "v1", project, "jobs", body)
    running.wait_phase(project, "viaclient", "Succeeded", "Failed")
    got = api.get_namespaced_custom_object("nodus.dev", "v1", project, "jobs", "viaclient")
    assert got["status"]["phase"] == "Succeeded"
    attempts = api.list_namespaced_custom_object("nodus.dev", "v1", project, "attempts")
    assert [a["metadata"]["name"] for a in attempts["items"]] == ["viaclient-0-1"]


def test_ttl_deletes_a_finished_job_and_its_attempts(running: Running) -> None:
    project = running.project()
    create(running, project, "shortlived", **shell("echo bye", ttlSecondsAfterFinished=1))
    with running.client() as client:

        def succeeded_or_gone() -> bool:
            # On a loaded machine the second between Succeeded and the deletion may pass between two looks.
            response = client.get(f"{API}/namespaces/{project}/jobs/shortlived")
            return response.status_code == 404 or response.json()["status"].get("phase") == "Succeeded"

        running.wait_for("the job to succeed", succeeded_or_gone)
        running.wait_for(
            "the job to be deleted",
            lambda: client.get(f"{API}/namespaces/{project}/jobs/shortlived").status_code == 404,
        )
    running.wait_for("its attempts to be collected", lambda: running.attempts(project, "shortlived") == [])


def test_a_restart_request_replaces_the_running_attempt(running: Running) -> None:
    project = running.project()
    script = 'if [ "$NODUS_ATTEMPT_NUMBER" = 1 ]; then exec sleep 120; fi; echo restarted'
    create(running, project, "restartable", **shell(script))
    running.wait_phase(project, "restartable", "Running")
    with running.client() as client:
        response = client.patch(
            f"{API}/namespaces/{project}/jobs/restartable",
            json={"metadata": {"annotations": {"nodus.dev/restart-requested-at": "2026-11-29T12:00:00Z"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text
    done = running.wait_phase(project, "restartable", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["handledRequests"] == {"restart": "2026-11-29T12:00:00Z"}
    phases = [
        a["status"]["phase"]
        for a in sorted(running.attempts(project, "restartable"), key=lambda a: a["spec"]["number"])
    ]
    assert phases == ["Stopped", "Succeeded"]
