"""Issue 16, protect and explain: what a newcomer meets, through the real server, controllers and agents.

* A finished Job keeps its state (``kubectl patch`` of ``spec.state`` is a field error with the fix).
* A Job that cannot run is refused at create, before anything is placed or billed.
"""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_jobs import create, shell
from tests.support.objects import API

pytestmark = pytest.mark.e2e


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
        pytest.param({"args": ["train.py"]}, "spec.command", "does not run the image", id="no-command"),
        pytest.param(
            {"command": ["/bin/true"], "env": [{"name": "NODUS_INDEX", "value": "7"}]},
            "spec.env[0].name",
            "cannot receive this variable",
            id="reserved-variable",
        ),
        pytest.param(
            {"command": ["/bin/true"], "sidecars": [{"name": "proxy"}]},
            "spec.sidecars[0].command",
            "entrypoint cannot run",
            id="sidecar-without-command",
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
        "spec": {"image": "python:3.12-slim", "resources": {"cpu": "1"}, "backoffLimit": 6, **spec},
    }
    code, output = kubectl(kubectl_binary, running, project, "apply", "-f", "-", stdin=yaml.safe_dump(manifest))
    assert code != 0, output
    assert f"{field}:" in output and words in output, output
    with running.client() as client:
        assert client.get(f"{API}/namespaces/{project}/jobs/doomed").status_code == 404
        credits = client.get(f"{API}/projects/{project}/credits").json()
    assert Decimal(credits["availableUSD"]) == 5 and Decimal(credits["heldUSD"]) == 0, credits
