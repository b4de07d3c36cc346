"""Create-to-Running latency of a Job with instant simulated boot, vs the floor of its watch and write hops.

Setup: a ``nodus apiserver`` (plain HTTP, the shipped price book) and a ``nodus controllers`` process
with the simulated cloud and the test suite's fast flags (``--sim-boot-time 0s --sim-heartbeat-interval
500ms --node-grace 3s``, as ``tests/support/controllers.py``), ``--sim-capacity 1000`` so that capacity
never queues a Job; every simulated host is a real ``nodus agent`` process with the bubblewrap runtime
(``--sim-runtime bubblewrap``: the agent's default is podman, ADR 0040). ``bench/images.py`` runs the same
warm samples with ``--sim-runtime podman`` and an image from a local registry through :func:`_start_controllers`
and :func:`_sample`, interleaved with these.

Samples: Jobs created one at a time, each ``/bin/sh -c 'sleep 1'`` on one CPU (the next is created once
the previous one has Succeeded and the system is quiet again). Latency = from the create response to
the arrival, on a watch of the project's Jobs started before any create, of the event showing the Job
``status.phase == Running``. A second watch (the project's Attempts) time-stamps every stage of the chain
(attempt created, bound, assigned to a node, Starting, Running) for a breakdown. Two kinds:

* **warm**: ``placement.offerings: [cpu-8c-us]`` and ``scaledownWindow: 10m``; after the first Job
  (dropped, it boots the host) every Job reuses the same idle host and its running agent.
* **cold**: ``placement.offerings: [cpu-8c-eu]``; once a sample is Running its Node is marked
  ``spec.unschedulable``, so every cold Job gets a new Node and a new ``nodus agent`` process (the
  simulated boot takes 0 s; starting the agent is the boot).

The hop floor, measured in the same run, interleaved with the samples (batches: warm, hops, runtime,
cold, agent start):

* **hop**: one write plus one watch delivery, as a ping-pong of two API clients (``nodus.client.Client``
  with an ``Informer`` each, as controllers and agents use) in this process: A merge-patches the
  ``/status`` of Attempt ``ping``; B, watching ``ping``, sees it and patches ``pong`` from its handler;
  A, watching ``pong``, sees that and patches ``ping``, and so on. A hop is the time between two
  consecutive deliveries. (The two Attempts carry ``spec.stop`` and no owner, so no controller acts
  on them, though the controllers' informers receive their events as they receive the chain's.)
* **runtime start**: the agent's work between its ``Starting`` and ``Running`` writes, measured alone:
  ``AttemptLayout.create`` plus ``select_runtime("bubblewrap").start(...)`` of the same program, in this process.
* **agent start** (cold only): spawning ``nodus agent`` with the simulated cloud's command line for a
  pre-created unschedulable Node, until a watch shows that Node ``Ready``.

Context, in the JSON: a hop with one more write beside it (each ping-pong writer also patches a finished
Job, as the Job controller writes the Job beside the chain), the CPU of each process and the writes
committed per Job (less the background measured for 2 s before each batch; cold hosts are left to idle out
before a warm batch), the writes our watches saw while each sample was on its way, the stage breakdown, and
the 409s the controllers met.

The warm chain has 6 hops, counted from the code: the Job controller sees the Job and creates the
Attempt (``jobs/reconciling.py``: attempts first); the scheduler sees it and binds it (PUT ``/status``,
``scheduling.py``); the provisioner sees that and assigns the warm node (PATCH ``spec.node`` and label,
``nodes/provisioning.py``); the agent, watching its node's label, sees the Attempt and reports
``Starting`` (``agent/daemon.py``, ``agent/running.py``); it then starts the program and reports
``Running`` (a second write, no watch between); the Job controller sees that and writes the Job's
``/status`` Running; the client's watch sees it. That is 6 watch deliveries and 6 writes. Floor (warm)
= 6 x hop p50 + runtime start p50. Floor (cold) = the same + agent start p50 (the cold chain's extra
Node create overlaps the agent's start; the agent's first LISTs after ``Ready`` are left out).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import common

HOPS_IN_CHAIN = 6
TARGET = 1.5
WARM_OFFERING = "cpu-8c-us"
COLD_OFFERING = "cpu-8c-eu"
CONTROLLER_FLAGS = (
    "--sim-boot-time",
    "0s",
    "--sim-heartbeat-interval",
    "500ms",
    "--node-grace",
    "3s",
    "--sim-capacity",
    "1000",
)
PID_ANNOTATION = "sim.nodus.dev/pid"
STAGES = ("created", "bound", "assigned", "starting", "running", "job_running")


# --- processes ------------------------------------------------------------------------------------


@dataclass
class Controllers:
    process: subprocess.Popen[bytes]
    log_file: Path

    def logs(self) -> str:
        return self.log_file.read_text(errors="replace")[-20000:] if self.log_file.exists() else ""


def _start_controllers(
    kubeconfig: Path, directory: Path, *, sim_runtime: str = "bubblewrap", insecure_registries: Sequence[str] = ()
) -> Controllers:
    """``nodus controllers`` whose simulated hosts run ``sim_runtime`` and pull over plain HTTP from
    ``insecure_registries`` (``HOST:PORT``)."""
    directory.mkdir(parents=True, exist_ok=True)
    log_file = directory / "controllers.log"
    # What-if experiments only, as NODUS_BENCH_SERVER_PRELUDE for the server: Python run in the controllers'
    # process before the unchanged ``nodus controllers`` starts (a monkeypatch to try a change, say).
    launcher = ["-m", "nodus"]
    prelude = os.environ.get("NODUS_BENCH_CONTROLLERS_PRELUDE")
    if prelude:
        launcher = ["-c", f"{prelude}\nimport sys\nfrom nodus.cli.main import main\nmain(sys.argv[1:])"]
    args = [sys.executable, *launcher, "controllers", "--kubeconfig", str(kubeconfig), "--identity", "bench"]
    args += ["--sim-work-dir", str(directory / "hosts"), *CONTROLLER_FLAGS, "--sim-runtime", sim_runtime]
    for registry in insecure_registries:
        args += ["--sim-agent-insecure-registry", registry]
    with log_file.open("ab") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=common.ROOT)
    return Controllers(process, log_file)


def _stop_process(process: subprocess.Popen[bytes], grace: float) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _kill_session(pid: int) -> None:
    """SIGKILL a simulated host (an agent started in its own session by the controllers, or by us)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


# --- watching -------------------------------------------------------------------------------------


@dataclass
class Sample:
    job: str
    created: float  # the create response arrived
    stages: dict[str, float] = field(default_factory=dict)  # arrival of each stage's event at our watch
    node: str | None = None
    warm_reuse: bool | None = None
    succeeded: asyncio.Event = field(default_factory=asyncio.Event)
    running: asyncio.Event = field(default_factory=asyncio.Event)


class Tracker:
    """Handlers for the Jobs and Attempts informers: time-stamps every stage of each sample's chain."""

    def __init__(self) -> None:
        self.samples: dict[str, Sample] = {}
        self.nodes: dict[str, str] = {}  # node name -> phase
        self.pids: dict[str, str] = {}  # node name -> its simulated host's pid (annotation)
        self.events: list[tuple[float, str, str]] = []  # (arrival, kind, job or node name): every write seen
        self.node_ready: dict[str, asyncio.Event] = {}

    def _stage(self, job: str, stage: str) -> Sample | None:
        sample = self.samples.get(job)
        if sample is not None and stage not in sample.stages:
            sample.stages[stage] = time.perf_counter()
        return sample

    def job(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:
            return
        phase = (new.get("status") or {}).get("phase")
        name = new["metadata"]["name"]
        self.events.append((time.perf_counter(), "job", name))
        if phase == "Running":
            sample = self._stage(name, "job_running")
            if sample is not None:
                sample.running.set()
        elif phase in ("Succeeded", "Failed"):
            sample = self.samples.get(name)
            if sample is not None:
                sample.succeeded.set()

    def attempt(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:
            return
        job = (new.get("spec") or {}).get("job", "")
        if job not in self.samples:
            return
        self.events.append((time.perf_counter(), "attempt", job))
        status, spec = new.get("status") or {}, new.get("spec") or {}
        phase = status.get("phase")
        sample = self._stage(job, "created")
        assert sample is not None
        if phase in ("Provisioning", "Starting", "Running"):
            self._stage(job, "bound")
            sample.warm_reuse = bool((status.get("placement") or {}).get("warmReuse"))
        if spec.get("node"):
            self._stage(job, "assigned")
            sample.node = spec["node"]
        if phase in ("Starting", "Running"):
            self._stage(job, "starting")
        if phase == "Running":
            self._stage(job, "running")

    def agent_pid(self, node: str | None) -> int | None:
        text = self.pids.get(node or "", "")
        return int(text) if text.isdigit() else None

    def node(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:
            if old is not None:
                self.nodes.pop(old["metadata"]["name"], None)
            return
        name = new["metadata"]["name"]
        self.pids[name] = str((new["metadata"].get("annotations") or {}).get(PID_ANNOTATION) or "")
        self.events.append((time.perf_counter(), "node", name))
        phase = str((new.get("status") or {}).get("phase") or "")
        self.nodes[name] = phase
        if phase == "Ready" and name in self.node_ready:
            self.node_ready[name].set()


# --- the measurements -----------------------------------------------------------------------------


def _job(name: str, warm: bool, program: str, image: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "image": image,
        "command": ["/bin/sh", "-c", program],
        "resources": {"cpu": "1"},
        "placement": {"offerings": [WARM_OFFERING if warm else COLD_OFFERING]},
    }
    if warm:
        spec["scaledownWindow"] = "10m"
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


async def _sample(
    client: Any, tracker: Tracker, name: str, warm: bool, program: str, logs: Any, image: str = "debian:12"
) -> Sample:
    """One Job: create it, wait for Running (the sample), then for its end and a quiet moment. ``image`` is only
    pulled by the podman runtime (the bubblewrap runtime runs the program on the host's filesystem)."""
    placeholder = Sample(job=name, created=0.0)
    tracker.samples[name] = placeholder  # before the create: the watch may see it first
    await client.create("jobs", _job(name, warm, program, image), common.PROJECT)
    placeholder.created = time.perf_counter()
    try:
        await asyncio.wait_for(placeholder.running.wait(), 60)
    except TimeoutError:
        if not placeholder.succeeded.is_set():
            raise RuntimeError(f"job {name} did not reach Running in 60 s\n{logs()}") from None
    if not warm and placeholder.node:
        # This host must not be reused: the next cold Job needs a new one.
        patch = {"spec": {"unschedulable": True}}
        with contextlib.suppress(Exception):
            await client.patch("nodes", placeholder.node, patch)
    await asyncio.wait_for(placeholder.succeeded.wait(), 60)
    await asyncio.sleep(0.3)  # the Job controller's last writes (finalizer) and the host going idle
    return placeholder


async def _hops(config: Any, count: int, noise_jobs: tuple[str, str] | None = None) -> list[float]:
    """Ping-pong of two clients through the API server; the time between consecutive watch deliveries.

    With ``noise_jobs`` (two finished Jobs, so the Job controller's reconcile of them writes nothing), each
    hop's writer first sends one more write that nobody waits for, a merge patch of its Job's annotations:
    as the Job controller's Job writes run beside the chain's own (context, not part of the floor).
    """
    from nodus.client import Client
    from nodus.client.informers import Informer

    namespace = common.PROJECT
    suffix = os.urandom(3).hex()
    deliveries: list[float] = []
    failures: list[str] = []
    done = asyncio.Event()
    pending: set[asyncio.Task[Any]] = set()

    async with Client(config, user_agent="bench-a") as a, Client(config, user_agent="bench-b") as b:
        names = {"ping": f"hop-ping-{suffix}", "pong": f"hop-pong-{suffix}"}
        for name in names.values():
            body = {
                "apiVersion": "nodus.dev/v1",
                "kind": "Attempt",
                "metadata": {"name": name},
                "spec": {
                    "job": "hops",
                    "jobUID": "hops",
                    "index": 0,
                    "number": 1,
                    "stop": {"reason": "Benchmark", "gracePeriodSeconds": 0},  # the scheduler skips it
                },
            }
            await a.create("attempts", body, namespace)

        def finished(task: asyncio.Task[Any]) -> None:
            pending.discard(task)
            if not task.cancelled() and task.exception() is not None:
                failures.append(repr(task.exception()))

        def handler(writer: Any, target: str, noise_job: str | None) -> Any:
            def on_change(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
                message = str(((new or {}).get("status") or {}).get("message") or "")
                if not message.startswith("hop ") or message == ((old or {}).get("status") or {}).get("message"):
                    return
                deliveries.append(time.perf_counter())
                n = int(message[4:])
                if n + 1 >= count:
                    done.set()
                    return
                writes = [
                    writer.patch(
                        "attempts", target, {"status": {"message": f"hop {n + 1}"}}, namespace, subresource="status"
                    )
                ]
                if noise_job is not None:
                    noise = {"metadata": {"annotations": {"bench.nodus.dev/noise": str(n)}}}
                    writes.insert(0, writer.patch("jobs", noise_job, noise, namespace))
                for write in writes:
                    task = asyncio.create_task(write)
                    pending.add(task)
                    task.add_done_callback(finished)

            return on_change

        watch_a = Informer(a, "attempts", namespace=namespace, field_selector=f"metadata.name={names['pong']}")
        watch_b = Informer(b, "attempts", namespace=namespace, field_selector=f"metadata.name={names['ping']}")
        noise_a, noise_b = noise_jobs or (None, None)
        watch_a.add_handler(handler(a, names["ping"], noise_a))  # A sees pong, writes ping
        watch_b.add_handler(handler(b, names["pong"], noise_b))  # B sees ping, writes pong
        tasks = [asyncio.create_task(i.run()) for i in (watch_a, watch_b)]
        try:
            await asyncio.wait_for(asyncio.gather(watch_a.wait_synced(), watch_b.wait_synced()), 30)
            await a.patch("attempts", names["ping"], {"status": {"message": "hop 0"}}, namespace, subresource="status")
            await asyncio.wait_for(done.wait(), 120)
            await asyncio.gather(*pending, return_exceptions=True)
            if failures:
                raise RuntimeError(f"{len(failures)} ping-pong writes failed, e.g. {failures[0]}")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return [later - earlier for earlier, later in itertools.pairwise(deliveries)]


async def _runtime_starts(directory: Path, count: int) -> dict[str, list[Any]]:
    """The agent's work between ``Starting`` and ``Running``, alone: layout plus ``runtime.start``."""
    from nodus.agent import runtime as runtimes
    from nodus.agent.contract import BASE_PATH
    from nodus.agent.layout import AttemptLayout

    chosen = runtimes.select_runtime("bubblewrap")  # the simulated hosts' runtime here
    starts: list[Any] = []
    first_lines: list[Any] = []
    for i in range(count):
        started = time.perf_counter()
        layout = AttemptLayout.create(directory / "attempts", f"probe-{os.urandom(3).hex()}-{i}")
        spec = runtimes.RunSpec(
            argv=["/bin/sh", "-c", "echo started; sleep 5"],
            env={"PATH": BASE_PATH, "HOME": "/workspace", "LANG": "C.UTF-8"},
            working_dir="/workspace",
            layout=layout,
        )
        process = await chosen.start(spec)
        starts.append(time.perf_counter() - started)
        lines = process.lines()
        try:
            await anext(lines)
            first_lines.append(time.perf_counter() - started)
        finally:
            await process.kill()
            async for _ in lines:  # the streams close with the sandbox
                pass
            layout.remove()
    return {"start": starts, "first_line": first_lines, "runtime": [chosen.name]}


async def _agent_start(client: Any, tracker: Tracker, kubeconfig: Path, directory: Path) -> float:
    """Spawn ``nodus agent`` as the simulated cloud does, for a pre-created unschedulable Node; until Ready."""
    name = f"probe-agent-{os.urandom(3).hex()}"
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nodus.dev/offering": COLD_OFFERING}},
        "spec": {"offering": COLD_OFFERING, "provider": "manual", "unschedulable": True},
    }
    await client.create("nodes", body)
    ready = tracker.node_ready[name] = asyncio.Event()
    work = directory / name
    work.mkdir(parents=True, exist_ok=True)
    # The agent joins as every agent does: a bootstrap token bound to its node name (ADR 0035).
    token_id, secret = os.urandom(3).hex(), os.urandom(8).hex()
    token = {"apiVersion": "nodus.dev/v1", "kind": "BootstrapToken", "metadata": {"name": token_id}}
    await client.create("bootstraptokens", {**token, "spec": {"nodeName": name, "secret": secret}})
    command = [sys.executable, "-m", "nodus", "agent", "--kubeconfig", str(kubeconfig), "--node-name", name]
    command += ["--join-token", f"{token_id}.{secret}"]
    command += ["--offering", COLD_OFFERING, "--gpus", "0", "--runtime", "bubblewrap", "--work-dir", str(work)]
    command += ["--heartbeat-interval", "500ms"]
    with (work / "agent.log").open("ab") as output:
        started = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=output, stderr=output, start_new_session=True
        )
    try:
        await asyncio.wait_for(ready.wait(), 60)
        elapsed = time.perf_counter() - started
    finally:
        _kill_session(process.pid)
        await process.wait()
        with contextlib.suppress(Exception):
            await client.delete("nodes", name)
    return elapsed


# --- the benchmark --------------------------------------------------------------------------------


async def run(
    workdir: Path,
    warm: int = 100,
    cold: int = 40,
    batches: int = 4,
    hops: int = 400,
    runtime_starts: int = 20,
    agent_starts: int = 8,
    program: str = "sleep 1",
) -> dict[str, Any]:
    from nodus.client import Client
    from nodus.client.informers import Informer

    server_url = common.database_server_url()
    result: dict[str, Any] = {
        "warm_jobs": warm,
        "cold_jobs": cold,
        "batches": batches,
        "program": program,
        "controller_flags": list(CONTROLLER_FLAGS),
        "hops_in_chain": HOPS_IN_CHAIN,
    }
    samples: dict[str, list[Sample]] = {"warm": [], "cold": []}
    hop_times: list[float] = []
    loaded_hops: list[float] = []
    runtime: dict[str, list[Any]] = {"start": [], "first_line": [], "runtime": []}
    agent_times: list[float] = []
    hosts_directory = _scratch_directory()
    async with (
        common.scratch_database(server_url) as db,
        common.running_server(db, workdir / "latency") as server,
    ):
        result["postgres"] = await common.postgres_facts(db)
        await asyncio.to_thread(common.create_project, server)
        kubeconfig = common.write_kubeconfig(server, workdir / "latency" / "kubeconfig")
        controllers = _start_controllers(kubeconfig, hosts_directory)
        config = common.client_config(server)
        tracker = Tracker()
        try:
            async with Client(config, user_agent="bench-latency") as client:
                await _wait_for_controllers(client, controllers)
                jobs = Informer(client, "jobs", namespace=common.PROJECT)
                attempts = Informer(client, "attempts", namespace=common.PROJECT)
                nodes = Informer(client, "nodes")
                jobs.add_handler(tracker.job)
                attempts.add_handler(tracker.attempt)
                nodes.add_handler(tracker.node)
                tasks = [asyncio.create_task(i.run()) for i in (jobs, attempts, nodes)]
                try:
                    await asyncio.gather(jobs.wait_synced(), attempts.wait_synced(), nodes.wait_synced())
                    # Warm-up, not counted: the warm host boots; one cold host; one of each probe.
                    await _sample(client, tracker, "warmup-w", True, program, controllers.logs)
                    await _sample(client, tracker, "warmup-c", False, program, controllers.logs)
                    await _hops(config, 20)
                    await _runtime_starts(hosts_directory / "probe", 2)
                    usage = _Usage(server, controllers.process.pid)
                    probes = hosts_directory / "probe"
                    warm_host = samples_of(tracker, "warmup-w").node
                    for b in range(batches):
                        await _settle(tracker, keep=warm_host)
                        usage.agent_pid = tracker.agent_pid(warm_host)
                        await usage.idle()
                        for i in range(_share(warm, batches, b)):
                            samples["warm"].append(
                                await _sample(client, tracker, f"w{b}-{i}", True, program, controllers.logs)
                            )
                        await usage.done("warm", _share(warm, batches, b))
                        hop_times += await _hops(config, _share(hops, batches, b) + 1)
                        noise = ("warmup-w", "warmup-c")
                        loaded_hops += await _hops(config, _share(hops, batches, b) // 2 + 1, noise)
                        for key, values in (await _runtime_starts(probes, _share(runtime_starts, batches, b))).items():
                            runtime[key] += values
                        usage.agent_pid = None
                        await usage.idle()
                        for i in range(_share(cold, batches, b)):
                            samples["cold"].append(
                                await _sample(client, tracker, f"c{b}-{i}", False, program, controllers.logs)
                            )
                        await usage.done("cold", _share(cold, batches, b))
                        for _ in range(_share(agent_starts, batches, b)):
                            agent_times.append(await _agent_start(client, tracker, kubeconfig, probes))
                    result["usage_per_job"] = usage.per_job()
                    result["nodes_seen"] = len(tracker.nodes)
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await asyncio.to_thread(_stop_process, controllers.process, 20)
            for text in tracker.pids.values():  # hosts the controllers did not take down
                if text.isdigit() and _is_our_agent(int(text), hosts_directory):
                    _kill_session(int(text))
            result["controllers_exit_code"] = controllers.process.returncode
            result["conflicts"] = _conflicts(controllers.log_file)
    result.update(_summarise(samples, hop_times, runtime, agent_times, tracker.events))
    result["hop_with_one_more_write"] = _stats(loaded_hops)
    shutil.rmtree(hosts_directory, ignore_errors=True)
    return result


def _scratch_directory() -> Path:
    """Where the simulated hosts work (their agents, logs and attempt directories)."""
    return Path(tempfile.mkdtemp(prefix="nodus-bench-hosts-")).resolve()


def samples_of(tracker: Tracker, job: str) -> Sample:
    return tracker.samples[job]


async def _settle(tracker: Tracker, keep: str | None, timeout: float = 90.0) -> None:
    """Until every Node but ``keep`` (the warm host) is gone: the cold hosts idle out (10 s reuse grace),
    are released and deleted, so that their heartbeats are not part of the next batch's background."""
    deadline = time.monotonic() + timeout
    while any(name != keep for name in tracker.nodes):
        if time.monotonic() > deadline:
            raise RuntimeError(f"nodes still there after {timeout:.0f} s: {sorted(tracker.nodes)}")
        await asyncio.sleep(0.25)


class _Usage:
    """CPU seconds (API server, controllers, the warm host's agent, PostgreSQL, this process) and committed
    writes per Job of a batch, less the background rate (heartbeats, idle hosts) measured just before it."""

    WINDOW = 2.0
    KEYS = ("server", "controllers", "agent", "postgres", "bench", "writes")

    def __init__(self, server: common.Server, controllers_pid: int) -> None:
        self.server = server
        self.controllers_pid = controllers_pid
        self.agent_pid: int | None = None
        self.totals: dict[str, dict[str, float]] = {}
        self._idle: dict[str, float] = {}
        self._start: dict[str, float] = {}

    async def _read(self) -> dict[str, float]:
        metrics = await asyncio.to_thread(self.server.metrics)
        agent = 0.0
        if self.agent_pid is not None:
            with contextlib.suppress(OSError):
                agent = common.cpu_seconds(self.agent_pid)
        return {
            "wall": time.monotonic(),
            "server": common.cpu_seconds(self.server.pid),
            "controllers": common.cpu_seconds(self.controllers_pid),
            "agent": agent,
            "postgres": common.postgres_cpu_seconds(),
            "bench": common.own_cpu_seconds(),
            "writes": metrics.get("nodus_storage_committed_writes", 0.0),
        }

    async def idle(self) -> None:
        """Measure the background for WINDOW seconds; the batch starts when this returns."""
        before = await self._read()
        await asyncio.sleep(self.WINDOW)
        after = await self._read()
        wall = after["wall"] - before["wall"]
        self._idle = {key: (after[key] - before[key]) / wall for key in self.KEYS}
        self._start = after

    async def done(self, kind: str, jobs: int) -> None:
        end = await self._read()
        wall = end["wall"] - self._start["wall"]
        total = self.totals.setdefault(kind, dict.fromkeys((*self.KEYS, "jobs", "wall", "background_writes"), 0.0))
        for key in self.KEYS:
            total[key] += (end[key] - self._start[key]) - self._idle[key] * wall
        total["background_writes"] += self._idle["writes"] * wall
        total["jobs"] += jobs
        total["wall"] += wall

    def per_job(self) -> dict[str, dict[str, float]]:
        out = {}
        for kind, total in self.totals.items():
            jobs = total["jobs"] or 1.0
            entry = {f"{key}_cpu_ms": 1000 * total[key] / jobs for key in self.KEYS if key != "writes"}
            entry["writes"] = total["writes"] / jobs
            entry["background_writes_per_s"] = total["background_writes"] / (total["wall"] or 1.0)
            out[kind] = entry
        return out


def _conflicts(log_file: Path) -> dict[str, int]:
    """409s the controllers met (each one a rate-limited retry of the key), by controller, from their log."""
    counts: dict[str, int] = {}
    text = log_file.read_text(errors="replace") if log_file.exists() else ""
    for line in text.splitlines():
        if "hit a conflict" in line:
            name = line.split(" nodus.controllers.", 1)[-1].split(":", 1)[0]
            counts[name] = counts.get(name, 0) + 1
    return counts


def _share(total: int, batches: int, b: int) -> int:
    return total // batches + (1 if b < total % batches else 0)


async def _wait_for_controllers(client: Any, controllers: Controllers) -> None:
    """Until the controllers lead and have published the simulated cloud's capacity."""
    from nodus.client import errors

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if controllers.process.poll() is not None:
            raise RuntimeError(f"nodus controllers exited:\n{controllers.logs()}")
        with contextlib.suppress(errors.NotFound):
            lease = await client.get("leases", "nodus-controllers")
            offering = await client.get("offerings", COLD_OFFERING)
            if lease["spec"].get("holderIdentity") == "bench" and (offering.get("status") or {}).get("capacity"):
                return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"nodus controllers did not take the lead:\n{controllers.logs()}")


def _is_our_agent(pid: int, hosts_directory: Path) -> bool:
    """Whether ``pid`` is still a ``nodus agent`` working under this run's hosts directory (not a reused pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"agent" in argv and any(arg.startswith(str(hosts_directory).encode()) for arg in argv)


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": 1000 * common.percentile(values, 50),
        "p90_ms": 1000 * common.percentile(values, 90),
        "p99_ms": 1000 * common.percentile(values, 99),
        "max_ms": 1000 * max(values) if values else float("nan"),
        "mean_ms": 1000 * sum(values) / len(values) if values else float("nan"),
    }


def _summarise(
    samples: dict[str, list[Sample]],
    hop_times: list[float],
    runtime: dict[str, list[Any]],
    agent_times: list[float],
    events: list[tuple[float, str, str]],
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    hop = _stats(hop_times)
    start = _stats(runtime["start"])
    agent = _stats(agent_times)
    out["hop"] = hop
    out["runtime_start"] = start
    out["runtime_first_line"] = _stats(runtime["first_line"])
    out["runtime"] = sorted(set(runtime["runtime"]))
    out["agent_start"] = agent
    floor_warm = HOPS_IN_CHAIN * hop["p50_ms"] + start["p50_ms"]
    floors = {"warm": floor_warm, "cold": floor_warm + agent["p50_ms"]}
    for kind, measured in samples.items():
        seen = [s for s in measured if "job_running" in s.stages]
        latencies = [s.stages["job_running"] - s.created for s in seen]
        entry: dict[str, Any] = _stats(latencies)
        entry["missed_running"] = len(measured) - len(seen)
        entry["warm_reuse"] = sum(1 for s in seen if s.warm_reuse)
        entry["floor_ms"] = floors[kind]
        entry["p50_ratio"] = entry["p50_ms"] / floors[kind]
        entry["p99_ratio"] = entry["p99_ms"] / floors[kind]
        entry["target"] = TARGET
        entry["met"] = entry["p50_ratio"] <= TARGET and entry["p99_ratio"] <= TARGET
        entry["samples_ms"] = [round(1000 * v, 1) for v in latencies]
        # Breakdown: median time between consecutive stages as our own watches saw them.
        breakdown: dict[str, float] = {}
        previous = "create"
        for stage in STAGES:
            gaps = [
                s.stages[stage] - (s.created if previous == "create" else s.stages[previous])
                for s in seen
                if stage in s.stages and (previous == "create" or previous in s.stages)
            ]
            breakdown[f"{previous}->{stage}"] = 1000 * common.median(gaps)
            previous = stage
        entry["breakdown_p50_ms"] = breakdown
        # Writes that happened while the sample was on its way (events our watches saw after the create
        # response, up to the Job's Running): the chain's own 6 and everything else.
        window: dict[str, list[float]] = {"job": [], "attempt": [], "node": []}
        for s in seen:
            counts = dict.fromkeys(window, 0)
            for at, what, name in events:
                if s.created < at <= s.stages["job_running"] and (what == "node" or name == s.job):
                    counts[what] += 1
            for what, n in counts.items():
                window[what].append(n)
        entry["writes_in_window_p50"] = {what: common.median(ns) for what, ns in window.items()}
        out[kind] = entry
    return out
