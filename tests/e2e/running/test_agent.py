"""``nodus agent`` started by hand: it joins with a bootstrap token, heartbeats, and runs what lands on it."""

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


def join_token(running: Running, node_name: str | None = None, ttl: str = "10m") -> str:
    """A bootstrap token made with ``nodus nodes join-token`` as the administrator."""
    command = [sys.executable, "-m", "nodus", "nodes", "join-token", "--ttl", ttl]
    command += ["--kubeconfig", str(running.cluster.kubeconfig("admin"))]
    if node_name:
        command += ["--node-name", node_name]
    printed = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return printed.splitlines()[0].strip()


def test_an_agent_started_by_hand_registers_and_runs_a_job(running: Running) -> None:
    work = running.directory / "manual-agent"
    log = (running.directory / "manual-agent.log").open("wb")
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nodus",
            "agent",
            "--server",
            running.cluster.url,
            "--certificate-authority",
            str(running.cluster.ca_file),
            "--join-token",
            join_token(running),
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


def test_an_agent_renews_its_credential_while_it_runs(running: Running) -> None:
    """Credentials of 12 s: the agent renews each after 6 s, authenticating with itself, and heartbeats on."""
    work = running.directory / "renewing-agent"
    credential = work / "identity" / "credential"
    with (running.directory / "renewing-agent.log").open("wb") as log:
        agent = subprocess.Popen(
            [
                *(sys.executable, "-m", "nodus", "agent", "--server", running.cluster.url),
                *("--certificate-authority", str(running.cluster.ca_file), "--join-token", join_token(running)),
                *("--node-name", "renewing-1", "--offering", OFFERING, "--gpus", "0", "--runtime", "unsandboxed"),
                *("--work-dir", str(work), "--heartbeat-interval", "500ms", "--credential-lifetime", "12s"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            running.wait_for("the agent to join", credential.exists)
            first = credential.read_bytes()
            # Two renewals later the first credential has expired: heartbeats still land only if they rotated.
            running.wait_for(
                "a second renewal",
                lambda: (running.directory / "renewing-agent.log").read_text().count("node credential renewed") >= 2,
                timeout=60,
            )
            assert credential.read_bytes() != first

            # Heartbeats renew the node's Lease (the lifecycle controller created it); the Node is not written.
            with running.client() as client:
                lease = f"{API}/leases/node.renewing-1"
                running.wait_for("the node's Lease", lambda: client.get(lease).status_code == 200, timeout=30)
                node_version = client.get(f"{API}/nodes/renewing-1").json()["metadata"]["resourceVersion"]
                renewals: set[str] = set()

                def renewed_thrice() -> bool:
                    renewals.add(client.get(lease).json()["spec"].get("renewTime") or "")
                    return len(renewals - {""}) >= 3

                running.wait_for("three renewals of the Lease", renewed_thrice, timeout=20)
                assert client.get(lease).json()["spec"]["holderIdentity"] == "renewing-1"
                assert client.get(f"{API}/nodes/renewing-1").json()["metadata"]["resourceVersion"] == node_version
            assert agent.poll() is None
        finally:
            agent.send_signal(signal.SIGTERM)
            assert agent.wait(timeout=30) == 0
            with running.client() as client:
                client.delete(f"{API}/nodes/renewing-1")
                # The Lease goes with its Node.
                running.wait_for(
                    "the Lease to go", lambda: client.get(f"{API}/leases/node.renewing-1").status_code == 404
                )
