"""Surviving lost capacity at scale: 100 checkpointed Jobs on interruptible hosts while hosts are preempted
and killed at random throughout and the leading controller manager is SIGKILLed twice.

Setup: a ``nodus apiserver`` (plain HTTP) on a scratch database and two ``nodus controllers`` processes (a
leader and a standby) with the simulated cloud and the test suite's flags (``tests/support/controllers.py``:
heartbeats every 0.5 s, a node lost after 3 s of silence, checkpoint cadences 20 times faster, so an
``interval`` of 1m is 3 s), except for a fixed boot time of ``BOOT_TIME`` (2 s, the figure recovery time is
compared with) and enough capacity (``--sim-capacity``) that no Job waits for a host. Every simulated host
is a real ``nodus agent`` process running the program in its sandbox.

Load: ``jobs`` Jobs of ``tests/e2e/running/test_recovery.COUNTER`` (a counter kept in ``/nodus/state`` that
acknowledges checkpoint requests; ``steps`` x ``pause`` seconds of counting), one RTX 4090 each on
interruptible capacity (``placement.interruptible: Prefer``), ``recovery: {checkpoint: {interval: 1m},
maxAttempts: 3, minProgressDuration: 1s}``, submitted at ``rate`` Jobs per second. Meanwhile, from a seeded
``random.Random``:

* **faults**, one every ``fault_interval`` seconds on average: a running attempt that has run between 3 and
  6 s (``RAN``: long enough that its loss made progress and does not use up ``maxAttempts``, short enough
  that a first attempt still has work left when its host goes), at most ``FAULTS_PER_JOB`` per Job, has its
  host preempted (``--notice 5s``: the agent takes a final checkpoint) or killed (no notice: the last
  committed checkpoint is used), half and half, the way ``nodus sim preempt|kill`` asks for it (an
  annotation on the Node);
* **controller kills**, ``controller_kills`` times at random moments while Jobs are submitted: the process
  holding the Lease is SIGKILLed, the standby takes over, and the killed one comes back as the standby.

Afterwards, with ``tests/support/recovery.py`` (the checks the chaos test makes): Jobs lost (not
Succeeded), the share of replacements that resumed from the newest checkpoint committed by the earlier
attempts of their index, attempts of one index that overlapped in time, ``nodus billing verify`` (a real
process on the database), and recovery time: from the moment a fault was injected (for losses this run did
not inject, the lost attempt's ``finishTime``) to the ``startTime`` of the next attempt of its index that
started, p50/p95, all and by cause (``Preempted``, ``NodeLost``), next to the simulated boot time. Attempt
times have whole seconds, so each recovery time is good to about a second. Context: hosts booted per
attempt that got one, the peak of live hosts, and the leases lost and provisioner conflicts in the
controllers' logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import common

BOOT_TIME = "2s"
SEED = 20261129
NOTICE = "5s"
RAN = (3.0, 6.0)  # seconds an attempt has run when its host may be taken away
FAULTS_PER_JOB = 2
LEASE = "nodus-controllers"
SPOT = {"resources": {"gpu": {"count": 1, "type": ["rtx4090-24g"]}}, "placement": {"interruptible": "Prefer"}}
RECOVERY = {"checkpoint": {"interval": "1m"}, "maxAttempts": 3, "minProgressDuration": "1s"}
LIVE_NODE_PHASES = ("Booting", "Ready", "Terminating")


# --- processes ------------------------------------------------------------------------------------


@dataclass
class Controller:
    identity: str
    process: subprocess.Popen[bytes]
    log_file: Path


def _controller_flags(capacity: int) -> list[str]:
    from tests.support.controllers import TEST_FLAGS

    # Later flags win: the test suite's, then a fixed non-zero boot time and enough capacity. The programs run in
    # bubblewrap, as when these figures were first taken: this measures recovery by the control plane, and image
    # pulls (ADR 0040, measured in bench/images.py) would only add their own time to every replacement.
    return [
        *TEST_FLAGS,
        *("--sim-boot-time", BOOT_TIME, "--sim-capacity", str(capacity), "--sim-runtime", "bubblewrap"),
    ]


def _start_controller(kubeconfig: Path, directory: Path, hosts: Path, flags: list[str]) -> Controller:
    identity = f"bench-{uuid.uuid4().hex[:6]}"
    log_file = directory / f"controllers-{identity}.log"
    args = [sys.executable, "-m", "nodus", "controllers", "--kubeconfig", str(kubeconfig), "--identity", identity]
    args += ["--sim-work-dir", str(hosts), *flags]
    with log_file.open("ab") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=common.ROOT)
    return Controller(identity, process, log_file)


def _kill_agents(hosts: Path) -> int:
    """SIGKILL every simulated host of this run still alive: those the controllers did not take down."""
    from tests.support.controllers import kill_agents_under

    return kill_agents_under(hosts)


async def _leader(client: Any) -> str:
    from nodus.client import errors

    with contextlib.suppress(errors.NotFound):
        lease = await client.get("leases", LEASE)
        return str(lease["spec"].get("holderIdentity") or "")
    return ""


async def _wait_for_leader(client: Any, among: list[Controller], timeout: float = 120.0) -> str:
    deadline = time.monotonic() + timeout
    identities = {c.identity for c in among}
    while time.monotonic() < deadline:
        holder = await _leader(client)
        if holder in identities:
            return holder
        await asyncio.sleep(0.2)
    raise RuntimeError(f"none of {sorted(identities)} took the lead in {timeout:.0f} s")


@contextlib.asynccontextmanager
async def api_server(workdir: Path, result: dict[str, Any]) -> AsyncIterator[tuple[str, Any, Path]]:
    """A scratch database and an API server on it (holds funded 8 s, as the controllers' test flags), with the
    bench project and an administrator's kubeconfig: (database URL, server, kubeconfig). PostgreSQL's settings go
    into ``result``."""
    async with (
        common.scratch_database(common.database_server_url()) as db,
        common.running_server(db, workdir / "api", extra_args=("--funded-window", "8s")) as server,
    ):
        result["postgres"] = await common.postgres_facts(db)
        await asyncio.to_thread(common.create_project, server)
        yield db, server, common.write_kubeconfig(server, workdir / "kubeconfig")


# --- the run --------------------------------------------------------------------------------------


@dataclass
class _Chaos:
    """What the run did: faults by attempt, counts, controller kills, and what it saw of the Nodes."""

    rng: random.Random
    injected: dict[str, datetime] = field(default_factory=dict)  # attempt -> when its host was taken away
    counts: Counter[str] = field(default_factory=Counter)
    per_job: Counter[str] = field(default_factory=Counter)
    hit_nodes: set[str] = field(default_factory=set)
    nodes_seen: set[str] = field(default_factory=set)
    peak_live_hosts: int = 0
    failovers: list[float] = field(default_factory=list)  # seconds from the old leader's death to the new lead


def _job(name: str, steps: int, pause: float) -> dict[str, Any]:
    from tests.e2e.running.test_recovery import COUNTER

    spec = {
        "image": "python:3.12-slim",
        "command": [sys.executable, "-c", COUNTER, str(steps), str(pause)],
        "recovery": RECOVERY,
        **SPOT,
    }
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


async def _submit(client: Any, names: list[str], rate: float, steps: int, pause: float) -> None:
    started = time.monotonic()
    for n, name in enumerate(names):
        await asyncio.sleep(max(0.0, started + n / rate - time.monotonic()))
        await client.create("jobs", _job(name, steps, pause), common.PROJECT)


async def _inject(client: Any, chaos: _Chaos, done: asyncio.Event, interval: float) -> None:
    """One fault every ``interval`` seconds on average, on a running attempt that qualifies (module docstring)."""
    from nodus.apimachinery import units

    while not done.is_set():
        await asyncio.sleep(chaos.rng.uniform(0.5, 1.5) * interval)
        attempts = (await client.list("attempts", common.PROJECT))["items"]
        now = datetime.now(UTC)
        candidates = [
            a
            for a in attempts
            if (a.get("status") or {}).get("phase") == "Running"
            and a["status"].get("startTime")
            and a["spec"].get("node") not in chaos.hit_nodes
            and chaos.per_job[a["spec"]["job"]] < FAULTS_PER_JOB
            and RAN[0] <= (now - units.parse_time(a["status"]["startTime"])).total_seconds() < RAN[1]
        ]
        if not candidates:
            continue
        victim = chaos.rng.choice(candidates)
        action = chaos.rng.choice(("preempt", "kill"))
        node = victim["spec"]["node"]
        # As ``nodus sim preempt|kill NODE`` asks: an annotation the simulated cloud handles once per value.
        annotations = {f"sim.nodus.dev/{action}-requested-at": units.format_micro_time(units.now())}
        if action == "preempt":
            annotations["sim.nodus.dev/preempt-notice"] = NOTICE
        chaos.injected[victim["metadata"]["name"]] = datetime.now(UTC)
        await client.patch("nodes", node, {"metadata": {"annotations": annotations}})
        chaos.hit_nodes.add(node)
        chaos.per_job[victim["spec"]["job"]] += 1
        chaos.counts[action] += 1


async def _watch_hosts(client: Any, chaos: _Chaos, done: asyncio.Event) -> None:
    while not done.is_set():
        nodes = (await client.list("nodes"))["items"]
        chaos.nodes_seen.update(n["metadata"]["name"] for n in nodes)
        live = sum(1 for n in nodes if (n.get("status") or {}).get("phase", "Booting") in LIVE_NODE_PHASES)
        chaos.peak_live_hosts = max(chaos.peak_live_hosts, live)
        await asyncio.sleep(1.0)


async def _kill_leaders(
    client: Any, chaos: _Chaos, pair: list[Controller], start: Any, moments: list[float], origin: float
) -> None:
    """At each moment (seconds after ``origin``), SIGKILL the leader; the standby takes over; the killed
    one comes back as the standby. ``pair`` is updated in place; ``start`` starts a controller process."""
    for moment in moments:
        await asyncio.sleep(max(0.0, origin + moment - time.monotonic()))
        holder = await _wait_for_leader(client, pair)
        [killed] = [c for c in pair if c.identity == holder]
        killed.process.kill()
        await asyncio.to_thread(killed.process.wait)
        died = time.monotonic()
        pair.remove(killed)
        await _wait_for_leader(client, pair)
        chaos.failovers.append(time.monotonic() - died)
        chaos.counts["controller_kill"] += 1
        pair.append(start())


async def _until_ended(client: Any, count: int, timeout: float, stall: float) -> list[dict[str, Any]]:
    """The Jobs once all have ended, or once none has ended for ``stall`` seconds (or ``timeout`` passed):
    those still going then are reported, as not Succeeded, rather than waited for without end."""
    deadline = time.monotonic() + timeout
    last, progress = -1, time.monotonic()
    while True:
        jobs = list((await client.list("jobs", common.PROJECT))["items"])
        ended = sum(1 for j in jobs if (j.get("status") or {}).get("phase") in ("Succeeded", "Failed"))
        if ended != last:
            last, progress = ended, time.monotonic()
        if ended == count or time.monotonic() > min(deadline, progress + stall):
            return jobs
        await asyncio.sleep(1.0)


async def _final_attempts(client: Any, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The attempts once every one's cost is final (its hold released): what ``billing verify`` must see."""
    deadline = time.monotonic() + timeout
    while True:
        attempts = list((await client.list("attempts", common.PROJECT))["items"])
        if all(((a.get("status") or {}).get("cost") or {}).get("final") for a in attempts):
            return attempts
        if time.monotonic() > deadline:
            return attempts
        await asyncio.sleep(1.0)


def _verify(database_url: str, tries: int = 5) -> dict[str, Any]:
    """``nodus billing verify``, until clean or ``tries`` runs 3 s apart: a display copy (a Project's
    ``status.credits``) may lag behind the ledger while money still moves, so a breach of
    ``DisplayCopyEqualsLedger`` alone is looked at again; every answer's breaches are counted by invariant."""
    env = {**os.environ, "NODUS_DATABASE_URL": database_url}
    answers: list[dict[str, Any]] = []
    for _ in range(tries):
        done = subprocess.run(
            [sys.executable, "-m", "nodus", "billing", "verify"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=False,
            cwd=common.ROOT,
        )
        breaches = Counter(line.split(":")[0].removeprefix("BREACH ") for line in done.stdout.splitlines())
        breaches.pop("the ledger is sound", None)
        answers.append({"ok": done.returncode == 0, "breaches": dict(breaches), "output": done.stdout[-1500:]})
        if done.returncode == 0 or set(breaches) - {"DisplayCopyEqualsLedger"}:
            break
        time.sleep(3.0)
    ledger_clean = all(set(a["breaches"]) <= {"DisplayCopyEqualsLedger"} for a in answers)
    return {**answers[-1], "runs": len(answers), "ledger_invariants_clean": ledger_clean, "answers": answers}


def _count_in_logs(controllers: list[Controller], needle: str) -> int:
    return sum(c.log_file.read_text(errors="replace").count(needle) for c in controllers if c.log_file.exists())


async def run(
    workdir: Path,
    jobs: int = 100,
    rate: float = 2.0,
    steps: int = 200,
    pause: float = 0.05,
    fault_interval: float = 1.0,
    controller_kills: int = 2,
    capacity: int = 20,
    seed: int = SEED,
    timeout: float = 900.0,
    stall: float = 60.0,
) -> dict[str, Any]:
    from nodus.client import Client
    from tests.support import recovery as checks

    rng = random.Random(seed)
    hosts = await asyncio.to_thread(_directories, workdir)
    flags = _controller_flags(capacity)
    submit_s = jobs / rate
    # Controller kills at random moments while Jobs arrive, at least 10 s apart.
    moments = sorted(rng.uniform(0.15, 0.85) * submit_s + 10 * i for i in range(controller_kills))
    result: dict[str, Any] = {
        "jobs": jobs,
        "rate_per_s": rate,
        "work_s": steps * pause,
        "fault_interval_s": fault_interval,
        "seed": seed,
        "boot_time_s": float(BOOT_TIME.rstrip("s")),
        "capacity_per_offering": capacity,
        "controller_flags": flags,
    }
    chaos = _Chaos(rng)
    everyone: list[Controller] = []
    async with api_server(workdir, result) as (db, server, kubeconfig):

        def start() -> Controller:
            controller = _start_controller(kubeconfig, workdir, hosts, flags)
            everyone.append(controller)
            return controller

        pair = [start(), start()]
        names = [f"rec-{n:03d}" for n in range(jobs)]
        try:
            async with Client(common.client_config(server), user_agent="bench-recovery") as client:
                await _wait_for_leader(client, pair)
                await asyncio.sleep(2.0)  # the leader publishes the offerings' capacity once it leads
                done = asyncio.Event()
                origin = time.monotonic()
                server_cpu = common.cpu_seconds(server.pid)
                background = [
                    asyncio.create_task(_inject(client, chaos, done, fault_interval)),
                    asyncio.create_task(_watch_hosts(client, chaos, done)),
                ]
                try:
                    await asyncio.gather(
                        _submit(client, names, rate, steps, pause),
                        _kill_leaders(client, chaos, pair, start, moments, origin),
                    )
                    ended = await _until_ended(client, jobs, timeout, stall)
                    result["wall_s"] = time.monotonic() - origin
                    result["apiserver_cores"] = (common.cpu_seconds(server.pid) - server_cpu) / result["wall_s"]
                finally:
                    done.set()
                    for task in background:
                        task.cancel()
                    await asyncio.gather(*background, return_exceptions=True)
                attempts = await _final_attempts(client)
                result["settled_s"] = time.monotonic() - origin
            result["billing_verify"] = await asyncio.to_thread(_verify, db)
        finally:
            for controller in everyone:
                await asyncio.to_thread(_stop, controller.process)
            result["agents_left_killed"] = _kill_agents(hosts)
            result["hosts_booted"] = _count_in_logs(everyone, "booted node ")
            result["lease_losses"] = _count_in_logs(everyone, "lost the lease")
            result["credits_copy_failures"] = server.logs().count("status.credits could not be brought up to date")
            result["provisioner_conflicts"] = _count_in_logs(everyone, "nodus.controllers.provisioner: reconcile")
            shutil.rmtree(hosts, ignore_errors=True)
    report = checks.check(ended, attempts, chaos.injected)
    assigned = sum(1 for a in attempts if a["spec"].get("node"))
    result.update(
        {
            "preemptions": chaos.counts["preempt"],
            "kills": chaos.counts["kill"],
            "controller_kills": chaos.counts["controller_kill"],
            "failover_s": chaos.failovers,
            "jobs_lost": len(report.not_succeeded),
            "not_succeeded": list(report.not_succeeded),
            "attempts": len(attempts),
            "attempts_lost": report.lost_attempts,
            "lost_by_reason": dict(Counter(str(a["status"].get("reason")) for a in attempts if _lost(a))),
            "replacements": report.replacements,
            "resumed_from_latest": report.resumed_from_latest,
            "not_latest": list(report.not_latest),
            "overlaps": len(report.overlaps),
            "overlapping": list(report.overlaps),
            "recovery": {cause or "all": _times(report, cause) for cause in (None, "Preempted", "NodeLost")},
            "replacement_stages_p50_s": _stages(report, attempts),
            "nodes_seen": len(chaos.nodes_seen),
            "hosts_booted_per_assigned_attempt": result["hosts_booted"] / assigned if assigned else float("nan"),
            "peak_live_hosts": chaos.peak_live_hosts,
        }
    )
    result["met"] = (
        result["jobs_lost"] == 0
        and result["resumed_from_latest"] == 1.0
        and result["overlaps"] == 0
        and result["billing_verify"]["ok"]
    )
    return result


STAGES = (
    ("lost_end_to_created", "finishTime", "created"),
    ("created_to_scheduled", "created", "scheduledTime"),
    ("scheduled_to_node", "scheduledTime", "provisioningTime"),
    ("node_to_started", "provisioningTime", "startTime"),
)


def _stages(report: Any, attempts: list[dict[str, Any]]) -> dict[str, float]:
    """Where a replacement's way went, median seconds per stage: from the lost attempt's finishTime to the
    replacement's creation, its binding (``scheduledTime``), its host (``provisioningTime``) and its start
    (boot, agent, restore). Whole-second times: each stage is good to about a second."""
    from nodus.apimachinery import units

    by_name = {a["metadata"]["name"]: a for a in attempts}
    spans: dict[str, list[float]] = {name: [] for name, _, _ in STAGES}
    for r in report.recoveries:
        lost, replacement = by_name[r.lost], by_name[r.replacement]
        times = {
            "finishTime": lost["status"].get("finishTime"),
            "created": replacement["metadata"].get("creationTimestamp"),
            **{k: replacement["status"].get(k) for k in ("scheduledTime", "provisioningTime", "startTime")},
        }
        for name, start, end in STAGES:
            if times.get(start) and times.get(end):
                spans[name].append((units.parse_time(times[end]) - units.parse_time(times[start])).total_seconds())
    return {name: common.median(values) if values else float("nan") for name, values in spans.items()}


def _directories(workdir: Path) -> Path:
    """Make the work directory; return a fresh one for the simulated hosts (short, as ``run_latency``'s, so
    that sandbox paths stay short)."""
    workdir.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="nodus-bench-hosts-")).resolve()


def _lost(attempt: dict[str, Any]) -> bool:
    return (attempt.get("status") or {}).get("phase") == "Lost"


def _times(report: Any, cause: str | None) -> dict[str, Any]:
    chosen = [r for r in report.recoveries if cause in (None, r.reason)]
    return {
        "n": len(chosen),
        "p50_s": report.recovery_seconds(50, cause),
        "p95_s": report.recovery_seconds(95, cause),
        "max_s": max((r.seconds for r in chosen), default=float("nan")),
        # The part until the lost attempt's finishTime: the loss noticed (a preemption handled, a host's
        # heartbeats missed for --node-grace) and recorded; the rest is the replacement's way to a start.
        "ended_after_p50_s": report.recovery_seconds(50, cause, "ended_after"),
        "ended_after_p95_s": report.recovery_seconds(95, cause, "ended_after"),
        "samples": [(r.lost, r.reason, round(r.seconds, 1), round(r.ended_after, 1)) for r in chosen],
    }


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """The benchmark table's rows (``bench/run.py``)."""
    times = r["recovery"]
    resumed = f"{100 * r['resumed_from_latest']:.0f} %"
    checked = r["billing_verify"]
    verify = "clean" if checked["ok"] else "BREACHES"
    if checked["runs"] > 1:
        verify += f" (run {checked['runs']})"
    return [
        (
            f"recovery: {r['jobs']} Jobs, {r['preemptions']} preempted + {r['kills']} killed hosts, "
            f"{r['controller_kills']} leader kills",
            f"lost {r['jobs_lost']}, resumed {resumed}, overlaps {r['overlaps']}, verify {verify}",
            "",
            "",
            "0, 100 %, 0, clean",
            "met" if r["met"] else "NOT met",
        ),
        (
            "  recovery s p50 / p95: all; preempted; host lost",
            f"{_pair(times['all'])}; {_pair(times['Preempted'])}; {_pair(times['NodeLost'])}",
            f"boot {r['boot_time_s']:.0f} s",
            f"{times['all']['p50_s'] / r['boot_time_s']:.1f}x boot (p50)",
            "",
            "-",
        ),
        (
            "  of which until the lost attempt ended, p50: preempted; host lost",
            f"{times['Preempted']['ended_after_p50_s']:.1f}; {times['NodeLost']['ended_after_p50_s']:.1f}",
            "node grace 3 s",
            "",
            "",
            "-",
        ),
        (
            "  replacement p50 s: lost end>created>bound>host>started",
            " / ".join(f"{v:.0f}" for v in r["replacement_stages_p50_s"].values()),
            "",
            "",
            "",
            "-",
        ),
        (
            "  wall s; hosts booted per attempt; peak hosts; leases lost",
            f"{r['wall_s']:.0f}; {r['hosts_booted_per_assigned_attempt']:.2f}; {r['peak_live_hosts']}; "
            f"{r['lease_losses']}",
            "",
            "",
            "",
            "-",
        ),
    ]


def _pair(entry: dict[str, Any]) -> str:
    return f"{entry['p50_s']:.1f} / {entry['p95_s']:.1f} (n {entry['n']})"
