"""Watch delivery latency, commit to bytes at the client, vs raw LISTEN/NOTIFY to as many listeners.

API: the writer is ``nodus.storage.objects.Storage`` in this process (a second Nodus process on the
same database, as several API servers would be): ``Storage.create`` returns once the batch holding
the write has COMMITted, and the writer takes that instant as the commit time. Each Job carries a
``bench-seq`` label. Watchers are raw sockets (an ``asyncio.Protocol`` each, no HTTP client object)
spread over one or more worker processes; each decodes the chunked stream and timestamps every
event when the bytes completing its line arrive. Clocks are ``CLOCK_MONOTONIC`` (one clock for every
process of the machine).

Raw, for N watchers: N asyncpg connections that LISTEN, in the same worker processes as N watchers
would be; the writer sends ``SELECT pg_notify(channel, seq)`` in a transaction and takes the instant its
COMMIT returned. PostgreSQL wakes every listening backend, and each sends the notification to its client:
the same fan-out, done by the database.

Floor (for context, no database): this process writes each event's bytes, already in memory, to every
watcher's transport in one loop on plain asyncio, to the same watcher processes over the same kind of
sockets: what any one-process asyncio server costs at best, from "event known" to bytes at the client.

Writes are paced so that latency, not queueing, is measured (see ``run``); the first ``skip`` events
of a round are warm-up. Rounds interleave raw and API; each figure is the median over rounds (the
``pooled_*`` figures pool every round's samples).
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from pathlib import Path
from typing import Any, cast

import orjson

from bench import common

RAW_CHANNEL = "nodus_bench_raw"
_SEQ = b'"bench-seq":"'


# --- worker processes -----------------------------------------------------------------------------


class _Watch(asyncio.Protocol):
    """One watch: a socket, a chunked-stream decoder and the arrival time of every event."""

    def __init__(self, request: bytes, expected: int, arrivals: list[tuple[int, int]], finished: Any) -> None:
        self.request = request
        self.expected = expected
        self.arrivals = arrivals
        self.finished = finished
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.buffer = bytearray()
        self.payload = bytearray()
        self.need: int | None = None
        self.headers = False
        self.seen = 0
        self.errors: list[str] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        self.transport.write(self.request)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"watch closed before its headers: {exc}"))
        if self.seen < self.expected:
            self.errors.append(f"closed after {self.seen} events")
            self.finished(self)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        buffer = self.buffer
        buffer += data
        if not self.headers:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end])
            del buffer[: end + 4]
            self.headers = True
            if head[9:12] != b"200" or b"chunked" not in head.lower():
                self.ready.set_exception(RuntimeError(f"watch refused: {head[:200]!r}"))
                return
            self.ready.set_result(None)
        while True:
            if self.need is None:
                end = buffer.find(b"\r\n")
                if end < 0:
                    return
                size = int(bytes(buffer[:end]).split(b";", 1)[0], 16)
                del buffer[: end + 2]
                if size == 0:
                    return
                self.need = size
            if len(buffer) < self.need + 2:
                return
            self.payload += buffer[: self.need]
            del buffer[: self.need + 2]
            self.need = None
            self._lines(now)

    def _lines(self, now: int) -> None:
        payload = self.payload
        while (end := payload.find(b"\n")) >= 0:
            line = bytes(payload[:end])
            del payload[: end + 1]
            start = line.find(_SEQ)
            if start < 0:
                if line.startswith(b'{"type":"ERROR"'):
                    self.errors.append(line[:300].decode(errors="replace"))
                continue
            start += len(_SEQ)
            self.arrivals.append((int(line[start : line.index(b'"', start)]), now))
            self.seen += 1
            if self.seen == self.expected:
                self.finished(self)


async def _stdin_closed() -> None:
    """Returns when the parent writes a line or closes our stdin: time to report."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.readline()


async def _api_watchers(spec: dict[str, Any]) -> dict[str, Any]:
    endpoint, count, expected = spec["endpoint"], int(spec["count"]), int(spec["expected"])
    host = f"{endpoint['host']}:{endpoint['port']}"
    request = (
        f"GET {spec['path']} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {endpoint['token']}\r\n"
        "Accept: application/json\r\nUser-Agent: nodus-bench/1\r\n\r\n"
    ).encode()
    context: ssl.SSLContext | None = None
    if endpoint.get("ca_file"):
        context = ssl.create_default_context(cafile=endpoint["ca_file"])
    loop = asyncio.get_running_loop()
    arrivals: list[tuple[int, int]] = []
    all_done = loop.create_future()
    remaining = count

    def finished(_: _Watch) -> None:
        nonlocal remaining
        remaining -= 1
        if remaining == 0 and not all_done.done():
            all_done.set_result(None)

    watches: list[_Watch] = []
    for start in range(0, count, 100):  # connect in steps: the accept backlog stays small
        batch = [_Watch(request, expected, arrivals, finished) for _ in range(start, min(count, start + 100))]
        await asyncio.gather(
            *(loop.create_connection(lambda w=w: w, endpoint["host"], endpoint["port"], ssl=context) for w in batch)
        )
        await asyncio.gather(*(w.ready for w in batch))
        watches += batch
    common.report_status({"ready": True})
    stop = asyncio.ensure_future(_stdin_closed())
    await asyncio.wait({stop, all_done}, timeout=float(spec["deadline"]), return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    for watch in watches:
        if watch.transport is not None:
            watch.transport.close()
    return {
        "arrivals": arrivals,
        "complete": sum(1 for w in watches if w.seen >= expected),
        "errors": [e for w in watches for e in w.errors][:5],
        "cpu": common.own_cpu_seconds(),
    }


async def _raw_listeners(spec: dict[str, Any]) -> dict[str, Any]:
    """``count`` asyncpg connections, each LISTENing on the raw channel; an arrival per connection and event."""
    import asyncpg

    arrivals: list[tuple[int, int]] = []
    count, expected = int(spec["count"]), int(spec["expected"])
    seen: list[int] = [0] * count
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    remaining = count

    def listener(index: int) -> Any:
        def received(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            nonlocal remaining
            arrivals.append((int(payload), time.monotonic_ns()))
            seen[index] += 1
            if seen[index] == expected:
                remaining -= 1
                if remaining == 0 and not done.done():
                    done.set_result(None)

        return received

    connections: list[Any] = []
    try:
        for start in range(0, count, 50):  # connect in steps: PostgreSQL forks a backend for each
            batch = await asyncio.gather(*(asyncpg.connect(spec["dsn"]) for _ in range(start, min(count, start + 50))))
            connections += batch
        for index, conn in enumerate(connections):
            await conn.add_listener(RAW_CHANNEL, listener(index))
        common.report_status({"ready": True})
        stop = asyncio.ensure_future(_stdin_closed())
        await asyncio.wait({stop, done}, timeout=float(spec["deadline"]), return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
    finally:
        await asyncio.gather(*(conn.close() for conn in connections), return_exceptions=True)
    return {
        "arrivals": arrivals,
        "complete": sum(1 for n in seen if n >= expected),
        "errors": [],
        "cpu": common.own_cpu_seconds(),
    }


def main() -> None:
    import uvloop

    common.raise_nofile()
    spec = common.read_spec()
    work = _raw_listeners(spec) if spec["mode"] == "raw" else _api_watchers(spec)
    common.write_result(spec, uvloop.run(work))


# --- the orchestrator -----------------------------------------------------------------------------


async def start_listeners(specs: list[dict[str, Any]]) -> list[common.Worker]:
    workers: list[common.Worker] = []
    try:
        for spec in specs:
            workers.append(await common.start_worker("bench.watch_latency", spec))
        for worker in workers:
            if not (await worker.status(120)).get("ready"):
                raise RuntimeError("a watcher process did not get ready")
    except BaseException:
        for worker in workers:
            worker.kill()
            await worker.process.wait()
        raise
    return workers


async def collect(workers: list[common.Worker], grace: float) -> list[dict[str, Any]]:
    """Give the watchers ``grace`` seconds to finish on their own, then ask them to report."""
    await asyncio.wait([asyncio.ensure_future(w.process.wait()) for w in workers], timeout=grace)
    for worker in workers:
        await worker.stop()
    return [await worker.result(60) for worker in workers]


def latencies(commits: dict[int, int], results: list[dict[str, Any]], skip: set[int]) -> dict[str, Any]:
    per_event_max: dict[int, float] = {}
    values: list[float] = []
    for result in results:
        for seq, arrived in result["arrivals"]:
            if seq in skip or seq not in commits:
                continue
            latency = (arrived - commits[seq]) / 1e6
            values.append(latency)
            per_event_max[seq] = max(per_event_max.get(seq, latency), latency)
    return {
        "samples": len(values),
        "p50_ms": common.percentile(values, 50),
        "p99_ms": common.percentile(values, 99),
        "max_ms": max(values) if values else float("nan"),
        "last_watcher_p50_ms": common.percentile(list(per_event_max.values()), 50),
        "complete": sum(r["complete"] for r in results),
        "errors": [e for r in results for e in r["errors"]][:5],
        "values": values,
    }


async def _paced(count: int, interval: float, write: Any) -> dict[int, int]:
    """Call ``write(i)`` every ``interval`` seconds; it returns the event's seq, or (seq, commit time)
    when it knows the instant better than "when it returned"."""
    commits: dict[int, int] = {}
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.2
    for i in range(count):
        await asyncio.sleep(max(0.0, start + i * interval - loop.time()))
        done = await write(i)
        seq, at = done if isinstance(done, tuple) else (done, time.monotonic_ns())
        commits[seq] = at
    return commits


class _FloorConnection(asyncio.Protocol):
    """The floor server's side of one watch: answers the request line with chunked-response headers."""

    def __init__(self, transports: list[asyncio.Transport]) -> None:
        self.transports = transports
        self.request = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.request += data
        if self.request and b"\r\n\r\n" in self.request:
            self.request = b""
            self.transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            self.transports.append(self.transport)


async def _floor_round(
    template: dict[str, Any], watchers: int, processes: int, events: int, interval: float, skip: int
) -> dict[str, Any]:
    """The floor of any one-process asyncio server: the event's bytes already in memory, one framed
    chunk written to every watcher's transport in a loop (what Nodus's fan-out does, minus everything
    else). Latency is from the start of that loop to the bytes at the client, over the same TCP sockets
    and the same watcher processes."""
    loop = asyncio.get_running_loop()
    transports: list[asyncio.Transport] = []
    floor = await loop.create_server(lambda: _FloorConnection(transports), "127.0.0.1", 0)
    port = floor.sockets[0].getsockname()[1]
    endpoint = {"host": "127.0.0.1", "port": port, "token": "-", "ca_file": None}
    specs = []
    for p in range(processes):
        share = watchers // processes + (1 if p < watchers % processes else 0)
        spec = {"mode": "api", "endpoint": endpoint, "path": "/floor", "count": share, "expected": events}
        specs.append(spec | {"deadline": events * interval + 120})
    try:
        running = await start_listeners(specs)

        async def write(i: int) -> tuple[int, int]:
            body = common.stored_like(template, f"floor-{i}", seq=i)
            line = b'{"type":"ADDED","object":' + orjson.dumps(body) + b"}\n"
            chunk = b"%x\r\n%s\r\n" % (len(line), line)
            started = time.monotonic_ns()
            for transport in transports:
                transport.write(chunk)
            return i, started

        with common.CpuMeter(None) as cpu:
            commits = await _paced(events, interval, write)
            results = await collect(running, 30)
    finally:
        floor.close()
        for transport in transports:
            transport.close()
    summary = latencies(commits, results, set(range(skip)))
    summary["server_cpu_ms_per_event"] = 1000 * cpu.client / events  # the floor server is this process
    return summary


async def _raw_round(
    dsn: str, listeners: int, processes: int, events: int, interval: float, skip: int
) -> dict[str, Any]:
    """Raw LISTEN/NOTIFY: ``listeners`` connections in ``processes`` worker processes, each NOTIFY
    committed in its own transaction; latency from the COMMIT's return to each connection's callback."""
    import asyncpg

    specs = []
    for p in range(processes):
        share = listeners // processes + (1 if p < listeners % processes else 0)
        specs.append(
            {"mode": "raw", "dsn": dsn, "count": share, "expected": events, "deadline": events * interval + 60}
        )
    running = await start_listeners(specs)
    conn = await asyncpg.connect(dsn)
    try:

        async def write(i: int) -> int:
            async with conn.transaction():
                await conn.execute("SELECT pg_notify($1, $2)", RAW_CHANNEL, str(i))
            return i

        with common.CpuMeter(None) as cpu:
            commits = await _paced(events, interval, write)
            results = await collect(running, 10)
    finally:
        await conn.close()
    summary = latencies(commits, results, set(range(skip)))
    summary["postgres_cpu_ms_per_event"] = 1000 * cpu.postgres / events
    return summary


async def _api_round(
    server: common.Server,
    storage: Any,
    template: dict[str, Any],
    watchers: int,
    processes: int,
    events: int,
    interval: float,
    skip: int,
    label: str,
) -> dict[str, Any]:
    from nodus.storage.errors import Key

    rv = await storage.current_rv()
    path = f"{common.jobs_path()}?watch=true&resourceVersion={rv}&timeoutSeconds=900"
    specs = []
    for p in range(processes):
        share = watchers // processes + (1 if p < watchers % processes else 0)
        specs.append(
            {
                "mode": "api",
                "endpoint": server.endpoint(),
                "path": path,
                "count": share,
                "expected": events,
                "deadline": events * interval + 120,
            }
        )
    running = await start_listeners(specs)
    before = await asyncio.to_thread(server.metrics)

    async def write(i: int) -> int:
        name = f"{label}-{i}"
        await storage.create(Key("Job", common.PROJECT, name), common.stored_like(template, name, seq=i))
        return i

    with server.profiled(f"watch-{label}"), common.CpuMeter(server.pid) as cpu:
        commits = await _paced(events, interval, write)
        results = await collect(running, 30)
    after = await asyncio.to_thread(server.metrics)
    summary = latencies(commits, results, set(range(skip)))
    sent = 'nodus_apiserver_watch_events_sent_total{resource="jobs"}'
    summary["events_sent"] = after.get(sent, 0) - before.get(sent, 0)
    summary["events_read"] = after["nodus_watch_cache_resource_version"] - before["nodus_watch_cache_resource_version"]
    summary["server_cores"] = cpu.summary()["server_cores"]
    summary["server_cpu_ms_per_event"] = 1000 * cpu.server / events
    return summary


def _watcher_processes(watchers: int) -> int:
    return 1 if watchers <= 200 else 2


async def run(
    workdir: Path,
    watcher_counts: tuple[int, ...] = (1, 100, 1000),
    rounds: int = 3,
    events: int = 120,
    interval: float = 0.1,
    large_from: int = 500,
    large_events: int = 60,
    large_interval: float = 0.25,
    floor_events: int = 40,
    skip: int = 5,
) -> dict[str, Any]:
    """For each N in ``watcher_counts``: raw NOTIFY to N LISTEN connections, the API to N watchers and
    the floor to N sockets, interleaved, ``rounds`` times. 1 or 100: ``events`` writes ``interval``
    apart; ``large_from`` and more: ``large_events`` writes ``large_interval`` apart (fanning one event
    out to 1,000 watchers costs the server tens of ms of CPU, so 10 writes/s would measure queueing).

    N LISTEN connections need N PostgreSQL backends: when the configured server has too few free
    connections, the whole benchmark (raw and API alike) runs on a private PostgreSQL sized for them."""
    from nodus.storage import database
    from nodus.storage.objects import Storage

    def pacing(watchers: int) -> tuple[int, float]:
        return (large_events, large_interval) if watchers >= large_from else (events, interval)

    raw: dict[int, list[dict[str, Any]]] = {n: [] for n in watcher_counts}
    api: dict[int, list[dict[str, Any]]] = {n: [] for n in watcher_counts}
    floor: dict[int, list[dict[str, Any]]] = {n: [] for n in watcher_counts}
    configured = common.database_server_url()
    async with (
        common.server_with_connections(configured, max(watcher_counts) + 40) as server_url,
        common.scratch_database(server_url) as db,
    ):
        postgres = await common.postgres_facts(db)
        postgres["private"] = str(server_url != configured)
        async with common.running_server(db, workdir / "watch") as server:
            await asyncio.to_thread(common.create_project, server)
            template = await asyncio.to_thread(server.json, "POST", common.jobs_path(), common.job_body("template"))
            storage = Storage(db, pool_size=4)
            await storage.start()
            try:
                for r in range(rounds):
                    for n in watcher_counts:
                        count, every = pacing(n)
                        processes = _watcher_processes(n)
                        raw[n].append(await _raw_round(database.asyncpg_dsn(db), n, processes, count, every, skip))
                        api[n].append(
                            await _api_round(server, storage, template, n, processes, count, every, skip, f"w{r}-{n}")
                        )
                        floor[n].append(await _floor_round(template, n, processes, floor_events, every, skip))
            finally:
                await storage.stop()
    result: dict[str, Any] = {"rounds": rounds, "postgres": postgres}
    result["raw"] = {str(n): _median_of(raw[n]) for n in watcher_counts}
    result["api"] = {str(n): _median_of(api[n]) for n in watcher_counts}
    result["floor"] = {str(n): _median_of(floor[n]) for n in watcher_counts}
    targets = {1: None, 100: 2.0, 1000: 3.0}
    for n in watcher_counts:
        entry, baseline = result["api"][str(n)], result["raw"][str(n)]
        entry["events"], entry["interval_s"] = pacing(n)
        baseline["events"], baseline["interval_s"] = pacing(n)
        entry["p99_ratio"] = entry["p99_ms"] / baseline["p99_ms"]
        entry["p50_ratio"] = entry["p50_ms"] / baseline["p50_ms"]
        entry["p99_vs_floor"] = entry["p99_ms"] / result["floor"][str(n)]["p99_ms"]
        # the event rate at which fanning out alone would take the server's whole core
        entry["max_events_per_s"] = (
            1000 / entry["server_cpu_ms_per_event"] if entry["server_cpu_ms_per_event"] else None
        )
        target = targets.get(n)
        entry["target_p99_ratio"] = target
        entry["met"] = None if target is None else entry["p99_ratio"] <= target
        entry["floor_met"] = None if target is None else entry["p99_vs_floor"] <= 1.5
    return result


def _median_of(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for key, value in rounds[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            summary[key] = common.median([r[key] for r in rounds])
    pooled = [v for r in rounds for v in r["values"]]
    summary["pooled_p50_ms"] = common.percentile(pooled, 50)
    summary["pooled_p99_ms"] = common.percentile(pooled, 99)
    summary["p99_rounds_ms"] = [round(r["p99_ms"], 2) for r in rounds]
    summary["errors"] = [e for r in rounds for e in r.get("errors", [])][:5]
    return summary


if __name__ == "__main__" and "--worker" in sys.argv:
    main()
