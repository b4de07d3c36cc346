"""LIST of 10,000 Jobs in one project vs raw ``SELECT body`` + orjson, and the server's RSS under
1 vs 8 concurrent lists.

The Jobs are stored exactly as the server writes them (defaults, managedFields, status): 200 through
the API, the rest as copies of one of those (own name and uid) through ``Storage.create``.

Latency: the load generator (its own process) times one unpaged JSON ``GET .../namespaces/bench/jobs``
from the request's first byte to the response's last byte. Raw, in this process, on one connected
asyncpg connection: the list's REPEATABLE READ transaction, the rv counter and ``SELECT body FROM
objects WHERE kind = 'Job' AND namespace = 'bench' ORDER BY namespace, name``, then ``orjson.dumps``
of the list document with the bodies embedded as ``orjson.Fragment`` (no re-decoding: the server too
serves stored bytes); ``raw_decode`` decodes and re-encodes every body instead, for context. Rounds
alternate (ABBA); medians are reported.

Memory: for each concurrency (1, 8) a fresh server serves one list (warm-up), then its RSS is the
baseline; ``c`` lists run at once while a thread samples ``/proc/PID/status`` every 2 ms (and the
kernel's peak mark, reset before, is read after); growth is the peak minus the baseline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench import common

_RAW_SELECT = "SELECT body FROM objects WHERE kind = 'Job' AND namespace = $1 ORDER BY namespace, name"


async def _populate(server: common.Server, db: str, jobs: int, through_api: int = 200) -> None:
    """The first ``through_api`` Jobs through the API; the rest through ``Storage.create`` (the server's own
    write path: group commit, resourceVersions, watch log) as copies of a Job the API stored, each with
    its own name and uid: creating 10,000 through the API alone takes minutes on two cores."""
    from nodus.storage.errors import Key
    from nodus.storage.objects import Storage

    spec = {
        "endpoint": server.endpoint(),
        "method": "POST",
        "path": common.jobs_path(),
        "template": common.job_body("x"),
        "prefix": "job-api-",
        "count": through_api,
        "connections": 16,
        "expect": 201,
    }
    result = await common.run_worker("bench.loadgen", spec, timeout=900)
    if result["unexpected"]:
        raise RuntimeError(f"creating the Jobs failed: {result['statuses']}: {result.get('sample')}")
    template = await asyncio.to_thread(server.json, "GET", f"{common.jobs_path()}/job-api-0")
    storage = Storage(db, pool_size=4)
    await storage.start()
    try:
        names = iter(f"job-{i:05d}" for i in range(jobs - through_api))

        async def writer() -> None:
            for name in names:
                await storage.create(Key("Job", common.PROJECT, name), common.stored_like(template, name))

        await asyncio.gather(*(writer() for _ in range(64)))
    finally:
        await storage.stop()


async def _api_lists(server: common.Server, concurrent: int, check: bool = False) -> dict[str, Any]:
    spec = {
        "endpoint": server.endpoint(),
        "method": "GET",
        "path": common.jobs_path(),
        "count": concurrent,
        "connections": concurrent,
        "expect": 200,
        "count_items": check,
        "server_pid": server.pid,
    }
    result: dict[str, Any] = await common.run_worker("bench.loadgen", spec)
    if result["unexpected"]:
        raise RuntimeError(f"list failed: {result['statuses']}: {result.get('sample')}")
    return result


async def _raw_list(dsn: str, mode: str) -> dict[str, Any]:
    """``fragment``: the baseline; ``decode``: bodies decoded and re-encoded; ``cursor``: the server's own
    access pattern without HTTP (a cursor fetching 500 rows at a time, bodies encoded and joined per batch)."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        await conn.fetchval("SELECT 1")  # connected and warm: only the query and the encoding are timed
        started = time.perf_counter()
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            rv = await conn.fetchval("SELECT value FROM counters WHERE key = 'rv'")
            if mode == "cursor":
                chunks, batch, count = [], [], 0
                async for record in conn.cursor(_RAW_SELECT, common.PROJECT, prefetch=500):
                    batch.append(record[0])
                    if len(batch) == 500:
                        chunks.append(b",".join(body.encode() for body in batch))
                        count, batch = count + len(batch), []
                if batch:
                    chunks.append(b",".join(body.encode() for body in batch))
                    count += len(batch)
                document = b'{"items":[' + b",".join(chunks) + b"]}"
                return {"elapsed": time.perf_counter() - started, "bytes": len(document), "items": count}
            records = await conn.fetch(_RAW_SELECT, common.PROJECT)
        convert: Callable[[str], Any] = orjson.loads if mode == "decode" else orjson.Fragment
        items = [convert(r[0]) for r in records]
        document = orjson.dumps(
            {"kind": "JobList", "apiVersion": "nodus.dev/v1", "metadata": {"resourceVersion": str(rv)}, "items": items}
        )
        elapsed = time.perf_counter() - started
    finally:
        await conn.close()
    return {"elapsed": elapsed, "bytes": len(document), "items": len(records)}


async def _memory(db: str, workdir: Path, concurrent: int, label: str) -> dict[str, Any]:
    async with common.running_server(db, workdir / label) as server:
        await _api_lists(server, 1)  # warm-up: code paths, prepared statements, allocator arenas
        await asyncio.sleep(0.5)
        base = server.rss_kib()
        hwm_reset = common.reset_peak_rss(server.pid)
        with common.RssSampler(server.pid) as sampler:
            result = await _api_lists(server, concurrent)
        peak = max(sampler.peak, common.peak_rss_kib(server.pid) if hwm_reset else 0)
        return {
            "concurrent": concurrent,
            "base_mib": base / 1024,
            "peak_mib": peak / 1024,
            "growth_mib": (peak - base) / 1024,
            "latency_p50_s": result["latency_p50"],
            "latency_max_s": max(result["latency_p50"], result["latency_p99"]),
        }


async def run(
    workdir: Path, jobs: int = 10_000, rounds: int = 7, memory_rounds: int = 3, concurrency: tuple[int, ...] = (1, 8)
) -> dict[str, Any]:
    from nodus.storage import database

    server_url = common.database_server_url()
    api: list[dict[str, Any]] = []
    raw: list[dict[str, Any]] = []
    raw_decode: list[dict[str, Any]] = []
    raw_cursor: list[dict[str, Any]] = []
    memory: dict[int, list[dict[str, Any]]] = {c: [] for c in concurrency}
    result: dict[str, Any] = {"jobs": jobs, "rounds": rounds}
    async with common.scratch_database(server_url) as db:
        result["postgres"] = await common.postgres_facts(db)
        dsn = database.asyncpg_dsn(db)
        async with common.running_server(db, workdir / "list") as server:
            await asyncio.to_thread(common.create_project, server)
            populated = time.perf_counter()
            await _populate(server, db, jobs)
            result["populate_s"] = time.perf_counter() - populated
            check = await _api_lists(server, 1, check=True)
            result["items"], result["list_bytes"] = check.get("items"), check["bytes"]
            if result["items"] != jobs:
                raise RuntimeError(f"the list holds {result['items']} items, not {jobs}")
            await _raw_list(dsn, "fragment")  # warm the table into shared buffers alike
            for r in range(rounds):
                order = ("api", "raw") if r % 2 == 0 else ("raw", "api")
                for side in order:
                    if side == "api":
                        with server.profiled(f"list-{r}"):
                            api.append(await _api_lists(server, 1))
                    else:
                        raw.append(await _raw_list(dsn, "fragment"))
                        raw_decode.append(await _raw_list(dsn, "decode"))
                        raw_cursor.append(await _raw_list(dsn, "cursor"))
        for r in range(memory_rounds):
            for c in concurrency if r % 2 == 0 else tuple(reversed(concurrency)):
                memory[c].append(await _memory(db, workdir, c, f"memory-{c}-{r}"))
    result["api_s"] = common.median([a["elapsed"] for a in api])
    result["api_rounds_s"] = [round(a["elapsed"], 4) for a in api]
    for who in ("server", "postgres", "client"):
        result[f"api_{who}_cpu_s"] = common.median([a["cpu"][f"{who}_cores"] * a["elapsed"] for a in api])
    result["raw_s"] = common.median([r["elapsed"] for r in raw])
    result["raw_rounds_s"] = [round(r["elapsed"], 4) for r in raw]
    result["raw_decode_s"] = common.median([r["elapsed"] for r in raw_decode])
    result["raw_cursor_s"] = common.median([r["elapsed"] for r in raw_cursor])
    result["ratio"] = result["api_s"] / result["raw_s"]
    result["target"] = 1.5
    result["met"] = result["ratio"] <= result["target"]
    result["memory"] = {
        str(c): {
            key: common.median([m[key] for m in memory[c]])
            for key in ("base_mib", "peak_mib", "growth_mib", "latency_p50_s", "latency_max_s")
        }
        | {"growth_rounds_mib": [round(m["growth_mib"], 1) for m in memory[c]]}
        for c in concurrency
    }
    if 1 in memory and 8 in memory:
        one, eight = result["memory"]["1"]["growth_mib"], result["memory"]["8"]["growth_mib"]
        result["memory_growth_8_vs_1"] = eight / one if one > 0 else float("inf")
    return result
