"""Scheduling throughput: Attempts bound per second by the scheduler as deployed, vs raw ``/status`` writes.

Setup: a ``nodus apiserver`` started with a price book of exactly 200 offerings (:func:`write_price_book`:
the shipped ``nodus/catalog/pricebook.yaml`` plus CPU-only host shapes until the expansion has 200 entries;
no provider publishes ``status.capacity``, so every offering is unlimited and all 1,000 Attempts fit).
Each round creates, before anything is timed, ``count`` pending Attempts in each of four fresh projects:
the bodies the Job controller would create (``attempts.attempt_for``) for six template Jobs of different
shapes (8x H100, 1 GPU with 40Gi, 4x A100 interruptible, CPU-only, L4 in eu at the Cost profile, 8x
H200/B200 NVLink at the Speed profile), owned by those Jobs, created through the API.

Scheduler side: ``nodus.controllers.scheduling.SchedulerLoop`` runs in this process with its informers
(``nodus.client.informers.Informer``: attempts of the round's project, nodes, offerings) over one
``nodus.client.Client``, exactly as ``nodus controllers`` wires it (its 32 concurrent writes, one
``PUT .../attempts/NAME/status`` per binding with the resourceVersion it saw) but alone: no Job
controller, provisioner or agents. The informers list and sync first; the clock starts when the loop
starts and stops when its own attempts informer has seen the last of the ``count`` Attempts become
``Provisioning``. Cycles, the time in ``snapshot()`` and in ``run_cycle`` are recorded.

Baselines, same client kind, same concurrency (32), same informer watching the project for completion,
no scheduling: ``patch``, a JSON merge patch of ``/status`` per Attempt carrying the very status the
scheduler would write (its placements are computed with ``run_cycle`` before the clock starts); for
context, ``put``: the scheduler's own write (PUT of the whole object on ``/status``) without the loop;
and, for context too, ``lean``: the same merge patches sent by a lean HTTP/1.1 client in its own process
(32 keep-alive connections on raw asyncio streams, requests built as bytes before the clock, as
``bench/loadgen.py``), timed by the same informer: what the API server absorbs when the client costs
nothing (its ``client_cores`` are the worker's). The four sides run in rotating order each round (ABCD,
DCBA); figures are medians over rounds, the ratio is scheduler binds/s over PATCH/s.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from bench import common

OFFERINGS = 200
# The scheduler's own writes in flight (SchedulerLoop's default); every side uses the same.
CONCURRENCY = 8
TARGET_RATIO = 0.50
TARGET_RATE = 100.0
SIDES = ("sched", "patch", "put", "lean")

# The template Jobs' specs: the requirement shapes the scheduler sees (one plan per shape and cycle).
SHAPES: tuple[dict[str, Any], ...] = (
    {"resources": {"gpu": {"type": ["H100"], "count": 8}}, "expectedDuration": "6h"},
    {"resources": {"gpu": {"type": ["H100", "A100", "L40S"], "count": 1, "minMemory": "40Gi"}}},
    {"resources": {"gpu": {"type": ["A100"], "count": 4}}, "placement": {"interruptible": "Allow"}},
    {"resources": {"cpu": "16", "memory": "64Gi"}, "expectedDuration": "30m"},
    {"resources": {"gpu": {"type": ["L4"], "count": 1}}, "placement": {"profile": "Cost", "regions": ["eu"]}},
    {
        "resources": {"gpu": {"type": ["H200", "B200"], "count": 8, "interconnect": "NVLink"}},
        "placement": {"profile": "Speed"},
    },
)


# --- the price book -------------------------------------------------------------------------------


def write_price_book(path: Path, offerings: int = OFFERINGS) -> int:
    """Write a price book in the shipped format that expands to exactly ``offerings`` offerings.

    The shipped book (142 offerings) plus CPU-only hosts of new sizes (``cpu-<n>c``), each in us, eu and
    asia and, while more are needed, interruptible in us and eu (5 offerings per host), the last one
    trimmed to hit the count. Validated with the server's own loader; returns the count.
    """
    from importlib import resources

    from nodus.apis.v1 import accelerators
    from nodus.catalog import pricebook

    text = resources.files("nodus.catalog").joinpath("pricebook.yaml").read_text(encoding="utf-8")
    book: dict[str, Any] = yaml.safe_load(text)
    book["version"] = "bench-200"
    have = len(pricebook.parse(text, "shipped", accelerators.CATALOG).offerings)
    taken = {int(host["vcpu"]) for host in book.get("cpuHosts", [])}
    vcpu = 2
    missing = offerings - have
    if missing < 0:
        raise ValueError(f"the shipped price book already has {have} offerings, more than {offerings}")
    while missing > 0:
        while vcpu in taken:
            vcpu += 2
        taken.add(vcpu)
        regions = ["us", "eu", "asia"][: min(3, missing)]
        host: dict[str, Any] = {
            "vcpu": vcpu,
            "memory": f"{4 * vcpu}Gi",
            "disk": f"{32 * vcpu}Gi",
            "rate": f"{0.0504 * vcpu:.4f}",
            "regions": regions,
            "boot": {"p50": "30s", "p90": "90s"},
        }
        spot = ["us", "eu"][: min(2, missing - len(regions))]
        if spot:
            host["interruptible"] = {"priceFactor": "0.35", "meanTimeBetweenInterruptions": "24h", "regions": spot}
        book.setdefault("cpuHosts", []).append(host)
        missing -= len(regions) + len(spot)
    written = yaml.safe_dump(book, sort_keys=False)
    count = len(pricebook.parse(written, str(path), accelerators.CATALOG).offerings)
    if count != offerings:
        raise AssertionError(f"generated price book has {count} offerings, not {offerings}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(written)
    return count


# --- setup ----------------------------------------------------------------------------------------


def _template_job(name: str, shape: dict[str, Any]) -> dict[str, Any]:
    spec = {"image": "ghcr.io/example/trainer:1.4", "command": ["python", "train.py"], **shape}
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


async def _populate(client: Any, namespace: str, count: int) -> None:
    """The round's project: six template Jobs (never reconciled: no controllers run) and ``count``
    pending Attempts owned by them, as the Job controller would create them."""
    from nodus.controllers.jobs import attempts

    await client.create(
        "projects", {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": namespace}, "spec": {}}
    )
    jobs = [await client.create("jobs", _template_job(f"shape{i}", s), namespace) for i, s in enumerate(SHAPES)]
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(index: int) -> None:
        body = attempts.attempt_for(jobs[index % len(jobs)], index, 1)
        async with gate:
            await client.create("attempts", body, namespace)

    await asyncio.gather(*(one(i) for i in range(count)))


class _Bound:
    """An informer handler counting Attempts that became Provisioning; ``done`` once ``expected`` have."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.count = 0
        self.first: float | None = None
        self.last = 0.0
        self.done = asyncio.Event()

    def __call__(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None or (new.get("status") or {}).get("phase") != "Provisioning":
            return
        if old is not None and (old.get("status") or {}).get("phase") == "Provisioning":
            return
        self.count += 1
        self.last = time.perf_counter()
        if self.first is None:
            self.first = self.last
        if self.count >= self.expected:
            self.done.set()


@contextlib.contextmanager
def _timed_cycles(record: list[dict[str, float]]) -> Iterator[None]:
    """Record the duration and outcome of every ``run_cycle`` the scheduler calls (instrumentation only)."""
    from nodus.scheduler import cycle as cycles

    original = cycles.run_cycle

    def timed(snapshot: Any) -> Any:
        started = time.perf_counter()
        result = original(snapshot)
        record.append(
            {
                "seconds": time.perf_counter() - started,
                "works": len(snapshot.work),
                "bindings": len(result.bindings),
                "unschedulable": len(result.unschedulable),
            }
        )
        return result

    cycles.run_cycle = timed
    try:
        yield
    finally:
        cycles.run_cycle = original


async def _informers(client: Any, namespace: str) -> tuple[Any, Any, Any]:
    from nodus.client.informers import Informer
    from nodus.controllers.nodes.provisioning import NODE_INDEX, nodes_of

    attempts = Informer(client, "attempts", namespace=namespace)
    attempts.add_index(NODE_INDEX, nodes_of)  # the scheduler's busy-host check reads it (assembly adds it)
    return attempts, Informer(client, "nodes"), Informer(client, "offerings")


@contextlib.asynccontextmanager
async def _running(*informers: Any) -> Any:
    tasks = [asyncio.create_task(informer.run()) for informer in informers]
    try:
        await asyncio.wait_for(asyncio.gather(*(i.wait_synced() for i in informers)), 60)
        yield
    finally:
        for task in tasks:
            await stop_task(task)


async def stop_task(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait for it, cancelling again if a cancellation was swallowed.

    Needed for ``SchedulerLoop.run`` on Python 3.11: its ``asyncio.wait_for(self._wake.wait(), tick)``
    returns normally instead of raising CancelledError when the wake event was set in the same loop
    iteration as the cancellation (3.11's ``wait_for`` returns the inner result when it is already done),
    and the loop then goes on forever.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    with contextlib.suppress(asyncio.CancelledError):
        task.exception()


# --- the sides ------------------------------------------------------------------------------------


async def _schedule_round(server: common.Server, namespace: str, count: int) -> dict[str, Any]:
    from nodus.client import Client
    from nodus.controllers.scheduling import SchedulerLoop

    class TimedLoop(SchedulerLoop):
        snapshot_seconds = 0.0

        def snapshot(self, pending: list[Any] | None = None) -> Any:
            started = time.perf_counter()
            try:
                return super().snapshot(pending)
            finally:
                self.snapshot_seconds += time.perf_counter() - started

    cycles: list[dict[str, float]] = []
    async with Client(common.client_config(server), user_agent="bench-scheduler") as client:
        attempts, nodes, offerings = await _informers(client, namespace)
        loop = TimedLoop(client, attempts, nodes, offerings, concurrency=CONCURRENCY)
        bound = _Bound(count)
        attempts.add_handler(bound)
        async with _running(attempts, nodes, offerings):
            pending = [a for a in attempts.items() if (a.get("status") or {}).get("phase") == "Pending"]
            if len(pending) != count or len(offerings.items()) != OFFERINGS:
                raise RuntimeError(f"expected {count} pending attempts and {OFFERINGS} offerings")
            with _timed_cycles(cycles), server.profiled(f"schedule-{namespace}"), common.CpuMeter(server.pid) as cpu:
                started = time.perf_counter()
                runner = asyncio.create_task(loop.run())
                try:
                    await asyncio.wait_for(bound.done.wait(), 600)
                finally:
                    elapsed = bound.last - started
                    await stop_task(runner)
    return {
        "count": count,
        "elapsed": elapsed,
        "throughput": count / elapsed,
        "first_bind_ms": 1000 * ((bound.first or started) - started),
        "throughput_after_first_bind": (count - 1) / max(bound.last - (bound.first or started), 1e-9),
        "cycles": loop.cycle,
        "cycles_with_work": len(cycles),
        "run_cycle_ms": [round(1000 * c["seconds"], 1) for c in cycles],
        "works_per_cycle": [int(c["works"]) for c in cycles],
        "snapshot_ms": 1000 * loop.snapshot_seconds,
        "cpu": cpu.summary(),
    }


async def _write_round(server: common.Server, namespace: str, count: int, mode: str) -> dict[str, Any]:
    """The same status the scheduler would write, written without it: ``patch`` (merge patch) or ``put``."""
    from nodus.apimachinery import units
    from nodus.client import Client, rest
    from nodus.scheduler import cycle as cycles
    from nodus.scheduler import snapshot as snapshots

    async with Client(common.client_config(server), user_agent=f"bench-{mode}") as client:
        attempts, _, offerings = await _informers(client, namespace)
        bound = _Bound(count)
        attempts.add_handler(bound)
        async with _running(attempts, offerings):
            items = sorted(attempts.items(), key=lambda a: a["metadata"]["name"])
            snapshot = snapshots.Snapshot(
                cycle=1,
                now=units.now(),
                work=[snapshots.Work.from_object(a) for a in items],
                offerings=[snapshots.Offering.from_object(o) for o in offerings.items()],
                hosts=[],
            )
            placements = {b.work.name: b.placement() for b in cycles.run_cycle(snapshot).bindings}
            if len(placements) != count:
                raise RuntimeError(f"expected {count} placements, got {len(placements)}")
            scheduled = units.format_time(units.now())
            gate = asyncio.Semaphore(CONCURRENCY)

            def status_of(attempt: dict[str, Any]) -> dict[str, Any]:
                name = attempt["metadata"]["name"]
                return {**attempt["status"], "phase": "Provisioning", "placement": placements[name]} | {
                    "scheduledTime": scheduled
                }

            async def patch(attempt: dict[str, Any]) -> None:
                body = {"status": status_of(attempt)}
                async with gate:
                    await client.patch("attempts", attempt["metadata"]["name"], body, namespace, subresource="status")

            async def put(attempt: dict[str, Any]) -> None:
                async with gate:
                    await client.update(
                        "attempts", {**attempt, "status": status_of(attempt)}, namespace, subresource="status"
                    )

            if mode == "lean":
                requests = [
                    [rest.path("attempts", namespace, a["metadata"]["name"], "status"), {"status": status_of(a)}]
                    for a in items
                ]
                spec = {"endpoint": server.endpoint(), "requests": requests, "connections": CONCURRENCY}
                worker = await common.start_worker("bench.schedule_throughput", spec)
                ready = await worker.status(60)  # connections open, requests built: the clock starts now
                started = time.perf_counter()
                with common.CpuMeter(server.pid) as cpu:
                    await worker.stop()  # "go"
                    await asyncio.wait_for(bound.done.wait(), 600)
                    elapsed = bound.last - started
                lean = await worker.result(60)
                if lean["unexpected"]:
                    raise RuntimeError(f"unexpected responses: {lean['statuses']}: {lean.get('sample')}")
                summary = cpu.summary()
                summary["client_cores"] = lean["client_cpu_seconds"] / elapsed  # the worker, not this process
                return {"count": count, "elapsed": elapsed, "throughput": count / elapsed, "cpu": summary, **ready}
            write: Callable[[dict[str, Any]], Any] = patch if mode == "patch" else put
            with server.profiled(f"{mode}-{namespace}"), common.CpuMeter(server.pid) as cpu:
                started = time.perf_counter()
                await asyncio.gather(*(write(a) for a in items))
                await asyncio.wait_for(bound.done.wait(), 600)
                elapsed = bound.last - started
    return {"count": count, "elapsed": elapsed, "throughput": count / elapsed, "cpu": cpu.summary()}


# --- the lean PATCH worker (its own process: no httpx, requests built as bytes before the clock) ------


async def _lean_worker(spec: dict[str, Any]) -> dict[str, Any]:
    import orjson

    from bench import loadgen

    endpoint = spec["endpoint"]
    host = f"{endpoint['host']}:{endpoint['port']}"
    requests = []
    for path, body in spec["requests"]:
        payload = orjson.dumps(body)
        head = (
            f"PATCH {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {endpoint['token']}\r\n"
            "Accept: application/json\r\nUser-Agent: nodus-bench/1\r\n"
            f"Content-Type: application/merge-patch+json\r\nContent-Length: {len(payload)}\r\n\r\n"
        )
        requests.append(head.encode() + payload)
    links = [await loadgen.open_connection(endpoint) for _ in range(int(spec["connections"]))]
    common.report_status({"connections": len(links)})
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # wait for "go"
    statuses: Counter[int] = Counter()
    sample: list[bytes] = []
    position = 0
    cpu_before = common.own_cpu_seconds()

    async def one_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal position
        while position < len(requests):
            request = requests[position]
            position += 1
            writer.write(request)
            status, body = await loadgen.read_response(reader)
            statuses[status] += 1
            if status != 200 and not sample:
                sample.append(body)

    await asyncio.gather(*(one_connection(reader, writer) for reader, writer in links))
    cpu = common.own_cpu_seconds() - cpu_before
    for _, writer in links:
        writer.close()
    return {
        "statuses": {str(k): v for k, v in statuses.items()},
        "unexpected": sum(v for k, v in statuses.items() if k != 200),
        "sample": sample[0][:500].decode(errors="replace") if sample else None,
        "client_cpu_seconds": cpu,
    }


def main() -> None:
    import uvloop

    spec = common.read_spec()
    common.write_result(spec, uvloop.run(_lean_worker(spec)))


if __name__ == "__main__" and "--worker" in sys.argv:
    main()


# --- the benchmark --------------------------------------------------------------------------------


async def run(workdir: Path, rounds: int = 5, count: int = 1000) -> dict[str, Any]:
    from nodus.client import Client

    book = workdir / "pricebook-200.yaml"
    offerings = write_price_book(book)
    server_url = common.database_server_url()
    sides: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    result: dict[str, Any] = {"count": count, "rounds": rounds, "concurrency": CONCURRENCY, "offerings": offerings}
    result["shapes"] = len(SHAPES)
    async with (
        common.scratch_database(server_url) as db,
        common.running_server(db, workdir / "schedule", extra_args=("--price-book", str(book))) as server,
    ):
        result["postgres"] = await common.postgres_facts(db)
        for r in range(rounds):
            async with Client(common.client_config(server), user_agent="bench-setup") as client:
                for side in SIDES:
                    await _populate(client, f"{side}-r{r}", count)
            await asyncio.sleep(1.0)  # let the setup's commits and watch events drain
            order = SIDES if r % 2 == 0 else tuple(reversed(SIDES))
            for side in order:
                namespace = f"{side}-r{r}"
                if side == "sched":
                    sides[side].append(await _schedule_round(server, namespace, count))
                else:
                    sides[side].append(await _write_round(server, namespace, count, side))
    for side, measured in sides.items():
        result[side] = _summarise(measured)
    result["sched"]["cycles"] = [r["cycles"] for r in sides["sched"]]
    result["sched"]["run_cycle_ms"] = [r["run_cycle_ms"] for r in sides["sched"]]
    result["sched"]["works_per_cycle"] = [r["works_per_cycle"] for r in sides["sched"]]
    result["sched"]["snapshot_ms"] = common.median([r["snapshot_ms"] for r in sides["sched"]])
    result["sched"]["first_bind_ms"] = common.median([r["first_bind_ms"] for r in sides["sched"]])
    result["sched"]["throughput_after_first_bind"] = common.median(
        [r["throughput_after_first_bind"] for r in sides["sched"]]
    )
    ratios = [s["throughput"] / p["throughput"] for s, p in zip(sides["sched"], sides["patch"], strict=True)]
    result["ratio"] = result["sched"]["throughput"] / result["patch"]["throughput"]
    result["ratio_rounds"] = [round(x, 3) for x in ratios]
    result["ratio_vs_put"] = result["sched"]["throughput"] / result["put"]["throughput"]
    result["target_ratio"] = TARGET_RATIO
    result["target_rate"] = TARGET_RATE
    result["met"] = result["ratio"] >= TARGET_RATIO and result["sched"]["throughput"] >= TARGET_RATE
    return result


def _summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    throughputs = [r["throughput"] for r in rounds]
    summary: dict[str, Any] = {
        "throughput": common.median(throughputs),
        "rounds": [round(t, 1) for t in throughputs],
        "spread": [round(v, 1) for v in common.spread(throughputs)],
    }
    for key in ("client_cores", "server_cores", "postgres_cores", "machine_cores", "other_cores"):
        summary[key] = common.median([r["cpu"][key] for r in rounds])
    for who in ("client", "server", "postgres"):
        summary[f"{who}_cpu_ms_per_write"] = 1000 * common.median(
            [r["cpu"][f"{who}_cores"] / r["throughput"] for r in rounds]
        )
    return summary
