"""Job create throughput through the API vs raw asyncpg ``INSERT`` + ``COMMIT`` of the same rows.

API: the lean load generator (``bench.loadgen``, its own process) POSTs Jobs over ``connections``
keep-alive connections to a plain-HTTP ``nodus apiserver``. Raw: a worker process with as many
asyncpg connections INSERTs (autocommit: one INSERT and one COMMIT each) rows of the same shape into
``bench_raw_objects`` (``LIKE objects INCLUDING ALL``: same columns, keys and indexes), each row's
body being the Job as the API stored it (the response to a real create) under a fresh name and uid.
Rounds alternate API and raw (ABBA order); the ratio is of the medians.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from bench import common

_RAW_TABLE = "bench_raw_objects"
_RAW_INSERT = f"""
INSERT INTO {_RAW_TABLE} (kind, namespace, name, uid, rv, labels, phase, owner_uids, deleting, body)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8::text[], $9, $10)
"""


async def _raw_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in its own process: INSERT + COMMIT ``count`` rows over ``connections`` connections."""
    import asyncpg

    template: dict[str, Any] = spec["template"]
    prefix, count, connections = spec["prefix"], int(spec["count"]), int(spec["connections"])
    rv = int(spec["first_rv"])

    def rows(names: list[str]) -> list[tuple[Any, ...]]:
        nonlocal rv
        built: list[tuple[Any, ...]] = []
        for name in names:
            body = common.stored_like(template, name)
            rv += 1
            body["metadata"]["resourceVersion"] = str(rv)
            labels = body["metadata"].get("labels") or {}
            phase = (body.get("status") or {}).get("phase")
            text = orjson.dumps(body).decode()
            uid, encoded_labels = body["metadata"]["uid"], orjson.dumps(labels).decode()
            built.append(("Job", common.PROJECT, name, uid, rv, encoded_labels, phase, [], False, text))
        return built

    warmup = rows([f"{prefix}w{i}" for i in range(int(spec.get("warmup", 0)))])
    measured = rows([f"{prefix}{i}" for i in range(count)])
    pool = await asyncpg.create_pool(spec["dsn"], min_size=connections, max_size=connections)
    try:

        async def drive(batch: list[tuple[Any, ...]]) -> None:
            position = 0

            async def one_connection() -> None:
                nonlocal position
                async with pool.acquire() as conn:
                    while position < len(batch):
                        row = batch[position]
                        position += 1
                        await conn.execute(_RAW_INSERT, *row)

            await asyncio.gather(*(one_connection() for _ in range(connections)))

        await drive(warmup)
        with common.CpuMeter(None) as cpu:
            started = time.perf_counter()
            await drive(measured)
            elapsed = time.perf_counter() - started
    finally:
        await pool.close()
    return {"count": count, "elapsed": elapsed, "throughput": count / elapsed, "cpu": cpu.summary()}


async def _api_round(
    server: common.Server, template: dict[str, Any], prefix: str, count: int, connections: int, warmup: int
) -> dict[str, Any]:
    spec = {
        "endpoint": server.endpoint(),
        "method": "POST",
        "path": common.jobs_path(),
        "template": template,
        "prefix": prefix,
        "count": count,
        "warmup": warmup,
        "connections": connections,
        "expect": 201,
        "server_pid": server.pid,
    }
    result: dict[str, Any] = await common.run_worker("bench.loadgen", spec)
    if result["unexpected"]:
        raise RuntimeError(f"unexpected responses: {result['statuses']}: {result.get('sample')}")
    return result


_WRITE_TRANSACTIONS = """
SELECT state, query FROM pg_stat_activity
WHERE datname = current_database() AND application_name = 'nodus' AND backend_xid IS NOT NULL
"""


async def lock_probe(dsn: str, load: Callable[[], Awaitable[Any]]) -> dict[str, float]:
    """``load()`` (more API creates, not counted in the rounds) while pg_stat_activity is sampled every ~3 ms:
    how much of the time a write transaction (holding ``counters['rv']``) is open, and how much of that
    PostgreSQL spends executing rather than waiting for an API server to send the batch's next statement."""
    import asyncpg

    samples: list[list[str]] = []
    stop = asyncio.Event()

    async def sample() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            while not stop.is_set():
                samples.append([r["state"] for r in await conn.fetch(_WRITE_TRANSACTIONS)])
                await asyncio.sleep(0.003)
        finally:
            await conn.close()

    sampler = asyncio.ensure_future(sample())
    try:
        await load()
    finally:
        stop.set()
        await sampler
    total = len(samples) or 1
    held = sum(1 for s in samples if s)
    active = sum(1 for s in samples if "active" in s)
    return {
        "lock_held_pct": 100 * held / total,
        "postgres_executing_pct": 100 * active / total,
        "waiting_for_server_pct": 100 * (held - active) / total,
    }


async def _raw_round(
    dsn: str, template: dict[str, Any], prefix: str, count: int, connections: int, warmup: int, first_rv: int
) -> dict[str, Any]:
    spec = {
        "dsn": dsn,
        "template": template,
        "prefix": prefix,
        "count": count,
        "warmup": warmup,
        "connections": connections,
        "first_rv": first_rv,
    }
    result: dict[str, Any] = await common.run_worker("bench.create_throughput", spec)
    return result


async def run(
    workdir: Path, rounds: int = 3, count: int = 3000, connections: int = 32, warmup: int = 300, tls: bool = True
) -> dict[str, Any]:
    import asyncpg

    from nodus.storage import database

    server_url = common.database_server_url()
    api: list[dict[str, Any]] = []
    raw: list[dict[str, Any]] = []
    result: dict[str, Any] = {"count": count, "connections": connections, "rounds": rounds}
    async with common.scratch_database(server_url) as db:
        result["postgres"] = await common.postgres_facts(db)
        conn = await asyncpg.connect(database.asyncpg_dsn(db))
        try:
            await conn.execute(f"CREATE TABLE {_RAW_TABLE} (LIKE objects INCLUDING ALL)")
        finally:
            await conn.close()
        async with common.running_server(db, workdir / "create-http") as server:
            await asyncio.to_thread(common.create_project, server)
            template = await asyncio.to_thread(server.json, "POST", common.jobs_path(), common.job_body("template"))
            request_template = common.job_body("x")
            before = await asyncio.to_thread(server.metrics)
            activity = await common.database_activity(db)
            for r in range(rounds):
                order = ("api", "raw") if r % 2 == 0 else ("raw", "api")
                for side in order:
                    if side == "api":
                        with server.profiled(f"create-api-{r}"):
                            api.append(await _api_round(server, request_template, f"a{r}-", count, connections, warmup))
                    else:
                        first_rv = 10_000_000 * (r + 1)
                        raw.append(
                            await _raw_round(
                                database.asyncpg_dsn(db), template, f"r{r}-", count, connections, warmup, first_rv
                            )
                        )
            after = await asyncio.to_thread(server.metrics)
            await asyncio.sleep(1.5)  # PostgreSQL publishes session counts within a second
            activity_after = await common.database_activity(db)
            result["lock_probe"] = await lock_probe(
                database.asyncpg_dsn(db), lambda: _api_round(server, request_template, "probe-", count // 2, 32, 0)
            )
        batches = after["nodus_storage_commit_batches"] - before["nodus_storage_commit_batches"]
        writes = after["nodus_storage_committed_writes"] - before["nodus_storage_committed_writes"]
        result["mean_batch"] = writes / batches if batches else 0.0
        # Sessions opened while the API rounds ran (the raw rounds open `connections` each, and warm-up).
        raw_sessions = len(raw) * connections
        result["sessions_per_1000_api_creates"] = (
            1000 * (activity_after["sessions"] - activity["sessions"] - raw_sessions) / (len(api) * (count + warmup))
        )
        if tls:
            async with common.running_server(db, workdir / "create-https", tls=True) as server:
                tls_rounds = []
                for r in range(max(1, rounds // 2)):
                    tls_rounds.append(await _api_round(server, request_template, f"t{r}-", count, connections, warmup))
                result["api_tls"] = _summarise(tls_rounds)
    result["api"] = _summarise(api)
    result["raw"] = _summarise(raw)
    result["ratio"] = result["api"]["throughput"] / result["raw"]["throughput"]
    result["target"] = 0.40
    result["met"] = result["ratio"] >= result["target"]
    return result


def _summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "throughput": common.median([r["throughput"] for r in rounds]),
        "rounds": [round(r["throughput"], 1) for r in rounds],
    }
    if "latency_p50" in rounds[0]:
        summary["latency_p50_ms"] = 1000 * common.median([r["latency_p50"] for r in rounds])
        summary["latency_p99_ms"] = 1000 * common.median([r["latency_p99"] for r in rounds])
    for key in ("client_cores", "server_cores", "postgres_cores", "machine_cores", "other_cores"):
        summary[key] = common.median([r["cpu"][key] for r in rounds])
    summary["server_cpu_ms_per_create"] = 1000 * common.median(
        [r["cpu"]["server_cores"] / r["throughput"] for r in rounds]
    )
    summary["postgres_cpu_ms_per_create"] = 1000 * common.median(
        [r["cpu"]["postgres_cores"] / r["throughput"] for r in rounds]
    )
    return summary


def main() -> None:
    import uvloop

    spec = common.read_spec()
    common.write_result(spec, uvloop.run(_raw_worker(spec)))


if __name__ == "__main__" and "--worker" in sys.argv:
    main()
