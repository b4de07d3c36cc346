"""Pools (issue 19): a host joining a Pool until its Node is Ready, and a Job placed on a pool host, each against
the same on a host of an offering started by hand, measured in one run, interleaved, reported as p50 / p90 and
ratios (pool / offering).

Setup: a ``nodus apiserver`` over TLS (the shipped price book), ``nodus controllers --provider none`` (no
cloud: hosts come only from Pools and agents started by hand; warm placement on those still runs, ADR 0049),
Pool ``bench-pool`` in project ``bench``. Every host is a real ``nodus agent`` process started here, as a user
starts one, with the bubblewrap runtime and heartbeats every 0.5 s (the controllers' node grace is 3 s), and on
its PATH a fake ``nvidia-smi`` describing four H100 80GB joined by NVLink (this machine has no GPU; the idea of
``tests/agent/test_hostshape.py``, rewritten here since benchmarks do not import tests):

* a **pool host** joins with a fresh Pool join token (``POST .../pools/bench-pool/jointokens``, what ``nodus pools
  join-token`` sends): ``nodus agent --server URL --certificate-authority CA --join-token T --node-name N``, no
  ``--offering``: it discovers its shape (``nodus.agent.hostshape``: 4 GPUs, ``h100-sxm-80g``, ``nvlink``).
* an **offering host** joins with a fresh BootstrapToken bound to its node name (what ``nodus nodes join-token
  --node-name N`` creates as an administrator) and ``--offering h100-sxm-80g-x1-us``: the Node is the offering's
  shape (one H100).

Measured, round by round (the order of pool and offering alternates, A B B A, so neither always goes first):

1. **join -> Ready**: from spawning the agent to the arrival, on a watch of Nodes started before, of the event
   showing the new Node ``status.phase == Ready``; a new node name and a new token every sample. Split at the
   Node's first event (the credential exchange creates the Node: before it, the interpreter's start, imports and
   the exchange; after it, the agent's registration: the pool host's shape discovery or the offering's GET, its
   informers, the Ready write). Afterwards the Node is deleted, its agent killed, and the next sample waits
   until the watch shows the Node gone. Context in the same rounds: ``hostshape.discover`` alone in this process
   (with the fake ``nvidia-smi``; NVML first, as the agent asks, which is absent here), and the floor of any
   agent process: ``python -m nodus agent --help`` spawned until it exits (interpreter and the CLI's imports).
2. **create -> Running on a warm host**: two hosts stay for the whole run, a pool host (4 GPUs) and an offering
   host (1 GPU). A Job of ``/bin/sh -c 'sleep 1'`` asking for one H100, 0.5 CPU and 256Mi, with ``placement:
   {pool: bench-pool}`` or ``{offerings: [h100-sxm-80g-x1-us]}`` (and ``scaledownWindow: 10m``); latency from the
   create response to the watch event of the Job Running (``bench/run_latency.py``'s definition and stage
   breakdown: attempt created, bound, assigned, Starting, Running, Job Running). The next Job starts once this
   one Succeeded. The first Job on each host is a warm-up, not counted.
3. **two at once on the pool host**: two such pool Jobs created together (concurrent creates); the time from
   just before the creates to the later of the two Jobs' Running events, and whether the two really ran at once
   (the later one Running before the earlier one ended, on the same host with disjoint ``gpuIndexes``). Compared
   with the single pool Job of the same rounds.

Nothing here asserts a time: the figures are in the JSON and the table (``rows``), explained in
``docs/benchmarks.md`` section 12.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import common, run_latency

POOL = "bench-pool"
OFFERING = "h100-sxm-80g-x1-us"
POOL_HOST_GPUS = 4
CONTROLLER_FLAGS = ("--provider", "none", "--node-grace", "3s")
AGENT_FLAGS = ("--runtime", "bubblewrap", "--heartbeat-interval", "500ms")
ONE_H100 = {"gpu": {"count": 1, "type": ["H100"]}, "cpu": "0.5", "memory": "256Mi"}
PROGRAM = "sleep 1"
KINDS = ("pool", "offering")
_ALPHABET = string.ascii_lowercase + string.digits
_TOPOLOGY = "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\n" + "".join(
    f"GPU{i}\t" + "\t".join(" X " if i == j else "NV18" for j in range(4)) + "\t0-51\n" for i in range(4)
)


# --- hosts ----------------------------------------------------------------------------------------


def fake_nvidia_smi(directory: Path, count: int) -> Path:
    """A directory holding an ``nvidia-smi`` that answers ``--query-gpu`` with ``count`` H100 80GB and ``topo
    -m`` with NVLink between all of them, as the driver of such a host would; put it first on an agent's PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "gpus.csv").write_text(
        "".join(f"{i}, GPU-{i:04d}-bench, NVIDIA H100 80GB HBM3, 81559\n" for i in range(count))
    )
    (directory / "topo.txt").write_text(_TOPOLOGY)
    smi = directory / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f'  topo) cat "{directory}/topo.txt" ;;\n'
        f'  --query-gpu=*) cat "{directory}/gpus.csv" ;;\n'
        '  *) echo "unexpected: $*" >&2; exit 2 ;;\n'
        "esac\n"
    )
    smi.chmod(0o755)
    return directory


@dataclass
class Hosts:
    """The agents this benchmark starts, each in its own session (killed as a whole, as a host that dies)."""

    server: common.Server
    directory: Path
    gpu_bin: Path
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)

    async def spawn(self, name: str, token: str, offering: str | None) -> float:
        """Start ``nodus agent`` for ``name`` with a join token; ``offering``: a hand-started offering host, else a
        pool host. Returns the clock reading just before the spawn."""
        work = self.directory / name
        work.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "nodus", "agent", "--server", f"https://{self.server.host}:{self.server.port}"]
        command += ["--certificate-authority", str(self.server.ca_file), "--join-token", token, "--node-name", name]
        if offering is not None:
            command += ["--offering", offering]
        command += [*AGENT_FLAGS, "--work-dir", str(work / "work")]
        env = {**os.environ, "PATH": f"{self.gpu_bin}{os.pathsep}{os.environ['PATH']}"}
        with (work / "agent.log").open("ab") as log:
            started = time.perf_counter()
            self.processes[name] = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True
            )
        return started

    def log(self, name: str) -> str:
        path = self.directory / name / "agent.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    async def kill(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()

    async def kill_all(self) -> None:
        for name in list(self.processes):
            await self.kill(name)


# --- watching -------------------------------------------------------------------------------------


class Tracker(run_latency.Tracker):
    """``run_latency.Tracker`` plus what this benchmark reads: each Node's first event, each Job's end (time and
    phase) and each sample's GPU ordinals."""

    def __init__(self) -> None:
        super().__init__()
        self.node_seen: dict[str, float] = {}
        self.gpus: dict[str, list[int]] = {}  # job -> its attempt's status.placement.gpuIndexes
        self.ended: dict[str, tuple[float, str]] = {}  # job -> (arrival, Succeeded | Failed)
        self.ready_at: dict[str, float] = {}  # node -> arrival of its first Ready event
        self.gone: dict[str, asyncio.Event] = {}  # node -> set when the watch shows it deleted

    def job(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is not None:
            phase = str((new.get("status") or {}).get("phase") or "")
            if phase in ("Succeeded", "Failed"):
                self.ended.setdefault(new["metadata"]["name"], (time.perf_counter(), phase))
        super().job(old, new)

    def attempt(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is not None:
            indexes = ((new.get("status") or {}).get("placement") or {}).get("gpuIndexes")
            if indexes is not None:
                self.gpus[str((new.get("spec") or {}).get("job", ""))] = list(indexes)
        super().attempt(old, new)

    def node(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        now = time.perf_counter()
        if new is not None:
            name = new["metadata"]["name"]
            self.node_seen.setdefault(name, now)
            if (new.get("status") or {}).get("phase") == "Ready":
                self.ready_at.setdefault(name, now)
        elif old is not None:
            self.gone.setdefault(old["metadata"]["name"], asyncio.Event()).set()
        super().node(old, new)


# --- tokens ---------------------------------------------------------------------------------------


async def _pool_token(client: Any) -> str:
    """A fresh join token of the Pool, as ``nodus pools join-token`` mints it."""
    body = {"apiVersion": "nodus.dev/v1", "kind": "PoolJoinTokenRequest", "spec": {"expirationSeconds": 3600}}
    path = f"{common.API}/namespaces/{common.PROJECT}/pools/{POOL}/jointokens"
    response = await client.request("POST", path, json=body)
    return str(response.json()["status"]["token"])


async def _offering_token(client: Any, node: str) -> str:
    """A fresh BootstrapToken bound to ``node``, as ``nodus nodes join-token --node-name`` creates it."""
    token_id = "".join(secrets.choice(_ALPHABET) for _ in range(6))
    secret = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    body = {"apiVersion": "nodus.dev/v1", "kind": "BootstrapToken", "metadata": {"name": token_id}}
    await client.create("bootstraptokens", {**body, "spec": {"nodeName": node, "secret": secret}})
    return f"{token_id}.{secret}"


async def _token(client: Any, kind: str, node: str) -> str:
    return await _pool_token(client) if kind == "pool" else await _offering_token(client, node)


# --- the measurements -----------------------------------------------------------------------------


async def _wait_ready(tracker: Tracker, hosts: Hosts, name: str, timeout: float = 60.0) -> float:
    """Until the watch shows Node ``name`` Ready; the arrival time of that event."""
    ready = tracker.node_ready.setdefault(name, asyncio.Event())
    try:
        await asyncio.wait_for(ready.wait(), timeout)
    except TimeoutError:
        log = hosts.log(name)
        raise RuntimeError(f"node {name} was not Ready in {timeout:.0f} s; its agent's log:\n{log}") from None
    return tracker.ready_at[name]


async def _join(client: Any, tracker: Tracker, hosts: Hosts, kind: str, name: str) -> dict[str, float]:
    """One host joins (``kind``: pool or offering) until Ready; then it is taken away again (Node deleted, agent
    killed, the Node's deletion seen). Seconds: total, before the Node's first event, after it."""
    token = await _token(client, kind, name)
    tracker.node_ready[name] = asyncio.Event()  # before the spawn: the watch may see it first
    started = await hosts.spawn(name, token, OFFERING if kind == "offering" else None)
    try:
        ready = await _wait_ready(tracker, hosts, name)
        seen = tracker.node_seen[name]
        return {"total": ready - started, "exchange": seen - started, "register": ready - seen}
    finally:
        with contextlib.suppress(Exception):
            await client.delete("nodes", name)
        await hosts.kill(name)
        # The next sample starts once the watch shows this Node gone (its heartbeats and deletion are over).
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(tracker.gone.setdefault(name, asyncio.Event()).wait(), 30)


def _job_body(name: str, kind: str) -> dict[str, Any]:
    placement: dict[str, Any] = {"pool": POOL} if kind == "pool" else {"offerings": [OFFERING]}
    spec: dict[str, Any] = {
        "image": "debian:12",  # only the podman runtime pulls it: bubblewrap runs the program on the host's files
        "command": ["/bin/sh", "-c", PROGRAM],
        "resources": ONE_H100,
        "placement": placement,
        "scaledownWindow": "10m",
    }
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


async def _create(client: Any, tracker: Tracker, name: str, kind: str) -> run_latency.Sample:
    sample = run_latency.Sample(job=name, created=0.0)
    tracker.samples[name] = sample  # before the create: the watch may see it first
    await client.create("jobs", _job_body(name, kind), common.PROJECT)
    sample.created = time.perf_counter()
    return sample


async def _finish(tracker: Tracker, sample: run_latency.Sample, logs: Any) -> None:
    """Until ``sample`` is Running and then Succeeded; a Job that fails or hangs ends the benchmark."""
    try:
        await asyncio.wait_for(sample.running.wait(), 60)
        await asyncio.wait_for(sample.succeeded.wait(), 60)
    except TimeoutError:
        raise RuntimeError(f"job {sample.job} did not run and end in 60 s\n{logs()}") from None
    phase = tracker.ended.get(sample.job, (0.0, ""))[1]
    if phase != "Succeeded":
        raise RuntimeError(f"job {sample.job} ended {phase}, not Succeeded\n{logs()}")


async def _one(client: Any, tracker: Tracker, name: str, kind: str, logs: Any) -> run_latency.Sample:
    """One Job on the warm host of ``kind``, created once the previous one has ended."""
    sample = await _create(client, tracker, name, kind)
    await _finish(tracker, sample, logs)
    await asyncio.sleep(0.3)  # the Job controller's last writes (finalizer) and the host going idle
    return sample


async def _pair(client: Any, tracker: Tracker, names: tuple[str, str], logs: Any) -> dict[str, Any]:
    """Two pool Jobs created together: until both are Running; whether they ran at once with disjoint GPUs."""
    started = time.perf_counter()
    first, second = await asyncio.gather(*(_create(client, tracker, name, "pool") for name in names))
    await asyncio.gather(_finish(tracker, first, logs), _finish(tracker, second, logs))
    running = sorted((s.stages["job_running"], s.job) for s in (first, second))
    ends = {s.job: tracker.ended[s.job][0] for s in (first, second)}
    gpus = [set(tracker.gpus.get(name, ())) for name in names]
    # Where the later one's time goes: each stage of the chain, from just before the creates, for both Jobs.
    stages = {
        stage: sorted(s.stages[stage] - started for s in (first, second))
        for stage in run_latency.STAGES
        if all(stage in s.stages for s in (first, second))
    }
    await asyncio.sleep(0.3)
    return {
        "first": running[0][0] - started,
        "second": running[1][0] - started,
        "stages": stages,
        # The later one was Running before the earlier one had ended, on one host, with GPUs of its own.
        "at_once": running[1][0] < ends[running[0][1]]
        and first.node == second.node
        and all(len(g) == 1 for g in gpus)
        and not gpus[0] & gpus[1],
    }


async def _discoveries(directory: Path, gpu_bin: Path, count: int) -> list[float]:
    """``hostshape.discover`` as a pool host's agent calls it (NVML first, then the fake ``nvidia-smi``)."""
    from nodus.agent import hostshape

    smi = str(gpu_bin / "nvidia-smi")
    times = []
    for _ in range(count):
        started = time.perf_counter()
        shape = await asyncio.to_thread(hostshape.discover, directory, smi)
        times.append(time.perf_counter() - started)
        if len(shape.gpus) != POOL_HOST_GPUS:
            raise RuntimeError(f"the fake nvidia-smi gave {len(shape.gpus)} GPUs, not {POOL_HOST_GPUS}")
    return times


async def _process_floor(count: int) -> list[float]:
    """Spawning ``python -m nodus agent --help`` until it exits: the interpreter and the CLI's imports."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nodus", "agent", "--help", stdout=asyncio.subprocess.DEVNULL, cwd=common.ROOT
        )
        if await process.wait() != 0:
            raise RuntimeError("nodus agent --help failed")
        times.append(time.perf_counter() - started)
    return times


# --- the benchmark --------------------------------------------------------------------------------


def _start_controllers(kubeconfig: Path, directory: Path) -> run_latency.Controllers:
    directory.mkdir(parents=True, exist_ok=True)
    log_file = directory / "controllers.log"
    args = [sys.executable, "-m", "nodus", "controllers", "--kubeconfig", str(kubeconfig), "--identity", "bench"]
    with log_file.open("ab") as log:
        process = subprocess.Popen([*args, *CONTROLLER_FLAGS], stdout=log, stderr=subprocess.STDOUT, cwd=common.ROOT)
    return run_latency.Controllers(process, log_file)


def _stop(process: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _wait_for_lead(client: Any, controllers: run_latency.Controllers) -> None:
    from nodus.client import errors

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if controllers.process.poll() is not None:
            raise RuntimeError(f"nodus controllers exited:\n{controllers.logs()}")
        with contextlib.suppress(errors.NotFound):
            if (await client.get("leases", "nodus-controllers"))["spec"].get("holderIdentity") == "bench":
                return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"nodus controllers did not take the lead:\n{controllers.logs()}")


def _scratch_directory() -> Path:
    """Where the hosts work (agents' logs and attempt directories), with the fake driver and a discovery probe."""
    scratch = Path(tempfile.mkdtemp(prefix="nodus-bench-pools-")).resolve()
    (scratch / "discovery").mkdir()
    return scratch


def _rounds(total: int, rounds: int, r: int) -> int:
    return total // rounds + (1 if r < total % rounds else 0)


async def run(workdir: Path, joins: int = 20, jobs: int = 60, pairs: int = 20, rounds: int = 10) -> dict[str, Any]:
    """``joins`` join samples and ``jobs`` Jobs of each kind and ``pairs`` pairs, spread over ``rounds``."""
    from nodus.client import Client
    from nodus.client.informers import Informer

    result: dict[str, Any] = {
        "joins": joins,
        "jobs": jobs,
        "pairs": pairs,
        "rounds": rounds,
        "program": PROGRAM,
        "offering": OFFERING,
        "pool_host_gpus": POOL_HOST_GPUS,
        "controller_flags": list(CONTROLLER_FLAGS),
        "agent_flags": list(AGENT_FLAGS),
    }
    joined: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    samples: dict[str, list[run_latency.Sample]] = {kind: [] for kind in KINDS}
    paired: list[dict[str, Any]] = []
    discovery: list[float] = []
    floor: list[float] = []
    scratch = _scratch_directory()
    async with (
        common.scratch_database(common.database_server_url()) as db,
        common.running_server(db, workdir / "pools", tls=True) as server,
    ):
        result["postgres"] = await common.postgres_facts(db)
        await asyncio.to_thread(common.create_project, server)
        pool = {"apiVersion": "nodus.dev/v1", "kind": "Pool", "metadata": {"name": POOL}, "spec": {}}
        await asyncio.to_thread(server.json, "POST", f"{common.API}/namespaces/{common.PROJECT}/pools", pool)
        kubeconfig = common.write_kubeconfig(server, workdir / "pools" / "kubeconfig")
        controllers = _start_controllers(kubeconfig, scratch)
        hosts = Hosts(server, scratch / "hosts", fake_nvidia_smi(scratch / "gpus", POOL_HOST_GPUS))
        tracker = Tracker()
        try:
            async with Client(common.client_config(server), user_agent="bench-pools") as client:
                await _wait_for_lead(client, controllers)
                informers = [
                    Informer(client, "jobs", namespace=common.PROJECT),
                    Informer(client, "attempts", namespace=common.PROJECT),
                    Informer(client, "nodes"),
                ]
                for informer, handler in zip(informers, (tracker.job, tracker.attempt, tracker.node), strict=True):
                    informer.add_handler(handler)
                tasks = [asyncio.create_task(i.run()) for i in informers]
                try:
                    await asyncio.gather(*(i.wait_synced() for i in informers))
                    # The two warm hosts, and a warm-up Job on each (not counted).
                    for kind in KINDS:
                        name = f"warm-{kind}"
                        tracker.node_ready[name] = asyncio.Event()
                        token = await _token(client, kind, name)
                        await hosts.spawn(name, token, OFFERING if kind == "offering" else None)
                        await _wait_ready(tracker, hosts, name)
                        await _one(client, tracker, f"warmup-{kind}", kind, controllers.logs)
                    await _discoveries(scratch / "discovery", hosts.gpu_bin, 2)
                    await _process_floor(1)
                    for r in range(rounds):
                        order = KINDS if r % 2 == 0 else KINDS[::-1]
                        for i in range(_rounds(joins, rounds, r)):
                            for kind in order if i % 2 == 0 else order[::-1]:
                                name = f"join-{kind}-{r}-{i}"
                                joined[kind].append(await _join(client, tracker, hosts, kind, name))
                        discovery += await _discoveries(scratch / "discovery", hosts.gpu_bin, 5)
                        floor += await _process_floor(max(1, _rounds(joins, rounds, r) // 2))
                        for i in range(_rounds(jobs, rounds, r)):
                            for kind in order if i % 2 == 0 else order[::-1]:
                                name = f"{kind}-{r}-{i}"
                                samples[kind].append(await _one(client, tracker, name, kind, controllers.logs))
                        for i in range(_rounds(pairs, rounds, r)):
                            names = (f"pair-{r}-{i}-a", f"pair-{r}-{i}-b")
                            paired.append(await _pair(client, tracker, names, controllers.logs))
                    result["warm_nodes"] = {kind: samples[kind][0].node if samples[kind] else None for kind in KINDS}
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await hosts.kill_all()
            await asyncio.to_thread(_stop, controllers.process)
            result["controllers_exit_code"] = controllers.process.returncode
    result.update(_summarise(joined, samples, paired, discovery, floor))
    shutil.rmtree(scratch, ignore_errors=True)
    return result


# --- the report -----------------------------------------------------------------------------------


def _stats(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_ms": 1000 * common.percentile(values, 50),
        "p90_ms": 1000 * common.percentile(values, 90),
        "samples_ms": [round(1000 * v, 1) for v in values],
    }


def _ratios(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    return {"p50_ratio": a["p50_ms"] / b["p50_ms"], "p90_ratio": a["p90_ms"] / b["p90_ms"]}


def _breakdown(samples: list[run_latency.Sample]) -> dict[str, float]:
    """Median time between consecutive stages of the chain, as our watches saw them."""
    out: dict[str, float] = {}
    previous = "create"
    for stage in run_latency.STAGES:
        gaps = [
            s.stages[stage] - (s.created if previous == "create" else s.stages[previous])
            for s in samples
            if stage in s.stages and (previous == "create" or previous in s.stages)
        ]
        out[f"{previous}->{stage}"] = round(1000 * common.median(gaps), 1)
        previous = stage
    return out


def _summarise(
    joined: dict[str, list[dict[str, float]]],
    samples: dict[str, list[run_latency.Sample]],
    paired: list[dict[str, Any]],
    discovery: list[float],
    floor: list[float],
) -> dict[str, Any]:
    join: dict[str, Any] = {}
    for kind in KINDS:
        entry = _stats([j["total"] for j in joined[kind]])
        entry["exchange_p50_ms"] = 1000 * common.median([j["exchange"] for j in joined[kind]])
        entry["register_p50_ms"] = 1000 * common.median([j["register"] for j in joined[kind]])
        join[kind] = entry
    join.update(_ratios(join["pool"], join["offering"]))
    join["discovery"] = _stats(discovery)
    join["process_floor"] = _stats(floor)
    running: dict[str, Any] = {}
    for kind in KINDS:
        entry = _stats([s.stages["job_running"] - s.created for s in samples[kind]])
        entry["warm_reuse"] = sum(1 for s in samples[kind] if s.warm_reuse)
        entry["breakdown_p50_ms"] = _breakdown(samples[kind])
        running[kind] = entry
    running.update(_ratios(running["pool"], running["offering"]))
    pair: dict[str, Any] = {
        "first": _stats([p["first"] for p in paired]),
        "second": _stats([p["second"] for p in paired]),
    }
    pair["at_once"] = sum(1 for p in paired if p["at_once"])
    # Per stage of the chain, p50 of (earlier Job, later Job) reaching it, from just before the two creates.
    pair["stages_p50_ms"] = {
        stage: [
            round(1000 * common.median([p["stages"][stage][k] for p in paired if stage in p["stages"]]), 1)
            for k in (0, 1)
        ]
        for stage in run_latency.STAGES
    }
    pair["n"] = len(paired)
    pair.update(_ratios(pair["second"], running["pool"]))
    return {"join": join, "running": running, "pair": pair}


def rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """The table lines of ``bench/run.py``: (benchmark, measured, baseline, ratio, target, verdict)."""

    def ms(entry: dict[str, Any]) -> str:
        return f"p50 {entry['p50_ms']:.0f}, p90 {entry['p90_ms']:.0f} ms"

    join, running, pair = r["join"], r["running"], r["pair"]
    out: list[tuple[str, str, str, str, str, str]] = []
    out.append(
        (
            f"join->Ready: pool host vs offering host ({join['pool']['n']} each)",
            ms(join["pool"]),
            ms(join["offering"]),
            f"{join['p50_ratio']:.2f} / {join['p90_ratio']:.2f}",
            "",
            "-",
        )
    )
    out.append(
        (
            "  to the Node's creation / after it, p50 ms",
            f"{join['pool']['exchange_p50_ms']:.0f} / {join['pool']['register_p50_ms']:.0f}",
            f"{join['offering']['exchange_p50_ms']:.0f} / {join['offering']['register_p50_ms']:.0f}",
            "",
            "",
            "",
        )
    )
    out.append(
        (
            "  context: hostshape.discover, agent --help",
            f"{ms(join['discovery'])}",
            f"{ms(join['process_floor'])}",
            "",
            "",
            "",
        )
    )
    out.append(
        (
            f"create->Running warm: pool vs offering ({running['pool']['n']} each)",
            ms(running["pool"]),
            ms(running["offering"]),
            f"{running['p50_ratio']:.2f} / {running['p90_ratio']:.2f}",
            "",
            "-",
        )
    )
    out.append(
        (
            f"  two pool Jobs at once: 2nd Running ({pair['at_once']}/{pair['n']} at once)",
            ms(pair["second"]),
            f"one pool Job {ms(running['pool'])}",
            f"{pair['p50_ratio']:.2f} / {pair['p90_ratio']:.2f}",
            "",
            "-",
        )
    )
    stages = pair["stages_p50_ms"]
    out.append(
        (
            "  the pair's bound, assigned, Running p50 ms",
            ", ".join(f"{stages[k][0]:.0f}/{stages[k][1]:.0f}" for k in ("bound", "assigned", "job_running")),
            "one Job: " + ", ".join(f"{v:.0f}" for v in _cumulative(running["pool"]["breakdown_p50_ms"])),
            "",
            "",
            "",
        )
    )
    return out


def _cumulative(breakdown: dict[str, float]) -> list[float]:
    """The single Job's bound, assigned and Job Running times from its create, from the medians of its gaps."""
    total, at = 0.0, {}
    for gap, value in breakdown.items():
        total += value
        at[gap.split("->")[1]] = total
    return [at["bound"], at["assigned"], at["job_running"]]
