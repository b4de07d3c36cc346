"""Charges posted per second on one project with 500 open holds, vs raw single-row UPDATE+INSERT.

The project's ``held`` account and Nodus's ``revenue`` account are the hot rows: every capture moves
both. Setup: a scratch database (migrated), one project granted credit, ``attempts`` holds opened on it
(as ``attempts`` running attempts would have). Measured: ``workers`` concurrent tasks, each posting
captures (``nodus.billing.ledger.capture``: the whole posting with its idempotency check, account
locks, balance updates, hold update, transaction, entries and charge row) round-robin over the holds,
for ``seconds``. Baseline, same database, same concurrency: a transaction of one ``UPDATE`` of a single
hot balance row and one ``INSERT`` of an entry row, the least a balance-keeping ledger can do per
movement. Ratio = captures/s / baseline/s (target at least 0.5). The ledger is verified afterwards
(``nodus billing verify``'s invariants: no breach).

In-process (``nodus.storage``), so the figure is the ledger's own; through the API each posting adds a
request (measured by the end-to-end latency benchmark).
"""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import asyncpg

from bench import common
from nodus.billing import ledger, money
from nodus.storage import database
from nodus.storage import ledger as tables
from nodus.storage.ledger import Charge
from nodus.storage.objects import Storage

TARGET = 0.5
RATE = Decimal("2.5")


async def _captures(storage: Storage, project: str, attempts: int, workers: int, seconds: float) -> dict[str, Any]:
    await ledger.grant(storage, project, Decimal(1_000_000), f"bench:grant:{project}")
    holds = [f"{project}-hold-{i}" for i in range(attempts)]
    for hold_id in holds:
        await ledger.hold(storage, project, hold_id, Decimal(1000), f"bench:hold:{hold_id}", subject=project)
    posted = 0
    deadline = time.monotonic() + seconds
    latencies: list[float] = []

    async def worker(number: int) -> None:
        nonlocal posted
        n = number
        while time.monotonic() < deadline:
            hold_id = holds[n % attempts]
            amount = money.charge(RATE, Decimal(1))
            started = time.perf_counter()
            await ledger.capture(
                storage, project, hold_id, Charge("Running", Decimal(1), RATE, amount), f"bench:{project}:{n}"
            )
            latencies.append(time.perf_counter() - started)
            posted += 1
            n += workers

    started = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    elapsed = time.monotonic() - started
    latencies.sort()
    return {
        "count": posted,
        "seconds": elapsed,
        "throughput": posted / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000 if latencies else None,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000 if latencies else None,
    }


async def _baseline(url: str, workers: int, seconds: float) -> dict[str, Any]:
    dsn = database.asyncpg_dsn(url)
    setup = await asyncpg.connect(dsn)
    try:
        # Fresh tables each round, so that a round never measures the previous round's bloat.
        await setup.execute(
            "DROP TABLE IF EXISTS bench_balance; DROP TABLE IF EXISTS bench_entries;"
            "CREATE TABLE bench_balance (id int PRIMARY KEY, balance numeric(24, 6) NOT NULL);"
            "CREATE TABLE bench_entries (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, account int, "
            "amount numeric(24, 6));"
            "INSERT INTO bench_balance VALUES (1, 0)"
        )
    finally:
        await setup.close()
    pool = await asyncpg.create_pool(dsn, min_size=workers, max_size=workers)
    done = 0
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done
        async with pool.acquire() as conn:
            while time.monotonic() < deadline:
                async with conn.transaction():
                    await conn.execute("UPDATE bench_balance SET balance = balance + $1 WHERE id = 1", Decimal("0.01"))
                    await conn.execute("INSERT INTO bench_entries (account, amount) VALUES (1, $1)", Decimal("0.01"))
                done += 1

    started = time.monotonic()
    try:
        await asyncio.gather(*(worker() for _ in range(workers)))
    finally:
        await pool.close()
    elapsed = time.monotonic() - started
    return {"count": done, "seconds": elapsed, "throughput": done / elapsed}


async def run(workdir: Path, attempts: int, workers: int, seconds: float, rounds: int) -> dict[str, Any]:
    """``workdir`` is unused (the benchmark keeps nothing on disk); the signature is every benchmark's."""
    results: dict[str, Any] = {"attempts": attempts, "workers": workers, "rounds": []}
    async with common.scratch_database(common.database_server_url()) as url:
        await asyncio.to_thread(database.migrate, url)
        storage = Storage(url, pool_size=workers + 2, compaction_interval=3600)
        await storage.start()
        try:
            for round_number in range(rounds):
                baseline = await _baseline(url, workers, seconds)
                captures = await _captures(storage, f"charges-{round_number}", attempts, workers, seconds)
                results["rounds"].append({"captures": captures, "baseline": baseline})
            results["breaches"] = [b.detail for b in await tables.breaches(storage)]
        finally:
            await storage.stop()
    ordered = sorted(results["rounds"], key=lambda r: r["captures"]["throughput"] / r["baseline"]["throughput"])
    median = ordered[len(ordered) // 2]
    ratio = median["captures"]["throughput"] / median["baseline"]["throughput"]
    results.update(
        captures=median["captures"],
        baseline=median["baseline"],
        ratio=ratio,
        target=TARGET,
        met=ratio >= TARGET and not results["breaches"],
    )
    return results
