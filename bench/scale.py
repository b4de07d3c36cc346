"""The control plane at scale: thousands of fake hosts and tens of thousands of Jobs on one machine (issue 22).

Setup: a ``nodus apiserver`` (plain HTTP) on a scratch database, one ``nodus controllers --provider fake`` (the
simulated price book; every offering ``--sim-capacity`` = ``hosts`` hosts, so capacity is never what a Job waits
for; a fixed boot time ``BOOT_TIME``; otherwise the production defaults: 8 workers per controller, the default
leader Lease, node grace and funded window) and one ``nodus fakehosts`` process (ADR 0059) that plays every host
through the API (join, Node Ready, a Lease renewal every ``--heartbeat-interval``, default 10 s, each Attempt
moved through Starting, Running and its end on the clock its Job's ``FAKEHOST_DURATION`` sets).

How ``hosts`` hosts come to exist: the provisioner boots a new Node for every placed Attempt that no warm host
takes, and keeps an idle host warm for its last Job's ``scaledownWindow``. So the run first submits ``hosts``
**warm-up Jobs** (the same mix as the rest, each running for 30 minutes), waits until ``hosts`` Nodes are Ready (or
``boot_timeout`` passed) and cancels them (``spec.state: Cancelled``, as ``nodus cancel``); every Job asks
``scaledownWindow: 10m``, so the now idle hosts stay warm for the **workload** that follows and are reused by it
(more hosts boot when the workload needs more, or other shapes, than are warm).

Workload: ``jobs`` Jobs from a seeded ``random.Random``, sent by a worker process over ``connections`` keep-alive
connections as fast as the server takes them: GPU counts 1, 2, 4, 8 (weights 4:3:2:1) of one of ``GPU_TYPES``
(each offered with 1, 2, 4 and 8 GPUs in the price book), ``FAKEHOST_DURATION`` uniform in 3-40 s, 10 %
interruptible (``placement.interruptible: Prefer``), 2 % gangs of 2 ranks (``distributed.nodes: 2``). While it
runs, ``preemptions`` Running attempts of interruptible Jobs (on distinct hosts) are preempted, one every
``preempt_interval`` seconds, as ``nodus sim preempt NODE`` asks (the ``sim.nodus.dev/preempt-requested-at``
annotation on the Node, 5 s notice): the fake host ends its attempts ``Lost/Preempted`` at once.

Figures (also in the JSON, each under its name):

* ``lease_losses``: occurrences of "lost the lease" in the controllers' log (target 0).
* ``binds``: Attempts of the workload bound per second over the busy phase: the number of workload Attempts with
  a ``status.scheduledTime`` divided by the span from the first workload create sent to the last such
  ``scheduledTime`` (whole seconds: good to a second); also Attempts created per second the same way
  (``creationTimestamp``) and the busiest 10 s window of binds. Target >= 100/s, stretch 500/s.
* ``creates``: client-side latency of each Job create the worker sent (send to whole response), p50/p99; and
  ``server_mutations``: the server's own ``nodus_apiserver_request_duration_seconds`` histogram for verbs
  create, update and patch (every client: the controllers', the fake hosts' and ours) over the busy phase,
  p50/p99 interpolated within its buckets. Target p99 <= 1 s.
* ``list``: one unpaged ``GET`` of every Job at the end (warm-up and workload), seconds and bytes. Target <= 30 s.
* ``rss_peak_mib``: peak RSS (``VmHWM``) of the API server, controllers and fakehosts processes at the end.
* ``cpu_cores``: CPU seconds per wall second of each process over the busy phase (``/proc/PID/stat``), of
  PostgreSQL (every ``postgres`` process on the machine) and of the whole machine (includes others' work).
* ``postgres``: per table, live rows (``pg_stat_user_tables.n_live_tup`` after ``ANALYZE``) and
  ``pg_total_relation_size``, and bytes and rows per Job (all tables / all Jobs, warm-up included).
* ``recovery``: for each preempted Job, from the preempt PATCH to the ``startTime`` of its next attempt
  (whole seconds), p50/p95, against the reference detection + boot: a preempted fake host reports at once (0 s)
  and a new host boots in ``BOOT_TIME`` (2 s). Target p95 <= 3x the reference.
* ``nodes``: Nodes seen (polled every few seconds), peak Ready, and Nodes ever seen ``Lost`` (target: none but
  the preempted, and those are preempted, not lost; no host is killed here).
* ``jobs_ended``: Jobs by phase when the run stopped waiting (the warm-up Jobs are ``Cancelled``).

Sizes: issue 22 asks for 2,000 hosts and 20,000 Jobs (``--quick`` 200 and 2,000). On this 2-core machine (shared)
200 hosts and 2,000 Jobs took 11 minutes (5 workload Attempts bound per second; docs/benchmarks.md section 13), so
20,000 Jobs would take over an hour: the full run is 200 hosts and 2,000 Jobs (busy phase capped at 15 minutes) and
``--quick`` 100 hosts and 1,000 Jobs (busy phase capped at 5 minutes; about 6-7 minutes in all). ``run(hosts=2000,
jobs=20000)`` runs the issue's size where the machine allows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import common, queues

BOOT_TIME = "2s"
SEED = 20261207
GPU_TYPES = ("h100-sxm-80g", "a100-sxm-80g", "l40s-48g", "l4-24g")
GPU_COUNTS = (1, 2, 4, 8)
GPU_WEIGHTS = (4, 3, 2, 1)
DURATION_S = (3.0, 40.0)
INTERRUPTIBLE = 0.10
GANGS = 0.02
WARMUP_DURATION = "30m"  # cancelled once ``hosts`` Nodes are Ready
SCALEDOWN = "10m"
NOTICE = "5s"
IMAGE = "registry.invalid/fake:1"
LEASE_NEEDLE = "lost the lease"
MUTATING = ("create", "update", "patch")
FINISHED = ("Succeeded", "Failed", "Cancelled")


# --- the Jobs -------------------------------------------------------------------------------------


def job_body(name: str, rng: random.Random, duration: str | None = None) -> dict[str, Any]:
    """One Job of the seeded mix (module docstring); ``duration`` overrides the drawn run time."""
    gpus = rng.choices(GPU_COUNTS, GPU_WEIGHTS)[0]
    seconds = rng.uniform(*DURATION_S)
    interruptible = rng.random() < INTERRUPTIBLE
    gang = not interruptible and rng.random() < GANGS
    env = [
        {"name": "FAKEHOST_DURATION", "value": duration or f"{seconds:.1f}s"},
        {"name": "FAKEHOST_EXIT_CODE", "value": "0"},
    ]
    spec: dict[str, Any] = {
        "image": IMAGE,
        "command": ["fake"],
        "env": env,
        "resources": {"gpu": {"count": gpus, "type": [rng.choice(GPU_TYPES)]}},
        "scaledownWindow": SCALEDOWN,
    }
    if interruptible:
        spec["placement"] = {"interruptible": "Prefer"}
    if gang:
        spec["distributed"] = {"nodes": 2}
    labels = {"bench": "scale", "kind": "interruptible" if interruptible else ("gang" if gang else "plain")}
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": name, "labels": labels}, "spec": spec}


# --- the submitting worker (its own process) ------------------------------------------------------


async def _submit(spec: dict[str, Any]) -> dict[str, Any]:
    import orjson

    from bench import loadgen

    endpoint, path = spec["endpoint"], spec["path"]
    host = f"{endpoint['host']}:{endpoint['port']}"
    requests = [loadgen.build_request("POST", path, host, endpoint["token"], orjson.dumps(b)) for b in spec["bodies"]]
    links = [await loadgen.open_connection(endpoint) for _ in range(min(int(spec["connections"]), len(requests)))]
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    odd: list[str] = []
    position = 0
    started_wall = time.time()
    started = time.perf_counter()

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal position
        while position < len(requests):
            request = requests[position]
            position += 1
            began = time.perf_counter()
            writer.write(request)
            status, body = await loadgen.read_response(reader)
            latencies.append(time.perf_counter() - began)
            statuses[status] += 1
            if status != 201 and len(odd) < 3:
                odd.append(body[:300].decode(errors="replace"))

    await asyncio.gather(*(one(r, w) for r, w in links))
    elapsed = time.perf_counter() - started
    for _, writer in links:
        writer.close()
    return {
        "count": len(requests),
        "started_unix": started_wall,
        "elapsed_s": elapsed,
        "throughput": len(requests) / elapsed if elapsed else 0.0,
        "p50_ms": 1000 * common.percentile(latencies, 50),
        "p99_ms": 1000 * common.percentile(latencies, 99),
        "max_ms": 1000 * max(latencies, default=float("nan")),
        "statuses": {str(k): v for k, v in statuses.items()},
        "unexpected": sum(v for k, v in statuses.items() if k != 201),
        "samples": odd,
        "worker_cpu_s": common.own_cpu_seconds(),
    }


def _worker_main() -> None:
    import uvloop

    common.raise_nofile()
    spec = common.read_spec()
    common.write_result(spec, uvloop.run(_submit(spec)))


# --- processes ------------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log_file: Path

    def logs(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""


def _spawn(name: str, args: list[str], directory: Path) -> Proc:
    log_file = directory / f"{name}.log"
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "nodus", *args], stdout=log, stderr=subprocess.STDOUT, cwd=common.ROOT
        )
    return Proc(name, process, log_file)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.asynccontextmanager
async def _cluster(workdir: Path, hosts: int, result: dict[str, Any]) -> AsyncIterator[tuple[str, Any, Proc, Proc]]:
    """Database, API server, controllers (--provider fake) and fakehosts: (db URL, server, controllers, fakehosts)."""
    hands = workdir / "handover"
    await asyncio.to_thread(hands.mkdir, parents=True)
    flags = ["--provider", "fake", "--fake-directory", str(hands), "--sim-boot-time", BOOT_TIME]
    flags += ["--sim-capacity", str(hosts), "--identity", "scale"]
    result["controller_flags"] = flags
    result["metrics_address"] = f"127.0.0.1:{common.free_port()}"
    flags += ["--metrics-address", result["metrics_address"]]
    async with (
        common.scratch_database(common.database_server_url()) as db,
        common.running_server(db, workdir / "api") as server,
    ):
        result["postgres"] = await common.postgres_facts(db)
        await asyncio.to_thread(common.create_project, server)
        controllers_kc = common.write_kubeconfig(server, workdir / "controllers.kubeconfig")
        admin_kc = common.write_kubeconfig(server, workdir / "admin.kubeconfig", admin=True)
        controllers = _spawn("controllers", ["controllers", "--kubeconfig", str(controllers_kc), *flags], workdir)
        fakehosts = _spawn(
            "fakehosts", ["fakehosts", "--kubeconfig", str(admin_kc), "--directory", str(hands)], workdir
        )
        try:
            yield db, server, controllers, fakehosts
        finally:
            await asyncio.to_thread(_stop, fakehosts.process)
            await asyncio.to_thread(_stop, controllers.process)


# --- observing ------------------------------------------------------------------------------------


@dataclass
class _Watch:
    nodes_seen: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)
    peak_ready: int = 0
    peak_live: int = 0
    ready_now: int = 0
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (t, ready, live)
    target: int = 0
    enough: asyncio.Event = field(default_factory=asyncio.Event)  # set once ``target`` Nodes were Ready at once


async def _watch_nodes(client: Any, watch: _Watch, done: asyncio.Event, interval: float, origin: float) -> None:
    while not done.is_set():
        with contextlib.suppress(Exception):
            nodes = (await client.list("nodes"))["items"]
            ready = live = 0
            for node in nodes:
                name, phase = node["metadata"]["name"], (node.get("status") or {}).get("phase", "Booting")
                watch.nodes_seen.add(name)
                ready += phase == "Ready"
                live += phase in ("Booting", "Ready", "Terminating")
                if phase == "Lost":
                    watch.lost.add(name)
            watch.ready_now = ready
            if ready >= watch.target:
                watch.enough.set()
            watch.peak_ready, watch.peak_live = max(watch.peak_ready, ready), max(watch.peak_live, live)
            watch.samples.append((round(time.monotonic() - origin, 1), ready, live))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), interval)


async def _sample_depths(address: str, peak: dict[str, float], done: asyncio.Event, interval: float) -> None:
    """The deepest each controllers' queue was, sampled every ``interval`` seconds until ``done``."""
    while not done.is_set():
        with contextlib.suppress(OSError):
            for name, depth in queues.depths(await asyncio.to_thread(queues.scrape, address)).items():
                peak[name] = max(peak.get(name, 0.0), depth)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), interval)


async def _leader(client: Any, timeout: float = 120.0) -> None:
    from nodus.client import errors

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(errors.NotFound):
            lease = await client.get("leases", "nodus-controllers")
            if lease["spec"].get("holderIdentity"):
                return
        await asyncio.sleep(0.5)
    raise RuntimeError("the controllers did not take the lead")


async def _preempt(
    client: Any, rng: random.Random, names: set[str], count: int, interval: float, done: asyncio.Event
) -> dict[str, dict[str, Any]]:
    """Preempt the hosts of ``count`` Running attempts of the interruptible Jobs ``names``, one every ``interval``
    seconds, each on a host not hit before; what was preempted, by Job: attempt, node, wall time of the PATCH."""
    from nodus.apimachinery import units

    hit: dict[str, dict[str, Any]] = {}
    nodes: set[str] = set()
    while len(hit) < count and not done.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(done.wait(), interval)
        with contextlib.suppress(Exception):
            attempts = (await client.list("attempts", common.PROJECT))["items"]
            running = [
                a
                for a in attempts
                if (a.get("status") or {}).get("phase") == "Running"
                and a["spec"].get("job") in names
                and a["spec"]["job"] not in hit
                and a["spec"].get("node") not in nodes
            ]
            if not running:
                continue
            victim = rng.choice(running)
            node = victim["spec"]["node"]
            annotations = {
                "sim.nodus.dev/preempt-requested-at": units.format_micro_time(units.now()),
                "sim.nodus.dev/preempt-notice": NOTICE,
            }
            at = datetime.now(UTC)
            await client.patch("nodes", node, {"metadata": {"annotations": annotations}})
            nodes.add(node)
            hit[victim["spec"]["job"]] = {"attempt": victim["metadata"]["name"], "node": node, "at": at}
    return hit


async def _cancel(client: Any, names: list[str], concurrency: int) -> None:
    """Cancel the Jobs ``names`` (as ``nodus cancel`` does: ``spec.state: Cancelled``), ``concurrency`` at once."""
    queue = list(names)

    async def one() -> None:
        while queue:
            await client.patch("jobs", queue.pop(), {"spec": {"state": "Cancelled"}}, common.PROJECT)

    await asyncio.gather(*(one() for _ in range(concurrency)))


async def _until_ended(client: Any, count: int, timeout: float, stall: float, interval: float) -> list[Any]:
    """The Jobs once ``count`` have finished, or once their phases have not changed for ``stall`` seconds (or
    ``timeout`` passed): those still going are then reported as they are rather than waited for."""
    deadline = time.monotonic() + timeout
    last: list[tuple[str, int]] = []
    progress = time.monotonic()
    while True:
        jobs = list((await client.list("jobs", common.PROJECT))["items"])
        phases = Counter(str((j.get("status") or {}).get("phase")) for j in jobs)
        if sorted(phases.items()) != last:
            last, progress = sorted(phases.items()), time.monotonic()
        if sum(phases[p] for p in FINISHED) >= count or time.monotonic() > min(deadline, progress + stall):
            return jobs
        await asyncio.sleep(interval)


# --- figures --------------------------------------------------------------------------------------


def _histogram(metrics: dict[str, float], verbs: tuple[str, ...]) -> dict[float, float]:
    """Cumulative bucket counts (upper bound -> count) of the request-duration histogram, summed over ``verbs``."""
    buckets: dict[float, float] = {}
    for key, value in metrics.items():
        if not key.startswith("nodus_apiserver_request_duration_seconds_bucket{"):
            continue
        labels = dict(part.split("=", 1) for part in key[key.index("{") + 1 : -1].split(","))
        if labels.get("verb", "").strip('"') not in verbs:
            continue
        bound = labels["le"].strip('"')
        upper = float("inf") if bound == "+Inf" else float(bound)
        buckets[upper] = buckets.get(upper, 0.0) + value
    return buckets


def histogram_quantile(buckets: dict[float, float], q: float) -> float:
    """Prometheus's histogram_quantile over cumulative buckets: linear within the bucket (the +Inf bucket: its
    lower bound)."""
    ordered = sorted(buckets.items())
    if not ordered or ordered[-1][1] <= 0:
        return float("nan")
    rank = q * ordered[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for upper, count in ordered:
        if count >= rank:
            if upper == float("inf"):
                return lower_bound
            if count == lower_count:
                return upper
            return lower_bound + (upper - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = upper, count
    return lower_bound


def _server_mutations(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    first, second = _histogram(before, MUTATING), _histogram(after, MUTATING)
    delta = {upper: second[upper] - first.get(upper, 0.0) for upper in second}
    per_verb = {}
    for verb in MUTATING:
        b, a = _histogram(before, (verb,)), _histogram(after, (verb,))
        d = {upper: a[upper] - b.get(upper, 0.0) for upper in a}
        per_verb[verb] = {
            "count": max(d.values(), default=0.0),
            "p50_ms": 1000 * histogram_quantile(d, 0.5),
            "p99_ms": 1000 * histogram_quantile(d, 0.99),
        }
    return {
        "count": max(delta.values(), default=0.0),
        "p50_ms": 1000 * histogram_quantile(delta, 0.5),
        "p99_ms": 1000 * histogram_quantile(delta, 0.99),
        "over_1s": max(delta.values(), default=0.0) - delta.get(1.0, 0.0),
        "by_verb": per_verb,
    }


def _binds(attempts: list[Any], workload: set[str], origin_unix: float) -> dict[str, Any]:
    from nodus.apimachinery import units

    bound = sorted(
        units.parse_time(a["status"]["scheduledTime"]).timestamp()
        for a in attempts
        if a["spec"].get("job") in workload and (a.get("status") or {}).get("scheduledTime")
    )
    created = sorted(
        units.parse_time(a["metadata"]["creationTimestamp"]).timestamp()
        for a in attempts
        if a["spec"].get("job") in workload
    )
    if not bound:
        return {"bound": 0, "per_s": 0.0}
    span = max(1.0, bound[-1] - origin_unix)
    windows = Counter(int((t - origin_unix) // 10) for t in bound)
    return {
        "bound": len(bound),
        "created": len(created),
        "span_s": span,
        "per_s": len(bound) / span,
        "created_per_s": len(created) / max(1.0, created[-1] - origin_unix) if created else 0.0,
        "peak_10s_per_s": max(windows.values()) / 10,
        "per_10s": [windows.get(i, 0) for i in range(max(windows) + 1)],
    }


def _recovery(attempts: list[Any], preempted: dict[str, dict[str, Any]], reference_s: float) -> dict[str, Any]:
    from nodus.apimachinery import units

    by_job: dict[str, list[Any]] = {}
    for a in attempts:
        by_job.setdefault(a["spec"].get("job"), []).append(a)
    times: list[float] = []
    samples = []
    unrecovered = []
    for job, hit in preempted.items():
        lost_number = next(
            (a["spec"]["number"] for a in by_job.get(job, []) if a["metadata"]["name"] == hit["attempt"]), -1
        )
        later = [
            a
            for a in by_job.get(job, [])
            if a["spec"]["number"] > lost_number and (a.get("status") or {}).get("startTime")
        ]
        if not later:
            unrecovered.append(job)
            continue
        started = min(units.parse_time(a["status"]["startTime"]) for a in later)
        seconds = (started - hit["at"]).total_seconds()
        times.append(seconds)
        samples.append((job, hit["node"], round(seconds, 1)))
    p95 = common.percentile(times, 95)
    return {
        "n": len(times),
        "p50_s": common.percentile(times, 50),
        "p95_s": p95,
        "max_s": max(times, default=float("nan")),
        "reference_s": reference_s,
        "p95_vs_reference": p95 / reference_s if times else float("nan"),
        "unrecovered": unrecovered,
        "samples": samples,
    }


async def _postgres(url: str, jobs: int) -> dict[str, Any]:
    import asyncpg

    from nodus.storage import database

    conn = await asyncpg.connect(database.asyncpg_dsn(url))
    try:
        await conn.execute("ANALYZE")
        rows = await conn.fetch(
            "SELECT relname, n_live_tup, pg_total_relation_size(relid) AS size FROM pg_stat_user_tables "
            "ORDER BY pg_total_relation_size(relid) DESC"
        )
        database_bytes = int(await conn.fetchval("SELECT pg_database_size(current_database())"))
    finally:
        await conn.close()
    tables = {r["relname"]: {"rows": int(r["n_live_tup"]), "bytes": int(r["size"])} for r in rows}
    total = sum(t["bytes"] for t in tables.values())
    return {
        "tables": tables,
        "total_bytes": total,
        "database_bytes": database_bytes,
        "bytes_per_job": total / jobs if jobs else float("nan"),
        "rows_per_job": sum(t["rows"] for t in tables.values()) / jobs if jobs else float("nan"),
    }


def _list_all(server: common.Server) -> dict[str, Any]:
    started = time.perf_counter()
    status, body = server.request("GET", common.jobs_path(), timeout=300)
    seconds = time.perf_counter() - started
    items = len(json.loads(body)["items"]) if status == 200 else 0
    return {"status": status, "seconds": seconds, "bytes": len(body), "items": items, "target_s": 30.0}


# --- the run --------------------------------------------------------------------------------------


async def run(
    workdir: Path,
    hosts: int = 200,
    jobs: int = 2000,
    connections: int = 32,
    preemptions: int = 20,
    preempt_interval: float = 2.0,
    boot_timeout: float = 120.0,
    timeout: float = 600.0,
    stall: float = 90.0,
    poll: float = 5.0,
    seed: int = SEED,
) -> dict[str, Any]:
    from nodus.client import Client

    rng = random.Random(seed)
    warmup = [job_body(f"warm-{i:05d}", rng, WARMUP_DURATION) for i in range(hosts)]
    workload = [job_body(f"job-{i:05d}", rng) for i in range(jobs)]
    interruptible = {b["metadata"]["name"] for b in workload if b["metadata"]["labels"]["kind"] == "interruptible"}
    result: dict[str, Any] = {
        "hosts": hosts,
        "jobs": jobs,
        "warmup_jobs": hosts,
        "connections": connections,
        "seed": seed,
        "boot_time_s": float(BOOT_TIME.rstrip("s")),
        "mix": dict(Counter(b["metadata"]["labels"]["kind"] for b in workload)),
    }
    watch = _Watch(target=hosts)
    async with _cluster(workdir, hosts, result) as (db, server, controllers, fakehosts):
        pids = {"apiserver": server.pid, "controllers": controllers.process.pid, "fakehosts": fakehosts.process.pid}
        endpoint = server.endpoint()
        async with Client(common.client_config(server), user_agent="bench-scale") as client:
            await _leader(client)
            await asyncio.sleep(2.0)  # the leader publishes the offerings' capacity once it leads
            origin = time.monotonic()
            done = asyncio.Event()
            watcher = asyncio.create_task(_watch_nodes(client, watch, done, poll, origin))
            try:
                # Warm-up: hosts for ``hosts`` Jobs, kept warm by their scaledownWindow.
                spec = {"endpoint": endpoint, "path": common.jobs_path(), "bodies": warmup, "connections": connections}
                result["warmup_submit"] = await common.run_worker("bench.scale", spec, timeout=boot_timeout + 300)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(watch.enough.wait(), boot_timeout)
                result["warmup_s"] = time.monotonic() - origin
                result["ready_after_warmup"] = watch.ready_now
                # Their programs end (cancelled): the hosts go idle and stay warm (scaledownWindow) for the workload.
                await _cancel(client, [b["metadata"]["name"] for b in warmup], connections)
                result["warmup_cancelled_s"] = time.monotonic() - origin
                # The busy phase: the workload, preemptions, and CPU and the server's histogram around it.
                before = await asyncio.to_thread(server.metrics)
                queues_before = await asyncio.to_thread(queues.scrape, result["metrics_address"])
                peak_depth: dict[str, float] = {}
                sampler = asyncio.create_task(_sample_depths(result["metrics_address"], peak_depth, done, 1.0))
                cpu_before = {name: common.cpu_seconds(pid) for name, pid in pids.items()}
                pg_before, machine_before, wall_before = (
                    common.postgres_cpu_seconds(),
                    common.machine_cpu()[0],
                    time.monotonic(),
                )
                busy_origin = time.monotonic()
                spec = {
                    "endpoint": endpoint,
                    "path": common.jobs_path(),
                    "bodies": workload,
                    "connections": connections,
                }
                preempting = asyncio.create_task(
                    _preempt(client, random.Random(seed + 1), interruptible, preemptions, preempt_interval, done)
                )
                submitted = await common.run_worker("bench.scale", spec, timeout=timeout)
                result["submit"] = submitted
                ended = await _until_ended(client, hosts + jobs, timeout, stall, poll)
                result["busy_s"] = time.monotonic() - busy_origin
                wall = time.monotonic() - wall_before
                result["cpu_cores"] = {
                    **{name: (common.cpu_seconds(pid) - cpu_before[name]) / wall for name, pid in pids.items()},
                    "postgres": (common.postgres_cpu_seconds() - pg_before) / wall,
                    "machine": (common.machine_cpu()[0] - machine_before) / wall,
                    "submit_worker_cpu_s": submitted["worker_cpu_s"],
                }
                after = await asyncio.to_thread(server.metrics)
                result["server_mutations"] = _server_mutations(before, after)
                queues_after = await asyncio.to_thread(queues.scrape, result["metrics_address"])
                result["controllers_queues"] = queues.summary(queues_before, queues_after, peak_depth)
                result["controllers_queue_lines"] = queues.table(result["controllers_queues"], jobs)
            finally:
                done.set()
                preempted: dict[str, dict[str, Any]] = {}
                if "preempting" in locals():
                    preempted = await preempting
                if "sampler" in locals():
                    await sampler
                await watcher
            attempts = list((await client.list("attempts", common.PROJECT))["items"])
        result["list"] = await asyncio.to_thread(_list_all, server)
        result["rss_peak_mib"] = {name: common.peak_rss_kib(pid) / 1024 for name, pid in pids.items()}
        result["postgres_tables"] = await _postgres(db, hosts + jobs)
        logs = controllers.logs()
        result["lease_losses"] = logs.count(LEASE_NEEDLE)
        result["lease_loss_lines"] = [line[:300] for line in logs.splitlines() if LEASE_NEEDLE in line][:10]
        result["controllers_errors"] = logs.count(" ERROR ")
        result["fakehosts_errors"] = fakehosts.logs().count(" ERROR ")
    workload_names = {b["metadata"]["name"] for b in workload}
    result["binds"] = _binds(attempts, workload_names, submitted["started_unix"])
    result["recovery"] = _recovery(attempts, preempted, result["boot_time_s"])
    phases = Counter((j.get("status") or {}).get("phase", "Pending") for j in ended)
    result["jobs_ended"] = dict(phases)
    result["attempts"] = len(attempts)
    result["attempts_by_phase"] = dict(Counter((a.get("status") or {}).get("phase", "Pending") for a in attempts))
    preempted_nodes = {hit["node"] for hit in preempted.values()}
    result["nodes"] = {
        "seen": len(watch.nodes_seen),
        "peak_ready": watch.peak_ready,
        "peak_live": watch.peak_live,
        "lost": sorted(watch.lost),
        "lost_not_preempted": sorted(watch.lost - preempted_nodes),
        "samples": watch.samples,
    }
    result["preempted"] = len(preempted)
    result["targets"] = {
        "lease_losses": result["lease_losses"] == 0,
        "binds_100": result["binds"]["per_s"] >= 100,
        "binds_500": result["binds"]["per_s"] >= 500,
        "mutation_p99_1s": max(submitted["p99_ms"], result["server_mutations"]["p99_ms"]) <= 1000,
        "list_30s": result["list"]["seconds"] <= 30,
        "recovery_3x": result["recovery"]["p95_vs_reference"] <= 3 and not result["recovery"]["unrecovered"],
        "no_lost_nodes": not result["nodes"]["lost_not_preempted"],
    }
    return result


# --- the table ------------------------------------------------------------------------------------


def _queue_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """Where the controllers waited (``bench/queues.py``): the busiest queues and the API client's connections."""
    summary = r.get("controllers_queues")
    if not summary:
        return []
    waits = ", ".join(
        f"{name} {q['wait_mean_s']:.1f} s ({q['work_mean_ms']:.0f} ms)" for name, q in queues.busiest(summary)[:3]
    )
    client = summary["client"]
    return [
        ("  controllers: key wait (reconcile) of the busiest queues", waits, "", "", "", "-"),
        (
            "  controllers' API client: requests/Job, wait for a connection, request ms",
            f"{client['requests'] / r['jobs']:.1f}, {client['wait_mean_ms']:.0f}, {client['request_mean_ms']:.0f}",
            "",
            "",
            "",
            "-",
        ),
    ]


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """The benchmark table's rows (``bench/run.py``)."""
    t, b, s, m = r["targets"], r["binds"], r["submit"], r["server_mutations"]
    rec, rss, cpu, pg = r["recovery"], r["rss_peak_mib"], r["cpu_cores"], r["postgres_tables"]
    return [
        (
            f"scale: {r['hosts']} hosts, {r['jobs']} Jobs (+{r['warmup_jobs']} warm-up): leader Lease losses",
            str(r["lease_losses"]),
            "",
            "",
            "0",
            _verdict(t["lease_losses"]),
        ),
        (
            "  workload Attempts bound/s (created/s; peak 10 s)",
            f"{b['per_s']:.0f}/s ({b.get('created_per_s', 0):.0f}/s; {b.get('peak_10s_per_s', 0):.0f}/s)",
            "",
            "",
            ">= 100/s (500)",
            _verdict(t["binds_100"]) + (", stretch met" if t["binds_500"] else ""),
        ),
        (
            f"  mutating calls p50/p99 ms: our creates; server create+update+patch (n {m['count']:.0f})",
            f"{s['p50_ms']:.0f}/{s['p99_ms']:.0f}; {m['p50_ms']:.0f}/{m['p99_ms']:.0f}",
            f"creates {s['throughput']:.0f}/s",
            "",
            "p99 <= 1000",
            _verdict(t["mutation_p99_1s"]),
        ),
        (
            f"  LIST all {r['list']['items']} Jobs, unpaged",
            f"{r['list']['seconds']:.1f} s, {r['list']['bytes'] / 2**20:.0f} MiB",
            "",
            "",
            "<= 30 s",
            _verdict(t["list_30s"]),
        ),
        (
            f"  recovery after preemption p50/p95 s (n {rec['n']}, not recovered {len(rec['unrecovered'])})",
            f"{rec['p50_s']:.1f} / {rec['p95_s']:.1f}",
            f"detect 0 + boot {rec['reference_s']:.0f} s",
            f"{rec['p95_vs_reference']:.1f}x",
            "<= 3x",
            _verdict(t["recovery_3x"]),
        ),
        *_queue_rows(r),
        (
            "  nodes: seen, peak Ready, Lost (not preempted)",
            f"{r['nodes']['seen']}, {r['nodes']['peak_ready']}, {len(r['nodes']['lost_not_preempted'])}",
            "",
            "",
            "0 Lost",
            _verdict(t["no_lost_nodes"]),
        ),
        (
            "  peak RSS MiB: apiserver, controllers, fakehosts",
            f"{rss['apiserver']:.0f}, {rss['controllers']:.0f}, {rss['fakehosts']:.0f}",
            "",
            "",
            "",
            "-",
        ),
        (
            "  CPU cores (busy phase): apiserver, controllers, fakehosts, postgres, machine",
            f"{cpu['apiserver']:.2f}, {cpu['controllers']:.2f}, {cpu['fakehosts']:.2f}, {cpu['postgres']:.2f}, "
            f"{cpu['machine']:.2f}",
            "",
            "",
            "",
            "-",
        ),
        (
            "  PostgreSQL per Job: bytes, rows",
            f"{pg['bytes_per_job'] / 1024:.1f} KiB, {pg['rows_per_job']:.1f}",
            f"total {pg['total_bytes'] / 2**20:.0f} MiB",
            "",
            "",
            "-",
        ),
        (
            "  Jobs ended; busy phase s",
            ", ".join(f"{k} {v}" for k, v in sorted(r["jobs_ended"].items())) + f"; {r['busy_s']:.0f}",
            "",
            "",
            "",
            "-",
        ),
    ]


if __name__ == "__main__" and "--worker" in sys.argv:
    _worker_main()
