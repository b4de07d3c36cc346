"""Issue 16, protect and explain: what a newcomer meets, through the real server, controllers and agents.

* A finished Job keeps its state (``kubectl patch`` of ``spec.state`` is a field error with the fix).
* A Job that cannot run is refused at create, before anything is placed or billed.
* A suspend reads ``Suspending`` (what it waits for, and until when) while attempts run, then ``Suspended``.
* A preempted host says what was reclaimed: interruptible capacity, or an on-demand host.
* Watching a running Job shows a row when something changes, not every few seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import subprocess
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_faults import nodus
from tests.e2e.running.test_jobs import create, patch_spec, shell
from tests.support.images import registry_python_image
from tests.support.objects import API, job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # long end-to-end: make test-slow (CI runs both tiers)


def units_of(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def kubectl(binary: Path, running: Running, project: str, *args: str, stdin: str | None = None) -> tuple[int, str]:
    """Run kubectl as the administrator in ``project``: (exit code, stdout and stderr)."""
    result = subprocess.run(
        [str(binary), "--kubeconfig", str(running.cluster.kubeconfig("admin", project)), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode, result.stdout + result.stderr


def test_a_finished_job_refuses_a_state_change(running: Running, kubectl_binary: Path) -> None:
    project = running.project()
    create(running, project, "done", **shell("echo finished"))
    running.wait_phase(project, "done", "Succeeded")
    cancel = '{"spec":{"state":"Cancelled"}}'
    code, output = kubectl(kubectl_binary, running, project, "patch", "nj", "done", "--type", "merge", "-p", cancel)
    assert code != 0, output
    assert 'spec.state: Invalid value: "Cancelled"' in output, output
    assert "has finished (phase Succeeded)" in output and "create a new Job" in output, output
    job = running.job(project, "done")
    assert job["spec"]["state"] == "Running" and job["status"]["phase"] == "Succeeded"


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        pytest.param(
            {"command": ["/bin/true"], "env": [{"name": "NODUS_INDEX", "value": "7"}]},
            "spec.env[0].name",
            "cannot receive this variable",
            id="reserved-variable",
        ),
        pytest.param(
            {"command": ["/bin/true"], "workingDir": "/usr/src/app"},
            "spec.workingDir",
            "use a path such as /workspace",
            id="working-dir",
        ),
    ],
)
def test_a_job_that_cannot_run_is_refused_at_create(
    running: Running, kubectl_binary: Path, spec: dict[str, object], field: str, words: str
) -> None:
    project = running.project(credit="5")
    manifest = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": "doomed"},
        "spec": {"image": registry_python_image(), "resources": {"cpu": "1"}, "backoffLimit": 6, **spec},
    }
    code, output = kubectl(kubectl_binary, running, project, "apply", "-f", "-", stdin=yaml.safe_dump(manifest))
    assert code != 0, output
    assert f"{field}:" in output and words in output, output
    with running.client() as client:
        assert client.get(f"{API}/namespaces/{project}/jobs/doomed").status_code == 404
        credits = client.get(f"{API}/projects/{project}/credits").json()
    assert Decimal(credits["availableUSD"]) == 5 and Decimal(credits["heldUSD"]) == 0, credits


def test_a_suspend_says_it_is_suspending_and_until_when(running: Running) -> None:
    project = running.project()
    # The program takes a few seconds to stop after SIGTERM: long enough to read what the Job says meanwhile.
    create(running, project, "pausing", **shell("trap 'sleep 4; exit 143' TERM; while true; do sleep 0.1; done"))
    running.wait_phase(project, "pausing", "Running")
    patch_spec(running, project, "pausing", {"state": "Suspended"})

    def suspending() -> dict[str, object] | None:
        status = running.job(project, "pausing")["status"]
        return status if status.get("reason") == "Suspending" else None

    status = running.wait_for("the Job to say it is suspending", suspending, timeout=60)
    assert status["phase"] == "Suspending" and status["fix"], status
    stop = running.attempts(project, "pausing")[0]["spec"]["stop"]
    assert stop["checkpoint"] is True and stop["deadline"], stop
    message = str(status["message"])
    assert "waiting for 1 running attempt to take a checkpoint and stop" in message, message
    assert f"by {stop['deadline']} at the latest" in message, message
    suspended = running.wait_phase(project, "pausing", "Suspended")
    assert suspended["status"]["reason"] == "Suspended"


@pytest.mark.parametrize(
    ("spec", "capacity"),
    [
        pytest.param({"resources": {"cpu": "1"}}, "on-demand capacity", id="on-demand"),
        pytest.param(
            {"resources": {"gpu": {"count": 1, "type": ["rtx4090-24g"]}}, "placement": {"interruptible": "Prefer"}},
            "interruptible capacity",
            id="interruptible",
        ),
    ],
)
def test_a_preempted_host_says_what_was_reclaimed(running: Running, spec: dict[str, object], capacity: str) -> None:
    project = running.project()
    script = (
        "trap 'exit 143' TERM; "
        'if [ "$NODUS_ATTEMPT_NUMBER" = 1 ]; then while true; do sleep 0.1; done; fi; echo second run done'
    )
    create(running, project, "reclaimed", command=["/bin/sh", "-c", script], **spec)
    running.wait_phase(project, "reclaimed", "Running")
    first = running.attempts(project, "reclaimed")[0]
    assert first["status"]["placement"]["interruptible"] is (capacity == "interruptible capacity")
    node = first["spec"]["node"]
    nodus(running, "sim", "preempt", node, "--notice", "3s")

    def noticed() -> dict[str, object] | None:
        with running.client() as client:
            response = client.get(f"{API}/nodes/{node}")
        status = response.json().get("status") or {} if response.status_code == 200 else {}
        return status if status.get("reason") == "Preempted" else None

    node_status = running.wait_for("the node's notice", noticed, timeout=60)
    assert f"The provider reclaimed the host ({capacity}" in str(node_status["message"]), node_status
    done = running.wait_phase(project, "reclaimed", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    lost = next(a for a in running.attempts(project, "reclaimed") if a["spec"]["number"] == 1)
    assert lost["status"]["phase"] == "Lost" and lost["status"]["reason"] == "Preempted"
    assert f"({capacity})" in lost["status"]["message"], lost["status"]
    other = "interruptible capacity" if capacity != "interruptible capacity" else "on-demand"
    assert other not in lost["status"]["message"] + str(node_status["message"])


TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
# The test cluster's --funded-window: a running attempt's hold is extended about once a window (ADR 0037).
FUNDED_WINDOW_SECONDS = 8


def test_watching_a_running_job_shows_a_row_per_change_not_per_look(running: Running) -> None:
    """``kubectl get jobs -w`` of a Job running 20 s: what kubectl prints, as Table rows. The bound (ADR 0037,
    docs/running-jobs.md): the lifecycle writes (admitted, finalizer, Provisioning, first hold, Running,
    checkpoint interval, boot charged, Succeeded), one per extension of the hold (one funded window apart, plus
    the first), and two for races. Before, the funded edge was recomputed from the clock on every look of the
    billing controller (every 2 s here, 30 s by default) and rewrote the Attempt and the Job each time: 23 or
    24 events for this Job, 11 now. About 20 s, in the default tier: the one test of what a watch shows of a Job
    that runs, and the noise only shows over a run of some length."""
    project = running.project()
    path = f"{API}/namespaces/{project}/jobs"

    async def watch() -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        columns: list[dict[str, Any]] = []  # only the first Table of a watch carries them
        params = {"watch": "true", "timeoutSeconds": "90"}
        async with (
            running.cluster.async_client() as client,
            client.stream("GET", path, params=params, headers=TABLE, timeout=120) as response,
        ):
            assert response.status_code == 200
            body = job("steady", command=["/bin/sh", "-c", "sleep 20"])
            body["spec"]["resources"] = {"cpu": "1"}
            assert (await client.post(path, json=body)).status_code == 201
            async for line in response.aiter_lines():
                event = json.loads(line) if line.strip() else {"type": "BOOKMARK"}
                if event["type"] == "BOOKMARK":
                    continue
                columns = event["object"].get("columnDefinitions") or columns
                cells = event["object"]["rows"][0]["cells"]
                # What kubectl prints without -o wide: the columns of priority 0.
                row = {c["name"]: cell for c, cell in zip(columns, cells, strict=True) if not c["priority"]}
                rows.append({"type": event["type"], **row})
                if row["Phase"] in ("Succeeded", "Failed"):
                    return rows
        return rows

    rows = asyncio.run(watch())
    assert rows[-1]["Phase"] == "Succeeded", rows
    modified = [r for r in rows if r["type"] == "MODIFIED"]
    attempt = running.attempts(project, "steady")[0]["status"]
    billed = (units_of(attempt["finishTime"]) - units_of(attempt["provisioningTime"])).total_seconds()
    bound = 8 + 1 + math.ceil(billed / FUNDED_WINDOW_SECONDS) + 2
    printed = [{k: v for k, v in r.items() if k not in ("type", "Age")} for r in rows]
    repeated = sum(1 for before, after in itertools.pairwise(printed) if before == after)
    assert len(modified) <= bound, f"{len(modified)} MODIFIED rows ({repeated} identical) for {billed} s billed: {rows}"
