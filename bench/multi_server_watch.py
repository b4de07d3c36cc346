"""Watches through several API servers: how many events a thousand watchers receive per second, 1 vs 3 servers.

Part of ``bench/multi_server.py`` (``--only servers``). ``WATCHERS`` raw-socket watchers of Jobs
(``bench/watch_latency.py``'s) in three worker processes either all watch server 0, or one process watches each of
the three servers; a writer in this process (``Storage.create``, a second Nodus process on the database, as in the
watch benchmark) commits ``events`` Jobs at ``rate`` per second (sent on a clock, each write in a task of its own),
more than even three servers can fan out to that many watchers on this machine (one server: about 17 ms of its
CPU per event, docs/benchmarks.md §2.1, so about 60 events/s), so the figure is the capacity, not the pace:

- ``delivered_per_s``: events received by all watchers together per second, from the first commit to the last
  arrival (watcher-events/s); the scaling is 3 servers' over one's (issue 22's target: >= 1.8x);
- p50/p99 from commit to arrival, and the servers' CPU per event (summed over the servers used).

Rounds alternate 1, 3, 3, 1 servers. On a machine whose cores the servers, PostgreSQL and the watcher processes
share, three servers cannot reach three times one; the CPU figures say where the time went.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench import common
from bench.watch_latency import collect, latencies, start_listeners

WATCHERS = 999
PROCESSES = 3


async def _round(
    servers: list[common.Server], storage: Any, template: dict[str, Any], events: int, rate: float, label: str
) -> dict[str, Any]:
    from nodus.storage.errors import Key

    rv = await storage.current_rv()
    path = f"{common.jobs_path()}?watch=true&resourceVersion={rv}&timeoutSeconds=900"
    specs = [
        {
            "mode": "api",
            "endpoint": servers[p % len(servers)].endpoint(),
            "path": path,
            "count": WATCHERS // PROCESSES,
            "expected": events,
            "deadline": events / rate + 180,
        }
        for p in range(PROCESSES)
    ]
    running = await start_listeners(specs)
    cpu_before = sum(common.cpu_seconds(s.pid) for s in servers)

    commits: dict[int, int] = {}

    async def write(i: int) -> None:
        name = f"{label}-{i}"
        await storage.create(Key("Job", common.PROJECT, name), common.stored_like(template, name, seq=i))
        commits[i] = time.monotonic_ns()

    # Sent on a clock, not one after another: the offered rate must not be capped by the writes' own latency.
    loop = asyncio.get_running_loop()
    start, writes = loop.time() + 0.2, []
    for i in range(events):
        await asyncio.sleep(max(0.0, start + i / rate - loop.time()))
        writes.append(asyncio.ensure_future(write(i)))
    await asyncio.gather(*writes)
    results = await collect(running, 120)
    servers_cpu = sum(common.cpu_seconds(s.pid) for s in servers) - cpu_before
    summary = latencies(commits, results, set())
    arrivals = [arrived for result in results for _, arrived in result["arrivals"]]
    span_s = (max(arrivals) - min(commits.values())) / 1e9 if arrivals else float("inf")
    summary.pop("values", None)
    return {
        **summary,
        "received": len(arrivals),
        "expected": events * WATCHERS,
        "delivered_per_s": len(arrivals) / span_s,
        "servers_cpu_ms_per_event": 1000 * servers_cpu / events,
    }


async def run(db: str, servers: list[common.Server], events: int = 600, rate: float = 300.0) -> dict[str, Any]:
    """Rounds of 1, 3, 3, 1 servers; the median of each, and the scaling of ``delivered_per_s``."""
    from nodus.storage.objects import Storage

    template = await asyncio.to_thread(servers[0].json, "POST", common.jobs_path(), common.job_body("watch-template"))
    storage = Storage(db, pool_size=4)
    await storage.start()
    measured: dict[int, list[dict[str, Any]]] = {1: [], 3: []}
    try:
        for r, n in enumerate((1, 3, 3, 1)):
            measured[n].append(await _round(servers[:n], storage, template, events, rate, f"watch{r}n{n}"))
    finally:
        await storage.stop()
    result: dict[str, Any] = {"watchers": WATCHERS, "events": events, "offered_per_s": rate}
    for n, entries in measured.items():
        numbers = [key for key, value in entries[0].items() if isinstance(value, int | float)]
        result[str(n)] = {key: common.median([e[key] for e in entries]) for key in numbers}
        result[str(n)]["errors"] = [error for e in entries for error in e["errors"]][:5]
        result[str(n)]["rounds"] = [round(e["delivered_per_s"]) for e in entries]
    result["scaling"] = result["3"]["delivered_per_s"] / result["1"]["delivered_per_s"]
    result["target_scaling"] = 1.8
    result["met"] = result["scaling"] >= 1.8
    return result
