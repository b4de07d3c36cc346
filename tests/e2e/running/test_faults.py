"""Losing capacity and losing controllers: preemption, failed boots, controller failover.

Faults are injected the way a user would (``nodus sim preempt|fail-boot NODE``) and controller
processes are killed with SIGKILL, as a machine dies. What must hold: every index ends with exactly
one successful attempt, nothing is created twice, and lost capacity is replaced and explained.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_jobs import create, shell
from tests.support import controllers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # long end-to-end: make test-slow (CI runs both tiers)


def nodus(running: Running, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "nodus", *args, "--kubeconfig", str(running.cluster.kubeconfig("admin"))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_preemption_notice_stops_the_program_and_a_replacement_finishes(running: Running) -> None:
    project = running.project()
    script = (
        "trap 'echo notice received; exit 143' TERM; "
        'if [ "$NODUS_ATTEMPT_NUMBER" = 1 ]; then while true; do sleep 0.1; done; fi; echo second run done'
    )
    create(running, project, "spot", **shell(script))
    running.wait_phase(project, "spot", "Running")
    node = running.attempts(project, "spot")[0]["spec"]["node"]
    assert "preempt requested" in nodus(running, "sim", "preempt", node, "--notice", "5s")
    done = running.wait_phase(project, "spot", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    attempts = sorted(running.attempts(project, "spot"), key=lambda a: a["spec"]["number"])
    assert [a["status"]["phase"] for a in attempts] == ["Lost", "Succeeded"]
    assert attempts[0]["status"]["reason"] == "Preempted"
    assert attempts[1]["spec"]["node"] != node
    assert "notice received" in nodus(running, "logs", "job/spot", "-n", project, "--attempt", "1")
    assert "second run done" in nodus(running, "logs", "job/spot", "-n", project)


def test_a_failed_boot_is_replaced(running: Running) -> None:
    project = running.project()
    create(
        running,
        project,
        "unlucky",
        **shell("echo booted fine", placement={"offerings": [controllers.SLOW_BOOT_OFFERING]}),
    )

    def booting_node() -> str | None:
        for attempt in running.attempts(project, "unlucky"):
            if attempt["spec"].get("node"):
                return str(attempt["spec"]["node"])
        return None

    node = running.wait_for("a node to be assigned", booting_node)
    nodus(running, "sim", "fail-boot", node)
    done = running.wait_phase(project, "unlucky", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    attempts = sorted(running.attempts(project, "unlucky"), key=lambda a: a["spec"]["number"])
    assert [a["status"]["phase"] for a in attempts] == ["Lost", "Succeeded"]
    assert attempts[0]["status"]["reason"] == "BootFailed"
    assert done["status"]["failed"] == 0


def test_nodus_logs_follows_a_running_attempt_to_its_end(running: Running) -> None:
    project = running.project()
    create(running, project, "chatty", **shell("for i in 1 2 3 4 5; do echo line $i; sleep 0.3; done"))
    running.wait_phase(project, "chatty", "Running", "Succeeded")
    out = nodus(running, "logs", "job/chatty", "-n", project, "-f")
    assert out.splitlines() == [f"line {i}" for i in range(1, 6)]
    assert nodus(running, "logs", "attempt/chatty-0-1", "-n", project, "--tail", "2").splitlines() == [
        "line 4",
        "line 5",
    ]


def test_two_controllers_never_double_create_and_a_killed_leader_loses_nothing(running: Running) -> None:
    # Trusting the tests' HTTPS server like the first leader: hosts it boots later serve other tests' URL inputs.
    trust = ("--sim-agent-trust-ca", str(running.https.ca_file)) if running.https else ()
    standby = controllers.start(running.cluster, running.directory, "second", trust)
    running.others.append(standby)
    assert controllers.wait_for_leader(running.cluster) == running.controllers.identity
    project = running.project()
    create(running, project, "steady", **shell("sleep 0.5; echo index $NODUS_INDEX", completions=16, parallelism=4))
    running.wait_for(
        "some indexes to finish",
        lambda: (running.job(project, "steady")["status"].get("succeeded") or 0) >= 3,
    )
    running.controllers.kill()
    controllers.wait_for_leader(running.cluster, "second", timeout=60)
    running.controllers = standby
    done = running.wait_phase(project, "steady", "Succeeded", "Failed", timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    attempts = running.attempts(project, "steady")
    per_index = Counter(a["spec"]["index"] for a in attempts if a["status"]["phase"] == "Succeeded")
    assert per_index == Counter(range(16)), "every index succeeded exactly once"
    assert len(attempts) == 16, sorted(a["metadata"]["name"] for a in attempts)
    assert done["status"]["completedIndexes"] == "0-15"
