"""Surviving lost capacity for real: checkpoints, preemption notices, killed hosts, restores, suspends.

Programs run in the agent's sandbox on simulated hosts (real ``nodus agent`` processes); faults are
injected the way a user would (``nodus sim preempt|kill NODE``), checkpoints are requested with kubectl.
The test cluster runs checkpoint cadences 20 times faster (``--sim-checkpoint-time-scale 0.05``): an
``interval`` of 1m is 3 s.
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_faults import nodus
from tests.e2e.running.test_jobs import create, kubectl, patch_spec
from tests.support.images import registry_pytorch_image

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # long end-to-end: make test-slow (CI runs both tiers)

SCALE = 0.05
# Programs that need only the standard library run on the image's Python.
PYTHON = "/usr/bin/python3"
TRAIN = Path(__file__).resolve().parents[2] / "support" / "programs" / "train_torch.py"
SPOT = {"resources": {"gpu": {"count": 1, "type": ["rtx4090-24g"]}}, "placement": {"interruptible": "Prefer"}}
# A counter kept in /nodus/state: resumes from what was restored, counts to $1 with a pause per step, and
# acknowledges checkpoint requests after writing the counter.
COUNTER = r"""
import json, os, sys, time
state = os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "count")
n = int(open(state).read()) if os.path.exists(state) else 0
print("start", n, "restored", os.environ.get("NODUS_RESTORED_SEQ", "-"), flush=True)
answered = 0
while n < int(sys.argv[1]):
    n += 1
    print("count", n, flush=True)
    time.sleep(float(sys.argv[2]))
    request = os.environ["NODUS_CHECKPOINT_REQUEST_FILE"]
    if os.path.exists(request):
        seq = json.load(open(request))["seq"]
        if seq > answered:
            with open(state + ".tmp", "w") as out:
                out.write(str(n))
            os.replace(state + ".tmp", state)
            open(os.environ["NODUS_CHECKPOINT_ACK_FILE"], "w").write(str(seq))
            answered = seq
print("done", n, flush=True)
"""


def python(script: str, *args: str) -> dict[str, Any]:
    """A Job spec running ``script`` (standard library only) on the host's Python, on one CPU-only host."""
    return {"command": [PYTHON, "-c", script, *args], "resources": {"cpu": "1"}}


def counter(steps: int, pause: float, interval: str = "1m", **spec: Any) -> dict[str, Any]:
    recovery = {"checkpoint": {"interval": interval}, **spec.pop("recovery", {})}
    return {**python(COUNTER, str(steps), str(pause)), "recovery": recovery, **spec}


def by_number(running: Running, project: str, job: str) -> list[dict[str, Any]]:
    return sorted(running.attempts(project, job), key=lambda a: a["spec"]["number"])


def committed(running: Running, project: str, job: str, at_least: int = 1) -> dict[str, Any]:
    """Wait for the live attempt's checkpoint seq to reach ``at_least``; returns that attempt."""

    def check() -> dict[str, Any] | None:
        for attempt in running.attempts(project, job):
            checkpoint = (attempt.get("status") or {}).get("checkpoint") or {}
            if attempt["status"].get("phase") == "Running" and int(checkpoint.get("seq") or 0) >= at_least:
                return attempt
        return None

    return dict(running.wait_for(f"checkpoint {at_least} of {job}", check, timeout=120))


def attempt_log(running: Running, project: str, job: str, number: int) -> str:
    return nodus(running, "logs", f"job/{job}", "-n", project, "--attempt", str(number))


def test_a_preempted_job_resumes_from_the_checkpoint_taken_in_its_notice(running: Running) -> None:
    project = running.project()
    create(running, project, "count", **counter(400, 0.05))
    first = committed(running, project, "count")
    checkpoint = first["status"]["checkpoint"]
    assert checkpoint["consistency"] == "Application"
    assert checkpoint["interval"] == "1m0s"
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", checkpoint["manifest"])
    nodus(running, "sim", "preempt", first["spec"]["node"], "--notice", "6s")

    done = running.wait_phase(project, "count", "Succeeded", "Failed", timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    attempts = by_number(running, project, "count")
    assert [a["status"]["phase"] for a in attempts] == ["Lost", "Succeeded"]
    lost, replacement = attempts
    final = lost["status"]["checkpoint"]
    assert lost["status"]["reason"] == "Preempted"
    assert final["seq"] > checkpoint["seq"], "the notice took a final checkpoint"
    assert replacement["spec"]["restore"]["seq"] == final["seq"]
    assert replacement["spec"]["restore"]["manifest"] == final["manifest"]
    assert replacement["status"]["checkpoint"]["restoredFromSeq"] == final["seq"]

    last_count = max(int(n) for n in re.findall(r"^count (\d+)$", attempt_log(running, project, "count", 1), re.M))
    start = re.search(r"^start (\d+) restored (\d+)$", attempt_log(running, project, "count", 2), re.M)
    assert start is not None and int(start.group(2)) == final["seq"]
    # Only the steps the program took while its final checkpoint was uploaded are done again: far less than
    # one interval (60 steps of 0.05 s in 3 s).
    assert 0 <= last_count - int(start.group(1)) < 60 / 2
    assert "done 400" in attempt_log(running, project, "count", 2)
    assert done["status"]["checkpoint"]["restoredFromSeq"] == final["seq"]
    assert done["status"]["storage"]["bytes"] >= final["size"] > 0
    # The replacement's bring-up is billed as Restore.
    segments = replacement["status"]["cost"]["bySegment"]
    assert segments.get("restoreUSD") is not None and segments.get("bootUSD") is None, segments


@pytest.mark.slow  # about 22 s; the chaos test kills hosts too (slow tier)
def test_a_killed_host_gives_no_notice_and_the_last_committed_checkpoint_is_used(running: Running) -> None:
    project = running.project()
    create(running, project, "killed", **counter(300, 0.05))
    first = committed(running, project, "killed", at_least=2)
    nodus(running, "sim", "kill", first["spec"]["node"])
    done = running.wait_phase(project, "killed", "Succeeded", "Failed", timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    lost, replacement = by_number(running, project, "killed")
    assert lost["status"]["phase"] == "Lost" and lost["status"]["reason"] == "NodeLost"
    # Whatever the lost attempt committed last (possibly after we looked) is what the replacement restored.
    assert replacement["spec"]["restore"]["seq"] == lost["status"]["checkpoint"]["seq"] >= 2
    start = re.search(r"^start (\d+) restored", attempt_log(running, project, "killed", 2), re.M)
    assert start is not None and int(start.group(1)) > 0


def test_a_program_that_never_acknowledges_gets_crash_consistent_snapshots(running: Running) -> None:
    project = running.project()
    script = (
        "import os, time\n"
        "path = os.path.join(os.environ['NODUS_CHECKPOINT_DIR'], 'n')\n"
        "n = int(open(path).read()) if os.path.exists(path) else 0\n"
        "print('start', n, flush=True)\n"
        "while n < 200:\n"
        "    n += 1\n"
        "    open(path + '.tmp', 'w').write(str(n)); os.replace(path + '.tmp', path)\n"
        "    time.sleep(0.05)\n"
    )
    create(
        running,
        project,
        "silent",
        **python(script),
        recovery={"checkpoint": {"interval": "1m"}},
    )
    attempt = committed(running, project, "silent", at_least=2)
    assert attempt["status"]["checkpoint"]["consistency"] == "Crash"
    nodus(running, "sim", "kill", attempt["spec"]["node"])
    done = running.wait_phase(project, "silent", "Succeeded", "Failed", timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    start = re.search(r"^start (\d+)$", attempt_log(running, project, "silent", 2), re.M)
    assert start is not None and int(start.group(1)) > 0


def test_suspend_checkpoints_and_resume_restores(running: Running, kubectl_binary: Path) -> None:
    project = running.project()
    create(running, project, "pause", **counter(300, 0.05, interval="6h"))
    running.wait_for(
        "the counter to run",
        lambda: "count 20" in attempt_log(running, project, "pause", 1),
    )
    kubectl(
        kubectl_binary,
        running,
        project,
        "patch",
        "job",
        "pause",
        "--type=merge",
        "-p",
        '{"spec":{"state":"Suspended"}}',
    )
    suspended = running.wait_phase(project, "pause", "Suspended", timeout=120)
    [stopped] = by_number(running, project, "pause")
    assert stopped["status"]["phase"] == "Stopped"
    assert stopped["spec"]["stop"]["checkpoint"] is True
    seq = stopped["status"]["checkpoint"]["seq"]
    assert suspended["status"]["checkpoint"]["seq"] == seq
    patch_spec(running, project, "pause", {"state": "Running"})
    done = running.wait_phase(project, "pause", "Succeeded", "Failed", timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    second = by_number(running, project, "pause")[1]
    assert second["spec"]["restore"]["seq"] == seq
    start = re.search(r"^start (\d+) restored (\d+)$", attempt_log(running, project, "pause", 2), re.M)
    assert start is not None and int(start.group(1)) >= 20


def test_a_requested_checkpoint_is_taken_now(running: Running, kubectl_binary: Path) -> None:
    project = running.project()
    create(running, project, "ask", **counter(400, 0.05, interval="6h"))
    running.wait_phase(project, "ask", "Running")
    running.wait_for("the counter to run", lambda: "count 5" in attempt_log(running, project, "ask", 1))
    when = "2026-11-29T12:00:00Z"
    kubectl(kubectl_binary, running, project, "annotate", "job", "ask", f"nodus.dev/checkpoint-requested-at={when}")
    attempt = committed(running, project, "ask")
    assert attempt["status"]["checkpoint"]["handledRequest"] == when
    assert attempt["status"]["checkpoint"]["interval"] == "6h0m0s"
    assert running.job(project, "ask")["status"]["handledRequests"]["checkpoint"] == when
    patch_spec(running, project, "ask", {"state": "Cancelled"})


def test_a_restartable_job_gets_its_cursor_back(running: Running) -> None:
    project = running.project()
    script = (
        "import json, os, time\n"
        "cursor = os.environ.get('NODUS_RESUME_CURSOR', '0')\n"
        "print('cursor', cursor, flush=True)\n"
        "if cursor != '0': raise SystemExit(0)\n"
        "for i in range(1, 1000):\n"
        "    open(os.environ['NODUS_PROGRESS_FILE'], 'a').write(json.dumps({'cursor': f'row-{i}'}) + '\\n')\n"
        "    time.sleep(0.05)\n"
    )
    create(
        running,
        project,
        "rows",
        **python(script),
        recovery={"continuity": "Restartable"},
    )
    running.wait_for(
        "a cursor",
        lambda: any((a.get("status") or {}).get("resumeCursor") for a in running.attempts(project, "rows")),
    )
    node = running.attempts(project, "rows")[0]["spec"]["node"]
    nodus(running, "sim", "preempt", node, "--notice", "3s")
    done = running.wait_phase(project, "rows", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    lost, second = by_number(running, project, "rows")
    assert second["spec"]["resumeCursor"] == lost["status"]["resumeCursor"]
    assert f"cursor {lost['status']['resumeCursor']}" in attempt_log(running, project, "rows", 2)
    assert "restore" not in second["spec"]


def test_a_checkpoint_above_max_size_is_refused_before_upload(running: Running) -> None:
    project = running.project()
    script = (
        "import os, time\n"
        "open(os.path.join(os.environ['NODUS_CHECKPOINT_DIR'], 'big'), 'wb').write(os.urandom(3000))\n"
        "time.sleep(30)\n"
    )
    spec = python(script)
    create(running, project, "big", **spec, recovery={"checkpoint": {"interval": "1m", "maxSize": "2Ki"}})

    def failure() -> dict[str, Any] | None:
        for attempt in running.attempts(project, "big"):
            found = ((attempt.get("status") or {}).get("checkpoint") or {}).get("lastFailure")
            if found:
                return dict(found)
        return None

    found = running.wait_for("a refused checkpoint", failure, timeout=60)
    assert found["reason"] == "CheckpointTooLarge"
    assert "2048 bytes" in found["message"] and "maxSize" in found["message"]
    patch_spec(running, project, "big", {"state": "Cancelled"})


@pytest.mark.slow  # a soak: five preemptions of real training; CI runs it after `make test` (.ci/run)
def test_pytorch_training_preempted_five_times_ends_bit_identical(running: Running, tmp_path: Path) -> None:
    """A real PyTorch program on interruptible capacity, preempted at random moments, finishes with the
    weights an uninterrupted run gets, losing at most one checkpoint interval of work per preemption."""
    steps, pause = 300, 0.1
    reference = subprocess.run(
        [sys.executable, str(TRAIN), str(steps), "0", "--local", str(tmp_path / "reference")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    expected = re.search(r"^weights (sha256:[0-9a-f]{64})$", reference.stdout, re.M)
    assert expected is not None, reference.stdout + reference.stderr

    project = running.project()
    create(
        running,
        project,
        "train",
        # torch is in the PyTorch image; the program is this checkout's file, passed inline.
        image=registry_pytorch_image(),
        command=["python3", "-c", TRAIN.read_text(), str(steps), str(pause)],
        # Five losses with maxAttempts 3: each attempt ran longer than minProgressDuration, so none counts.
        recovery={"checkpoint": {"interval": "1m"}, "maxAttempts": 3, "minProgressDuration": "1s"},
        **SPOT,
    )
    rng = random.Random(6)
    preempted = 0
    while preempted < 5:
        attempt = committed(running, project, "train")
        if attempt["spec"]["number"] != preempted + 1:
            continue
        time.sleep(rng.uniform(0.2, 3.0))
        nodus(running, "sim", "preempt", attempt["spec"]["node"], "--notice", "5s")
        running.wait_for(
            "the attempt to end",
            lambda a=attempt: (
                next(x for x in running.attempts(project, "train") if x["metadata"]["name"] == a["metadata"]["name"])[
                    "status"
                ]["phase"]
                == "Lost"
            ),
        )
        preempted += 1
    done = running.wait_phase(project, "train", "Succeeded", "Failed", timeout=300)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    attempts = by_number(running, project, "train")
    assert [a["status"]["phase"] for a in attempts] == ["Lost"] * 5 + ["Succeeded"]
    assert all(a["status"]["placement"]["interruptible"] for a in attempts)
    final_log = attempt_log(running, project, "train", 6)
    assert f"weights {expected.group(1)}" in final_log, final_log[-2000:]
    interval_steps = 60 * SCALE / pause  # one checkpoint interval of work, in steps
    # Lost work per preemption: the steps the lost attempts had reached beyond where the next attempt that got
    # to train started (an attempt preempted while PyTorch was still importing trained nothing).
    reached = 0
    for attempt in attempts:
        log = attempt_log(running, project, "train", attempt["spec"]["number"])
        start = re.search(r"^start (\d+) restored", log, re.M)
        if start is None:
            assert attempt["status"]["phase"] == "Lost" and not re.search(r"^step ", log, re.M), log[-2000:]
            continue
        assert reached - int(start.group(1)) <= interval_steps, (attempt["metadata"]["name"], reached, start.group(0))
        reached = max([int(start.group(1)), *(int(s) for s in re.findall(r"^step (\d+)$", log, re.M))])
    assert done["status"]["attempts"]["total"] == 6


def test_a_suspend_whose_checkpoint_keeps_failing_leaves_the_job_running(running: Running) -> None:
    project = running.project()
    script = (
        "import os, time\n"
        "open(os.path.join(os.environ['NODUS_CHECKPOINT_DIR'], 'big'), 'wb').write(os.urandom(3000))\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    spec = python(script)
    create(running, project, "stuck", **spec, recovery={"checkpoint": {"interval": "6h", "maxSize": "2Ki"}})
    running.wait_for("the program to run", lambda: "ready" in attempt_log(running, project, "stuck", 1))
    patch_spec(running, project, "stuck", {"state": "Suspended"})

    def suspend_failed() -> dict[str, Any] | None:
        status = running.job(project, "stuck")["status"]
        return status if status.get("reason") == "SuspendFailed" else None

    status = running.wait_for("the suspend to give up", suspend_failed, timeout=60)
    assert status["phase"] == "Running" and status["suspendFailures"] == 3
    assert "CheckpointTooLarge" in str(running.attempts(project, "stuck")[0]["status"]["checkpoint"]["lastFailure"])
    assert "maxSize" in status["message"]
    [attempt] = running.attempts(project, "stuck")
    assert attempt["status"]["phase"] == "Running"

    patch_spec(running, project, "stuck", {"state": "Running"})

    def resumed() -> dict[str, Any] | None:
        job = running.job(project, "stuck")
        [attempt] = running.attempts(project, "stuck")
        return job if "suspendFailures" not in job["status"] and not attempt["spec"].get("stop") else None

    job = running.wait_for("the suspend to be withdrawn", resumed, timeout=60)
    assert {c["type"]: c["status"] for c in job["status"]["conditions"]}["SuspendFailed"] == "False"
    assert running.attempts(project, "stuck")[0]["status"]["phase"] == "Running"
    patch_spec(running, project, "stuck", {"state": "Cancelled"})


@pytest.mark.slow  # about 32 s (a hold runs out, then credit comes back): CI runs it after `make test` (.ci/run)
def test_a_money_stop_checkpoints_while_funded_and_resumes_from_it(running: Running) -> None:
    project = running.project(credit="10")
    # On cpu-8c-us (0.4032 USD/h) the hold is kept a stop's cost (the capture interval, the 30 s grace and the
    # minute increment: about 0.0106 USD) ahead of what accrued; a cap of 0.0118 USD lets the program run about
    # ten seconds, then the hold cannot grow: the attempt stops, checkpointing first while what is held lasts,
    # and waits for a higher cap.
    spec = counter(600, 0.05, interval="6h", placement={"offerings": ["cpu-8c-us"]})
    create(running, project, "frugal", **spec, maxCostUSD="0.0118")

    def stopped() -> dict[str, Any] | None:
        attempts = by_number(running, project, "frugal")
        return attempts[0] if attempts and attempts[0]["status"].get("phase") == "Stopped" else None

    first = running.wait_for("the cap to stop the attempt", stopped, timeout=120)
    assert first["spec"]["stop"]["reason"] == "MaxCostReached"
    assert first["spec"]["stop"]["checkpoint"] is True and first["spec"]["stop"]["deadline"]
    seq = first["status"]["checkpoint"]["seq"]
    assert seq >= 1
    patch_spec(running, project, "frugal", {"maxCostUSD": "1"})
    done = running.wait_phase(project, "frugal", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    second = by_number(running, project, "frugal")[1]
    assert second["spec"]["restore"]["seq"] == seq
    start = re.search(r"^start (\d+) restored", attempt_log(running, project, "frugal", 2), re.M)
    assert start is not None and int(start.group(1)) > 0
