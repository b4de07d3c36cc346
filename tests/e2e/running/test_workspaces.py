"""Workspaces end to end with real agents: a pushed home mounted at a subdirectory, pinned across a preemption,
and pushed again from a Job's output.

Programs run in the agent's sandbox on simulated hosts; the Workspace is pushed with the CLI (``nodus workspaces
push``), the host is preempted the way a user would (``nodus sim preempt NODE``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_faults import nodus
from tests.e2e.running.test_jobs import create, shell
from tests.support.objects import API

pytestmark = pytest.mark.e2e

# Attempt 1 shows what it mounted, then waits to be preempted; attempt 2 shows it again and ends.
READER = (
    "trap 'exit 143' TERM; "
    "echo attempt $NODUS_ATTEMPT_NUMBER sees $(cat /nodus/inputs/code/pkg/version.txt); "
    "ls /nodus/inputs/code; "
    "test -e /nodus/inputs/code/notes.txt && echo whole-home-leaked; "
    "touch /nodus/inputs/code/new 2>/dev/null && echo writable || echo read-only; "
    'if [ "$NODUS_ATTEMPT_NUMBER" = 1 ]; then while true; do sleep 0.1; done; fi'
)


def log(running: Running, project: str, job: str, attempt: int) -> str:
    return nodus(running, "logs", f"job/{job}", "-n", project, "--attempt", str(attempt))


def says(running: Running, project: str, job: str, attempt: int, words: str) -> bool:
    """Whether attempt ``attempt`` of ``job`` logged ``words`` yet (False while it has no log)."""
    try:
        return words in log(running, project, job, attempt)
    except AssertionError:
        return False


def test_a_workspace_is_mounted_at_a_subdirectory_pinned_across_a_preemption_and_pushed_from_an_output(
    running: Running, tmp_path: Path
) -> None:
    project = running.project()
    with running.client() as client:
        body = {"apiVersion": "nodus.dev/v1", "kind": "Workspace", "metadata": {"name": "home"}, "spec": {}}
        assert client.post(f"{API}/namespaces/{project}/workspaces", json=body).status_code == 201
    tree = tmp_path / "home"
    (tree / "src" / "pkg").mkdir(parents=True)
    (tree / "src" / "pkg" / "version.txt").write_text("v1\n")
    (tree / "notes.txt").write_text("outside the mounted subdirectory\n")
    assert "revision 1 pushed" in nodus(running, "workspaces", "push", "home", str(tree), "-n", project)

    create(
        running,
        project,
        "reader",
        **shell(READER, inputs=[{"name": "code", "fromWorkspace": {"name": "home", "path": "src"}}]),
    )
    running.wait_for("attempt 1 to show its files", lambda: says(running, project, "reader", 1, "attempt 1 sees v1"))
    # Pushed again while the Job runs: the replacement must still see revision 1.
    (tree / "src" / "pkg" / "version.txt").write_text("v2\n")
    pushed = nodus(running, "workspaces", "push", "home", str(tree), "-n", project)
    assert "revision 2 pushed: 2 chunks, 1 chunks uploaded" in pushed
    node = running.attempts(project, "reader")[0]["spec"]["node"]
    assert "preempt requested" in nodus(running, "sim", "preempt", node, "--notice", "3s")
    done = running.wait_phase(project, "reader", "Succeeded", "Failed", timeout=150)
    assert done["status"]["phase"] == "Succeeded", (done["status"], running.logs())
    attempts = sorted(running.attempts(project, "reader"), key=lambda a: a["spec"]["number"])
    assert [a["status"]["phase"] for a in attempts] == ["Lost", "Succeeded"]
    assert attempts[1]["spec"]["node"] != node
    second = log(running, project, "reader", 2)
    assert "attempt 2 sees v1" in second and "read-only" in second
    assert "pkg" in second and "whole-home-leaked" not in second
    (pinned,) = done["status"]["inputs"]
    assert pinned["workspaceRevision"] == 1
    assert attempts[0]["spec"]["inputs"] == attempts[1]["spec"]["inputs"]

    # A Job's output becomes revision 3 (no bytes copied); the next Job mounts a subdirectory of it.
    create(
        running,
        project,
        "writer",
        **shell("mkdir -p /nodus/outputs/src/pkg && echo v3 > /nodus/outputs/src/pkg/version.txt"),
    )
    assert running.wait_phase(project, "writer", "Succeeded", "Failed")["status"]["phase"] == "Succeeded"
    recorded = nodus(running, "workspaces", "push", "home", "--from-output", "writer/outputs", "-n", project)
    assert "revision 3 recorded from output writer/outputs" in recorded
    create(
        running,
        project,
        "after",
        **shell(
            READER.replace('"$NODUS_ATTEMPT_NUMBER" = 1', "0 = 1"),
            inputs=[{"name": "code", "fromWorkspace": {"name": "home", "path": "src"}}],
        ),
    )
    after = running.wait_phase(project, "after", "Succeeded", "Failed")
    assert after["status"]["phase"] == "Succeeded", after["status"]
    assert "attempt 1 sees v3" in log(running, project, "after", 1)
    assert after["status"]["inputs"][0]["workspaceRevision"] == 3

    # Pulled back with the CLI: the output revision as files.
    out = tmp_path / "pulled"
    nodus(running, "workspaces", "pull", "home", str(out), "-n", project)
    assert (out / "src" / "pkg" / "version.txt").read_text() == "v3\n"
