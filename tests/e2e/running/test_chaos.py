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

pytestmark = pytest.mark.e2e

JOBS = 12
STEPS, PAUSE = 160, 0.05  # 8 s of counting, about three checkpoints
SPEC: dict[str, Any] = {**SPOT, "recovery": {"maxAttempts": 3, "minProgressDuration": "1s"}}
FAULTS = 10  # hosts taken away in all
FAULTS_PER_JOB = 2
# Only attempts that ran this long are hit, so that every loss made progress (minProgressDuration) and none
# uses up maxAttempts: a Job failed for that would be the test's doing, not Nodus's.
RAN_AT_LEAST = 3.0


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
    return "\n".join(lines)


class Chaos:
    """The faults of one run: which host to take away and how, and the one controller failover."""

    def __init__(self, running: Running, rng: random.Random) -> None:
        self.running = running
        self.rng = rng
        self.injected: dict[str, datetime] = {}  # node -> when its host was first taken away
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
            and a["spec"]["node"] not in self.injected
            and self.per_job[a["spec"]["job"]] < FAULTS_PER_JOB
            and (now - units.parse_time(a["status"]["startTime"])).total_seconds() >= RAN_AT_LEAST
        ]
        if not candidates or self.counts["preempt"] + self.counts["kill"] >= FAULTS:
            return
        victim = self.rng.choice(candidates)
        action = self.actions.pop(0) if self.actions else self.rng.choice(["preempt", "kill"])
        node = victim["spec"]["node"]
        nodus(self.running, "sim", action, node, *(["--notice", "5s"] if action == "preempt" else []))
        self.injected[node] = datetime.now(UTC)
        self.counts[action] += 1
        self.per_job[victim["spec"]["job"]] += 1

    def failover(self) -> None:
        """SIGKILL the leader; the standby takes over; the killed one comes back as the new standby."""
        killed = self.running.controllers
        killed.kill()
        controllers.wait_for_leader(self.running.cluster, self.standby.identity, timeout=60)
        self.running.controllers, self.standby = self.standby, self.start(killed.identity)
        self.running.others.append(self.running.controllers)
        self.counts["failover"] += 1

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
        deadline = time.monotonic() + 150
        while True:
            jobs = listed(running, project, "jobs")
            if all((j.get("status") or {}).get("phase") in ("Succeeded", "Failed") for j in jobs):
                break
            if time.monotonic() > deadline:
                attempts = listed(running, project, "attempts")
                pytest.fail(f"Jobs still running {why}\n{state(jobs, attempts)}\n{running.logs()}")
            chaos.step(listed(running, project, "attempts"))
            time.sleep(rng.uniform(0.3, 1.2))
        if not chaos.counts["failover"]:
            chaos.failover()  # the Jobs finished first: fail over now, so the checks below see it too
    finally:
        chaos.stop_standby()

    def all_final() -> list[dict[str, Any]] | None:
        attempts = listed(running, project, "attempts")
        return attempts if all((a["status"].get("cost") or {}).get("final") for a in attempts) else None

    attempts = running.wait_for("every attempt's final cost", all_final, timeout=60)
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


def test_zz_debug_offering(running: Running) -> None:
    with running.client() as client:
        items = client.get(f"{API}/offerings").json()["items"]
        print(len(items), [(o["metadata"]["name"], o.get("status")) for o in items if "rtx4090" in o["metadata"]["name"]])
        off = client.get(f"{API}/offerings/rtx4090-24g-x1-us-spot").json()
        r = client.put(f"{API}/offerings/rtx4090-24g-x1-us-spot/status", json={**off, "status": {"capacity": 4}})
        print(r.status_code, r.text[:500])
