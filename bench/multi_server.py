"""Several API servers behind one PostgreSQL: creates, GETs and the resourceVersion lock, 1 vs 3 servers.

Three ``nodus apiserver`` processes run on one scratch database. Each round measures, for N = 1 and N = 3
(interleaved, ABBA), N load generator processes (``bench.loadgen``) at once, each driving its own server with
``connections / N`` keep-alive connections:

- **creates**: POSTs of new Jobs. Every write of every server takes the one ``counters['rv']`` row lock
  (ADR 0001, ADR 0056), so this is what the global lock costs when servers are added;
- **reads**: GETs of one Job (served from the database: a point read, authorisation from the Projects view);
- **watches**: events delivered per second to a thousand watchers spread over the servers (``multi_server_watch``).

A figure is the sum of the N generators' rates (they run at the same time). After the rounds, one more
create run with 1 and with 3 servers while ``pg_stat_activity`` is sampled as in the create benchmark: how much
of the time a write transaction (the lock) is open.
On a machine whose cores the servers, PostgreSQL and the generators share, N servers cannot reach N times
one server's rate; the CPU columns say where the time went.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from bench import common, multi_server_watch
from bench.create_throughput import lock_probe

SERVERS = 3


async def _together(
    servers: list[common.Server], spec: dict[str, Any], count: int, connections: int, label: str
) -> dict[str, Any]:
    """``len(servers)`` generators at once, one per server, sharing ``count`` requests and ``connections``."""
    n = len(servers)
    specs = []
    for i, server in enumerate(servers):
        specs.append(
            spec
            | {
                "endpoint": server.endpoint(),
                "prefix": f"{label}-s{i}-",
                "count": count // n,
                "connections": max(1, connections // n),
                "server_pid": server.pid,
            }
        )
    with common.CpuMeter(None) as cpu:
        results = await asyncio.gather(*(common.run_worker("bench.loadgen", s) for s in specs))
    unexpected = sum(r["unexpected"] for r in results)
    if unexpected:
        raise RuntimeError(f"unexpected responses: {[r['statuses'] for r in results]}: {results[0].get('sample')}")
    servers_cpu = sum(common.cpu_seconds(s.pid) for s in servers)
    return {
        "throughput": sum(r["throughput"] for r in results),
        "latency_p50_ms": 1000 * common.median([r["latency_p50"] for r in results]),
        "latency_p99_ms": 1000 * max(r["latency_p99"] for r in results),
        "postgres_cores": cpu.summary()["postgres_cores"],
        "machine_cores": cpu.summary()["machine_cores"],
        "servers_cpu_s": servers_cpu,
    }


async def run(
    workdir: Path, rounds: int = 2, count: int = 3000, reads: int = 6000, connections: int = 48
) -> dict[str, Any]:
    server_url = common.database_server_url()
    result: dict[str, Any] = {"servers": SERVERS, "rounds": rounds, "count": count, "reads": reads}
    measured: dict[str, dict[int, list[dict[str, Any]]]] = {"creates": {1: [], 3: []}, "reads": {1: [], 3: []}}
    async with common.scratch_database(server_url) as db, contextlib.AsyncExitStack() as stack:
        result["postgres"] = await common.postgres_facts(db)
        servers = [
            await stack.enter_async_context(common.running_server(db, workdir / f"s{i}")) for i in range(SERVERS)
        ]
        await asyncio.to_thread(common.create_project, servers[0])
        await asyncio.to_thread(servers[0].json, "POST", common.jobs_path(), common.job_body("read-me"))
        create = {"method": "POST", "path": common.jobs_path(), "template": common.job_body("x"), "expect": 201}
        read = {"method": "GET", "path": common.jobs_path() + "/read-me", "expect": 200}
        for r in range(rounds):
            for n in (1, 3) if r % 2 == 0 else (3, 1):
                for kind, spec, total in (("creates", create, count), ("reads", read, reads)):
                    before = sum(common.cpu_seconds(s.pid) for s in servers[:n])
                    entry = await _together(servers[:n], spec | {"warmup": 100}, total, connections, f"r{r}n{n}")
                    entry["servers_cpu_ms_per_request"] = 1000 * (entry.pop("servers_cpu_s") - before) / total
                    measured[kind][n].append(entry)
        for n in (1, 3):
            probe = create | {"warmup": 0}
            result[f"lock_probe_{n}"] = await lock_probe(
                _dsn(db), lambda n=n, probe=probe: _together(servers[:n], probe, count // 2, connections, f"probe{n}")
            )
        result["watches"] = await multi_server_watch.run(db, servers)
    for kind, by_n in measured.items():
        result[kind] = {str(n): _median(entries) for n, entries in by_n.items()}
        result[kind]["scaling"] = result[kind]["3"]["throughput"] / result[kind]["1"]["throughput"]
    result["reads"]["target_scaling"] = 1.8
    result["reads"]["met"] = result["reads"]["scaling"] >= 1.8
    return result


def _dsn(url: str) -> str:
    from nodus.storage import database

    return database.asyncpg_dsn(url)


def _median(entries: list[dict[str, Any]]) -> dict[str, Any]:
    summary = {key: common.median([e[key] for e in entries]) for key in entries[0]}
    summary["rounds"] = [round(e["throughput"], 1) for e in entries]
    return summary


def rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """The table lines of ``bench/run.py``: (benchmark, measured, baseline, ratio, target, verdict)."""
    out: list[tuple[str, str, str, str, str, str]] = []
    for kind, label in (("creates", "Job creates/s"), ("reads", "Job GETs/s")):
        entry = r[kind]
        met = entry.get("met")
        out.append(
            (
                f"{label}, {SERVERS} API servers vs 1",
                f"{entry['3']['throughput']:.0f}/s",
                f"{entry['1']['throughput']:.0f}/s",
                f"{entry['scaling']:.2f}",
                f">= {entry['target_scaling']:.1f}x" if "target_scaling" in entry else "",
                "-" if met is None else ("met" if met else "NOT met"),
            )
        )
    if "watches" in r:
        w = r["watches"]
        out.append(
            (
                f"Job watch events delivered/s to {w['watchers']} watchers, {SERVERS} API servers vs 1",
                f"{w['3']['delivered_per_s']:.0f}/s (p99 {w['3']['p99_ms']:.0f} ms)",
                f"{w['1']['delivered_per_s']:.0f}/s (p99 {w['1']['p99_ms']:.0f} ms)",
                f"{w['scaling']:.2f}",
                f">= {w['target_scaling']:.1f}x",
                "met" if w["met"] else "NOT met",
            )
        )
    one, three = r["lock_probe_1"], r["lock_probe_3"]
    out.append(
        (
            "  rv lock held, % of the time (3 vs 1)",
            f"{three['lock_held_pct']:.0f} %",
            f"{one['lock_held_pct']:.0f} %",
            "",
            "",
            "",
        )
    )
    return out
