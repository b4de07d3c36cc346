"""Chaos: Jobs on interruptible capacity while hosts are preempted and killed at random and the leading
controller manager dies.

A dozen counters (``test_recovery.COUNTER``, which acknowledges checkpoint requests) run on interruptible
RTX 4090 hosts with a checkpoint every 3 s (1m, scaled). A loop picks running attempts at random and, the way
a user would (``nodus sim preempt --notice 5s`` or ``nodus sim kill``), takes their hosts away; once, it
SIGKILLs the leading controller manager, a standby takes over, and the killed one comes back as a standby.
Afterwards ``tests/support/recovery.py`` must find: no Job lost, every replacement resumed from the newest
checkpoint of its index, no two attempts of an index running at once; and ``nodus billing verify`` must
find the ledger sound. The random seed is printed (and in every assertion); ``NODUS_CHAOS_SEED`` replays one.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from nodus.apimachinery import units
from tests.e2e.running.conftest import Running
from tests.e2e.running.test_billing import verify
from tests.e2e.running.test_faults import nodus
from tests.e2e.running.test_jobs import create
from tests.e2e.running.test_recovery import SPOT, counter
from tests.support import controllers, recovery
from tests.support.objects import API

# A chaos test: in the slow tier, which CI runs after `make test` (.ci/run).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOBS = 12
STEPS, PAUSE = 200, 0.05  # 10 s of counting: three checkpoints, unless a restore shortens it
SPEC: dict[str, Any] = {**SPOT, "recovery": {"maxAttempts": 3, "minProgressDuration": "1s"}}
FAULTS = 10  # hosts taken away in all
FAULTS_PER_JOB = 2
# Only attempts that ran this long are hit: at least, so that every loss made progress (minProgressDuration)
# and none uses up maxAttempts (a Job failed for that would be the test's doing, not Nodus's); at most, so
# that a first attempt still has seconds of work left and is lost, not finished, when its host goes.
RAN = (3.0, 6.0)


def listed(running: Running, project: str, plural: str) -> list[dict[str, Any]]:
    with running.client() as client:
        response = client.get(f"{API}/namespaces/{project}/{plural}")
        assert response.status_code == 200, response.text
        return list(response.json()["items"])


def state(jobs: list[dict[str, Any]], attempts: list[dict[str, Any]]) -> str:
    """One line per Job and per attempt: what a failure message needs to tell what happened."""
    lines = [f"job {j['metadata']['name']}: {j.get('status', {}).get('phase')}" for j in jobs]
    for a in sorted(attempts, key=lambda a: a["metadata"]["name"]):
        status, spec = a.get("status") or {}, a["spec"]
        fields = [status.get("phase"), status.get("reason"), spec.get("node"), status.get("startTime")]
        fields += [status.get("finishTime"), (status.get("checkpoint") or {}).get("seq")]
        fields += [(spec.get("restore") or {}).get("seq"), status.get("message")]
        lines.append(f"attempt {a['metadata']['name']}: " + " ".join(str(f) for f in fields))
        if status.get("phase") not in ("Succeeded", "Failed", "Lost", "Stopped"):
            lines.append(f"  {json.dumps({'spec': {**spec, 'command': '...'}, 'status': status}, sort_keys=True)}")
    return "\n".join(lines)


class Chaos:
    """The faults of one run: which host to take away and how, and the one controller failover."""

    def __init__(self, running: Running, rng: random.Random) -> None:
        self.running = running
        self.rng = rng
        self.injected: dict[str, datetime] = {}  # attempt -> when its host was taken away
        self.hit: set[str] = set()  # the nodes taken away
        self.counts: Counter[str] = Counter()
        self.per_job: Counter[str] = Counter()
        # One of each first, then at random.
        self.actions = rng.sample(["preempt", "kill"], 2)
        self.failover_after = rng.randint(2, FAULTS - 2)
        self.standby = self.start(f"chaos-{uuid.uuid4().hex[:6]}")

    def start(self, identity: str) -> controllers.ControllerProcess:
        trust = ("--sim-agent-trust-ca", str(self.running.https.ca_file)) if self.running.https else ()
        return controllers.start(self.running.cluster, self.running.directory, identity, trust)

    def step(self, attempts: list[dict[str, Any]]) -> None:
        """Take one running attempt's host away, if one qualifies; fail over once along the way."""
        if self.counts["failover"] == 0 and sum(self.counts.values()) >= self.failover_after:
            self.failover()
            return  # ``attempts`` is stale by now
        now = datetime.now(UTC)
        candidates = [
            a
            for a in attempts
            if a["status"].get("phase") == "Running"
            and a["spec"]["node"] not in self.hit
            and self.per_job[a["spec"]["job"]] < FAULTS_PER_JOB
            and a["status"].get("startTime")
            and RAN[0] <= (now - units.parse_time(a["status"]["startTime"])).total_seconds() < RAN[1]
        ]
        if not candidates or self.counts["preempt"] + self.counts["kill"] >= FAULTS:
            return
        victim = self.rng.choice(candidates)
        action = self.actions.pop(0) if self.actions else self.rng.choice(["preempt", "kill"])
        node = victim["spec"]["node"]
        nodus(self.running, "sim", action, node, *(["--notice", "5s"] if action == "preempt" else []))
        self.injected[victim["metadata"]["name"]] = datetime.now(UTC)  # the CLI's write, give or take its exit
        self.hit.add(node)
        self.counts[action] += 1
        self.per_job[victim["spec"]["job"]] += 1

    def failover(self) -> None:
        """SIGKILL the process holding the Lease (the leader); the other takes over; the killed one comes back
        as the new standby."""
        processes = {p.identity: p for p in (self.running.controllers, self.standby)}
        killed = processes.pop(controllers.wait_for_leader(self.running.cluster))
        [survivor] = processes.values()
        killed.kill()
        controllers.wait_for_leader(self.running.cluster, survivor.identity, timeout=60)
        self.running.controllers, self.standby = survivor, self.start(killed.identity)
        self.running.others.append(survivor)
        self.counts["failover"] += 1
        print(f"failed over from {killed.identity} to {survivor.identity}")

    def stop_standby(self) -> None:
        """Leave the session's cluster as it was: one controller manager (later tests count on it)."""
        self.standby.stop()


def test_jobs_survive_random_preemptions_kills_and_a_controller_failover(running: Running) -> None:
    seed = int(os.environ.get("NODUS_CHAOS_SEED") or random.randrange(2**32))
    print(f"chaos seed {seed} (NODUS_CHAOS_SEED={seed} replays it)")
    why = f"(chaos seed {seed})"
    rng = random.Random(seed)
    project = running.project()
    names = [f"chaos-{n:02d}" for n in range(JOBS)]
    chaos = Chaos(running, rng)
    try:
        for name in names:
            create(running, project, name, **counter(STEPS, PAUSE, **SPEC))
        started = time.monotonic()
        deadline = started + 150
        while True:
            jobs = listed(running, project, "jobs")
            if all((j.get("status") or {}).get("phase") in ("Succeeded", "Failed") for j in jobs):
                break
            if time.monotonic() > deadline:
                attempts = listed(running, project, "attempts")
                pytest.fail(f"Jobs still running {why}\n{state(jobs, attempts)}\n{running.logs()}")
            chaos.step(listed(running, project, "attempts"))
            time.sleep(rng.uniform(0.3, 1.2))
        print(f"Jobs ended after {time.monotonic() - started:.0f} s")
        if not chaos.counts["failover"]:
            chaos.failover()  # the Jobs finished first: fail over now, so the checks below see it too
    finally:
        chaos.stop_standby()

    def all_final() -> list[dict[str, Any]] | None:
        attempts = listed(running, project, "attempts")
        return attempts if all((a["status"].get("cost") or {}).get("final") for a in attempts) else None

    attempts = running.wait_for("every attempt's final cost", all_final, timeout=60)
    print(f"costs final after {time.monotonic() - started:.0f} s")
    report = recovery.check(listed(running, project, "jobs"), attempts, chaos.injected)
    print(report.summary(), dict(chaos.counts), {n: t.isoformat() for n, t in chaos.injected.items()})
    print(state(listed(running, project, "jobs"), attempts))
    assert chaos.counts["preempt"] >= 1 and chaos.counts["kill"] >= 1, (dict(chaos.counts), why)
    # (An attempt may finish between its pick and its host's end: a fault need not lose one.)
    assert report.lost_attempts >= 1 and report.recoveries, (report.summary(), why)
    assert report.not_succeeded == (), (report.not_succeeded, why)
    assert report.not_latest == (), (report.not_latest, why)
    assert report.resumed_from_latest == 1.0
    assert report.overlaps == (), (report.overlaps, why)
    checked = verify(running)
    assert checked.returncode == 0, (checked.stdout + checked.stderr, why)
