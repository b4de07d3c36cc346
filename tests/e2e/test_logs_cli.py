"""`nodus logs` against the real API server: with -f it waits for an attempt that has not started yet.

The attempts are made by hand, as the Job controller makes them (the session's cluster runs no controllers),
so each step is in the test's hands: the CLI is already following when the attempt appears.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import httpx
import pytest

from tests.e2e.test_logs import MERGE, create_attempt, entry, post, set_phase
from tests.support.cluster import Cluster
from tests.support.objects import job, jobs_path

pytestmark = pytest.mark.e2e

WAITING = "waiting for index 2's first attempt"


def _logs(kubeconfig: Path, project: str, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "nodus", "logs", *args, "-n", project, "--kubeconfig", str(kubeconfig)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class _Lines:
    """A stream's lines as they come (a thread reads it), so the test can wait for one with a timeout."""

    def __init__(self, stream: IO[str]) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.queue.put(line)

    def join(self) -> None:
        self._thread.join(timeout=10)


def _create_job(admin: httpx.Client, project: str, name: str) -> str:
    created = admin.post(jobs_path(project), json=job(name, completions=3))
    assert created.status_code == 201, created.text
    return str(created.json()["metadata"]["uid"])


def test_follow_waits_for_the_first_attempt_then_follows_it(
    cluster: Cluster, admin: httpx.Client, project: str
) -> None:
    uid = _create_job(admin, project, "later")
    with _logs(cluster.kubeconfig("alice"), project, "job/later", "--index", "2", "-f") as follower:
        assert follower.stderr is not None and follower.stdout is not None
        errors = _Lines(follower.stderr)
        try:
            assert errors.queue.get(timeout=30).strip() == WAITING
            assert follower.poll() is None, "it must wait, not fail"

            name = create_attempt(admin, project, "later", 2, 1, uid)
            assert post(admin, project, name, entry("first line"), entry("second line")).status_code == 204
            set_phase(admin, project, name, "Succeeded")

            assert follower.wait(timeout=60) == 0
            assert follower.stdout.read() == "first line\nsecond line\n"
        finally:
            follower.kill()
            follower.wait()
            errors.join()
        assert errors.queue.empty(), "the wait is said once"


def test_without_follow_or_when_it_can_never_come_the_not_found_stays(
    cluster: Cluster, admin: httpx.Client, project: str
) -> None:
    _create_job(admin, project, "never")
    kubeconfig = cluster.kubeconfig("alice")

    def fails(*args: str) -> str:
        process = _logs(kubeconfig, project, "job/never", *args)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 1 and out == "", (out, err)
        return err.strip()

    assert fails("--index", "2") == 'Error from server (NotFound): job "never" has no attempt for index 2 yet'
    assert (
        fails("--index", "3", "-f")
        == 'Error from server (NotFound): job "never" has no index 3: its indexes are 0 to 2'
    )
    finished = admin.patch(
        jobs_path(project, "never") + "/status", json={"status": {"phase": "Cancelled"}}, headers=MERGE
    )
    assert finished.status_code == 200, finished.text
    assert fails("--index", "2", "-f") == 'Error from server (NotFound): job "never" has no attempt for index 2 yet'
