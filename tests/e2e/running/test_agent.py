"""``nodus agent`` started by hand: it registers its own Node, heartbeats, and runs what lands on it."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_jobs import create, job_log, shell
from tests.support.objects import API

pytestmark = pytest.mark.e2e

OFFERING = "cpu-32c-eu"


def test_an_agent_started_by_hand_registers_and_runs_a_job(running: Running) -> None:
    work = running.directory / "manual-agent"
    log = (running.directory / "manual-agent.log").open("wb")
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nodus",
            "agent",
            "--kubeconfig",
            str(running.cluster.kubeconfig("admin")),
            "--node-name",
            "by-hand-1",
            "--offering",
            OFFERING,
            "--gpus",
            "0",
            "--runtime",
            "unsandboxed",
            "--work-dir",
            str(work),
            "--heartbeat-interval",
            "500ms",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def registered() -> dict[str, object] | None:
            with running.client("alice") as client:  # any user may read nodes
                response = client.get(f"{API}/nodes/by-hand-1")
                node = response.json() if response.status_code == 200 else None
                return node if node and (node.get("status") or {}).get("phase") == "Ready" else None

        node = running.wait_for("the agent to register its Node", registered)
        assert node["spec"] == {"offering": OFFERING, "provider": "manual"}  # type: ignore[index]
        assert node["status"]["runtime"] == "unsandboxed"  # type: ignore[index]

        project = running.project()
        create(
            running,
            project,
            "manual",
            **shell("echo on $NODUS_NODE", placement={"offerings": [OFFERING], "profile": "Speed"}),
        )
        done = running.wait_phase(project, "manual", "Succeeded", "Failed")
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert done["status"]["placement"]["warmReuse"] is True
        assert job_log(running, project, "manual").strip() == "on by-hand-1"
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=30) == 0
        log.close()
