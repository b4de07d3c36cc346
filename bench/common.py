"""What every benchmark needs: a scratch database, a real ``nodus apiserver`` process, a token, a
project, realistic Job bodies, worker processes, percentiles, the server's RSS and optional py-spy
profiles of the server.

The PostgreSQL server is ``NODUS_BENCH_DATABASE_URL``, else ``NODUS_TEST_DATABASE_URL``, else the
embedded one the tests use. Each benchmark creates its own database on it and drops it afterwards.

Profiling: with ``NODUS_BENCH_PROFILE_DIR`` set (``python -m bench.run --profile DIR``) and ``py-spy``
on ``PATH`` (or named by ``NODUS_BENCH_PYSPY``), each measured phase of a server is recorded as
collapsed stacks; ``python -m bench.common FILE...`` prints the functions with the most samples.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import resource
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodus.storage import database

ROOT = Path(__file__).resolve().parents[1]
API = "/apis/nodus.dev/v1"
PROJECT = "bench"
NOFILE = 16_384


# --- PostgreSQL -----------------------------------------------------------------------------------


def database_server_url() -> str:
    """The PostgreSQL server the benchmarks create their databases on."""
    url = os.environ.get("NODUS_BENCH_DATABASE_URL") or os.environ.get("NODUS_TEST_DATABASE_URL")
    if url:
        return url
    from tests.support import databases  # the embedded server, started on first use

    return databases.server_url()


def stop_embedded_database() -> None:
    if os.environ.get("NODUS_BENCH_DATABASE_URL") or os.environ.get("NODUS_TEST_DATABASE_URL"):
        return
    from tests.support import databases

    databases.stop()


@contextlib.asynccontextmanager
async def scratch_database(server_url: str) -> AsyncIterator[str]:
    """A fresh, migrated database, dropped however the benchmark ends."""
    url = await database.create_database(server_url, prefix="nodus_bench")
    try:
        await database.migrate_async(url)
        yield url
    finally:
        await database.drop_database(url)


async def free_connections(server_url: str) -> int:
    """How many more connections the server at ``server_url`` accepts now (superuser slots excluded)."""
    import asyncpg

    conn = await asyncpg.connect(database.asyncpg_dsn(server_url))
    try:
        limit = int(await conn.fetchval("SHOW max_connections"))
        reserved = int(await conn.fetchval("SHOW superuser_reserved_connections"))
        used = int(await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"))
    finally:
        await conn.close()
    return limit - reserved - used


@contextlib.asynccontextmanager
async def server_with_connections(server_url: str, needed: int) -> AsyncIterator[str]:
    """``server_url`` when it accepts ``needed`` more connections, else a private PostgreSQL (the embedded
    binaries, a temporary data directory, ``max_connections`` raised to fit), stopped and removed after.

    A shared server is never reconfigured: raising ``max_connections`` needs a restart."""
    if await free_connections(server_url) >= needed:
        yield server_url
        return
    import asyncpg

    directory = Path(tempfile.mkdtemp(prefix="nodus-bench-pg-", dir="/tmp"))  # short: the socket lives here
    embedded = database.EmbeddedPostgres(directory / "data")
    try:
        url = await asyncio.to_thread(embedded.start)
        conn = await asyncpg.connect(database.asyncpg_dsn(url))
        try:
            await conn.execute(f"ALTER SYSTEM SET max_connections = {int(needed) + 50}")
        finally:
            await conn.close()
        await asyncio.to_thread(embedded.stop)  # the setting takes effect on the next start
        url = await asyncio.to_thread(embedded.start)
        yield url
    finally:
        await asyncio.to_thread(embedded.stop)
        shutil.rmtree(directory, ignore_errors=True)


async def postgres_facts(url: str) -> dict[str, str]:
    import asyncpg

    conn = await asyncpg.connect(database.asyncpg_dsn(url))
    try:
        facts = {"version": str(await conn.fetchval("SHOW server_version"))}
        for setting in ("fsync", "synchronous_commit", "shared_buffers", "max_connections"):
            facts[setting] = str(await conn.fetchval(f"SHOW {setting}"))
    finally:
        await conn.close()
    return facts


async def database_activity(url: str) -> dict[str, int]:
    """Counters of this database so far: sessions opened, transactions committed."""
    import asyncpg

    conn = await asyncpg.connect(database.asyncpg_dsn(url))
    try:
        row = await conn.fetchrow(
            "SELECT sessions, xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return {"sessions": int(row["sessions"]), "commits": int(row["xact_commit"])}


# --- processes ------------------------------------------------------------------------------------


def raise_nofile(wanted: int = NOFILE) -> None:
    """Raise this process's soft limit on open files (1,000 watchers need as many sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pyspy() -> str | None:
    return os.environ.get("NODUS_BENCH_PYSPY") or shutil.which("py-spy")


@dataclass
class Server:
    """A running ``nodus apiserver`` process and how to reach it."""

    process: subprocess.Popen[bytes]
    port: int
    token: str
    directory: Path
    ca_file: Path | None = None
    host: str = "127.0.0.1"
    # The controllers' own identity (group system:nodus:controllers), as in production (ADR 0035).
    controllers_token: str = ""
    _profilers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def tls(self) -> bool:
        return self.ca_file is not None

    def client_ssl(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file is not None else None

    def endpoint(self) -> dict[str, Any]:
        """What a worker process needs to reach this server (JSON)."""
        return {
            "host": self.host,
            "port": self.port,
            "token": self.token,
            "ca_file": str(self.ca_file) if self.ca_file else None,
        }

    def logs(self) -> str:
        path = self.directory / "apiserver.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def request(self, method: str, path: str, body: Any = None, timeout: float = 60.0) -> tuple[int, bytes]:
        """One blocking request (setup only: the measured traffic comes from worker processes)."""
        conn: http.client.HTTPConnection
        if self.ca_file is not None:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.client_ssl())
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
            payload = None
            if body is not None:
                payload = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, body: Any = None) -> Any:
        status, data = self.request(method, path, body)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {data[:500]!r}")
        return json.loads(data)

    def metrics(self) -> dict[str, float]:
        """The server's Prometheus samples, keyed by their full name with labels."""
        status, data = self.request("GET", "/metrics")
        if status != 200:
            raise RuntimeError(f"/metrics: HTTP {status}")
        samples: dict[str, float] = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    @contextlib.contextmanager
    def profiled(self, label: str) -> Iterator[None]:
        """Record this phase with py-spy when profiling is on; a no-op otherwise."""
        directory = os.environ.get("NODUS_BENCH_PROFILE_DIR")
        pyspy = _pyspy()
        if not directory or not pyspy:
            yield
            return
        Path(directory).mkdir(parents=True, exist_ok=True)
        output = Path(directory) / f"{label}.txt"
        args = [pyspy, "record", "--pid", str(self.pid), "--format", "raw", "--rate", "250"]
        args += ["-o", str(output)]
        profiler = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._profilers.append(profiler)
        time.sleep(0.5)  # py-spy attaches
        try:
            yield
        finally:
            profiler.send_signal(signal.SIGINT)
            try:
                profiler.wait(timeout=30)
            except subprocess.TimeoutExpired:
                profiler.kill()
                profiler.wait()
            self._profilers.remove(profiler)

    def stop(self) -> None:
        for profiler in self._profilers:
            profiler.kill()
            profiler.wait()
        self._profilers.clear()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(database_url: str, directory: Path, tls: bool = False, extra_args: Sequence[str] = ()) -> Server:
    """Start ``nodus apiserver`` on a free port with an administrator token and the controllers' own, and a
    secret key file (it signs node credentials) unless ``extra_args`` names one; wait until ready."""
    directory.mkdir(parents=True, exist_ok=True)
    token, controllers_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    token_file = directory / "tokens.csv"
    token_file.write_text(
        f'{token},bench,bench-uid,"system:masters"\n'
        f'{controllers_token},nodus-controllers,nodus-controllers,"system:nodus:controllers"\n'
    )
    if "--secret-key-file" not in extra_args:
        from nodus.apimachinery.sealing import Keyring

        key_file = directory / "secret-keys"
        if not key_file.exists():
            Keyring.generate(key_file)
        extra_args = [*extra_args, "--secret-key-file", str(key_file)]
    port = free_port()
    # What-if experiments only: ``NODUS_BENCH_SERVER_PRELUDE`` is Python run in the server process before the
    # unchanged ``nodus apiserver`` starts, e.g. ``import uvloop; uvloop.install()`` (the server itself runs
    # ``asyncio.run`` on the default loop) or ``import gc; gc.set_threshold(50_000, 20, 100)``.
    launcher = ["-m", "nodus.cli.main"]
    prelude = os.environ.get("NODUS_BENCH_SERVER_PRELUDE")
    if prelude:
        launcher = ["-c", f"{prelude}\nimport sys\nfrom nodus.cli.main import main\nmain(sys.argv[1:])"]
    args = [
        sys.executable,
        *launcher,
        "apiserver",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--token-auth-file",
        str(token_file),
        "--blob-store",
        str(directory / "blobs"),
        "--migrate",
        *extra_args,
    ]
    ca_file = None
    if tls:
        from nodus.cli import certificates

        files = certificates.ensure_serving(directory / "pki", ["127.0.0.1", "localhost"])
        args += ["--tls-cert-file", str(files.cert), "--tls-private-key-file", str(files.key)]
        ca_file = files.ca_cert
    else:  # on loopback only, where no one else reads the token: say so, or the server refuses to start
        args.append("--behind-tls-terminator")
    env = {**os.environ, "NODUS_DATABASE_URL": database_url}
    raise_nofile()  # children inherit the limit
    with (directory / "apiserver.log").open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    server = Server(process, port, token, directory, ca_file, controllers_token=controllers_token)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nodus apiserver exited with {process.returncode}:\n{server.logs()}")
        with contextlib.suppress(OSError, http.client.HTTPException):
            if server.request("GET", "/readyz", timeout=2)[0] == 200:
                return server
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"nodus apiserver did not become ready:\n{server.logs()}")


@contextlib.asynccontextmanager
async def running_server(
    database_url: str, directory: Path, tls: bool = False, extra_args: Sequence[str] = ()
) -> AsyncIterator[Server]:
    server = await asyncio.to_thread(start_server, database_url, directory, tls, extra_args)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


@dataclass
class Worker:
    """A worker process: its spec arrives as a JSON line on stdin (which stays open for a ``stop`` line),
    status lines come on stdout, and its result is a JSON file (results can be megabytes)."""

    process: asyncio.subprocess.Process
    result_file: Path

    async def status(self, timeout: float) -> Any:
        """The next status line the worker prints."""
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not line:
            raise RuntimeError("the worker exited before it reported")
        return json.loads(line)

    async def stop(self) -> None:
        """Ask the worker to finish and report now."""
        assert self.process.stdin is not None
        if self.process.returncode is None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.process.stdin.write(b"stop\n")
                await self.process.stdin.drain()

    async def result(self, timeout: float) -> Any:
        try:
            await asyncio.wait_for(self.process.wait(), timeout)
        finally:
            self.kill()
            await self.process.wait()
        try:
            if self.process.returncode != 0:
                raise RuntimeError(f"a worker exited with {self.process.returncode}")
            return json.loads(self.result_file.read_bytes())
        finally:
            self.result_file.unlink(missing_ok=True)

    def kill(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


async def start_worker(module: str, spec: dict[str, Any]) -> Worker:
    """Start ``python -m MODULE --worker`` with ``spec`` (JSON) on its stdin."""
    raise_nofile()  # children inherit the limit
    fd, name = tempfile.mkstemp(prefix="nodus-bench-", suffix=".json")
    os.close(fd)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        "--worker",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdin is not None
    process.stdin.write(json.dumps({**spec, "result_file": name}).encode() + b"\n")
    await process.stdin.drain()
    return Worker(process, Path(name))


async def run_worker(module: str, spec: dict[str, Any], timeout: float = 600.0) -> Any:
    """Run a worker to its end and return its result."""
    worker = await start_worker(module, spec)
    return await worker.result(timeout)


def read_spec() -> dict[str, Any]:
    """A worker's spec: the first line on stdin."""
    spec: dict[str, Any] = json.loads(sys.stdin.readline())
    return spec


def report_status(status: Any) -> None:
    """A status line to the parent (a worker's stdout)."""
    sys.stdout.write(json.dumps(status) + "\n")
    sys.stdout.flush()


def write_result(spec: dict[str, Any], result: Any) -> None:
    Path(spec["result_file"]).write_text(json.dumps(result))


# --- objects --------------------------------------------------------------------------------------


def create_project(server: Server, name: str = PROJECT) -> None:
    """The project, with credit enough that no benchmark Job waits for money."""
    server.json(
        "POST",
        f"{API}/projects",
        {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": name}, "spec": {}},
    )
    server.json("POST", f"{API}/projects/{name}/credits", {"amountUSD": "1000000", "key": "bench"})


def jobs_path(project: str = PROJECT) -> str:
    return f"{API}/namespaces/{project}/jobs"


def job_body(name: str, seq: int | None = None) -> dict[str, Any]:
    """A realistic Job as a user submits it: labels, annotations, env, checkpointing, a cost cap."""
    labels = {"team": "research", "app.kubernetes.io/name": "trainer", "priority": "high"}
    if seq is not None:
        labels["bench-seq"] = str(seq)
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"nodus.dev/description": "nightly fine-tune of the 8B model on the support corpus"},
        },
        "spec": {
            "image": "ghcr.io/example/trainer:1.4",
            "command": ["python", "train.py", "--epochs", "3", "--lr", "3e-5", "--batch-size", "64"],
            "env": [
                {"name": "WANDB_PROJECT", "value": "llama-ft"},
                {"name": "HF_HOME", "value": "/cache/hf"},
                {"name": "NCCL_DEBUG", "value": "WARN"},
            ],
            "completions": 1,
            "resources": {"gpu": {"type": ["H100"], "count": 8}},
            "recovery": {"checkpoint": {"interval": "auto"}},
            "maxCostUSD": "250",
            "expectedDuration": "6h",
        },
    }


def stored_like(template: dict[str, Any], name: str, seq: int | None = None) -> dict[str, Any]:
    """A copy of a stored Job (as the API wrote it) under another name and uid."""
    body: dict[str, Any] = json.loads(json.dumps(template))
    metadata = body["metadata"]
    metadata["name"] = name
    metadata["uid"] = str(uuid.uuid4())
    metadata.pop("resourceVersion", None)
    if seq is not None:
        metadata.setdefault("labels", {})["bench-seq"] = str(seq)
    return body


# --- statistics and memory ------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linearly interpolated; NaN when there are no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def _status_field(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {name} in /proc/{pid}/status")


def rss_kib(pid: int) -> int:
    return _status_field(pid, "VmRSS")


def peak_rss_kib(pid: int) -> int:
    return _status_field(pid, "VmHWM")


def reset_peak_rss(pid: int) -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of a process; False where that is not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU time this process has used (a worker reports it in its result)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def postgres_cpu_seconds() -> float:
    """CPU time used so far by every process named ``postgres`` on this machine (backends, WAL writer...),
    including backends that have exited since (their time is in the postmaster's reaped-children time)."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                text = handle.read()
        except OSError:
            continue
        if "(postgres)" in text:
            fields = text.rpartition(")")[2].split()
            total += sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(values) - idle) / tick, sum(values) / tick


class CpuMeter:
    """CPU used during a block by this process (the client), the server process, PostgreSQL and the
    whole machine (which includes whatever else runs on it)."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.client = self.server = self.postgres = self.machine_busy = self.wall = 0.0

    def __enter__(self) -> CpuMeter:
        self._client = own_cpu_seconds()
        self._server = cpu_seconds(self.pid) if self.pid else 0.0
        self._postgres = postgres_cpu_seconds()
        self._busy, _ = machine_cpu()
        self._wall = time.monotonic()
        return self

    def __exit__(self, *_: object) -> None:
        self.wall = time.monotonic() - self._wall
        self.client = own_cpu_seconds() - self._client
        self.server = (cpu_seconds(self.pid) if self.pid else 0.0) - self._server
        self.postgres = postgres_cpu_seconds() - self._postgres
        self.machine_busy = machine_cpu()[0] - self._busy

    def summary(self) -> dict[str, float]:
        """CPU in cores (CPU seconds per wall second)."""
        wall = self.wall or 1.0
        return {
            "client_cores": self.client / wall,
            "server_cores": self.server / wall,
            "postgres_cores": self.postgres / wall,
            "machine_cores": self.machine_busy / wall,
            # whatever else ran meanwhile (other processes on a shared machine): noise to watch for
            "other_cores": max(0.0, self.machine_busy - self.client - self.server - self.postgres) / wall,
        }


class RssSampler:
    """Samples a process's RSS every ``interval`` seconds in a thread; ``peak`` is the highest seen."""

    def __init__(self, pid: int, interval: float = 0.002) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._stop = False
        self._thread: Any = None

    def __enter__(self) -> RssSampler:
        import threading

        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop = True
        self._thread.join()

    def _run(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(self.interval)


# --- profiles -------------------------------------------------------------------------------------

# Where the server's time goes, by area: the first rule matching a frame, from the leaf up, names it.
AREAS = (
    ("socket send (write syscall)", "_SelectorSocketTransport.write"),
    ("idle (epoll)", "EpollSelector.select"),
    ("managedFields", "nodus/api/fieldmanagement"),
    ("project lookup (GenericStore._admit)", "GenericStore._admit"),
    ("Job defaults (prepare_for_create)", "prepare_for_create"),
    ("validation (GenericStore._validate)", "GenericStore._validate"),
    ("body decoding, field check", "_body (nodus/api/http/resources.py"),
    ("group commit (storage/committing)", "nodus/storage/committing"),
    ("watch cache pump", "WatchCache._pump"),
    ("watch: wait for the next event (wait_for, shield)", "WatchCache.stream"),
    ("prometheus metrics", "prometheus_client"),
    ("watch: body() generator, filter, encode", "respond_watch.<locals>.body"),
    ("list: stream body() (encode, join)", "_stream.<locals>.body"),
    ("ASGI / HTTP (uvicorn, starlette, fastapi, middleware)", "uvicorn/"),
    ("ASGI / HTTP (uvicorn, starlette, fastapi, middleware)", "starlette/"),
    ("ASGI / HTTP (uvicorn, starlette, fastapi, middleware)", "fastapi/"),
    ("asyncpg (other)", "asyncpg/"),
)


def _stacks(path: Path) -> Iterator[tuple[list[str], int]]:
    """py-spy's collapsed stacks of the main thread (worker threads idle in the thread pool are left out)."""
    for line in path.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if stack and "Thread._bootstrap" not in stack:
            yield stack.split(";"), int(samples)


def areas(path: Path) -> list[tuple[str, float]]:
    """Share of the main thread's samples per area (``AREAS``); the rest is the event loop itself."""
    counts: Counter[str] = Counter()
    total = 0
    for frames, n in _stacks(path):
        total += n
        area = "event loop, other"
        for frame in reversed(frames):
            found = next((name for name, marker in AREAS if marker in frame), None)
            if found is not None:
                area = found
                break
        counts[area] += n
    return [(area, 100 * n / total) for area, n in counts.most_common()] if total else []


def top_functions(path: Path, count: int = 25) -> list[tuple[str, float, float]]:
    """From py-spy's collapsed stacks: (function, self %, inclusive %) for the busiest functions."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for frames, n in _stacks(path):
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return []
    return [(frame, 100 * n / total, 100 * inclusive[frame] / total) for frame, n in own.most_common(count)]


def main(argv: list[str]) -> None:
    for name in argv:
        print(f"== {name}: by area")
        for area, pct in areas(Path(name)):
            print(f"{pct:6.1f}%  {area}")
        print(f"== {name}: busiest functions")
        for frame, own_pct, incl_pct in top_functions(Path(name)):
            print(f"{own_pct:6.1f}% self {incl_pct:6.1f}% incl  {frame}")


if __name__ == "__main__":
    main(sys.argv[1:])


# --- API clients (controllers, agents, in-process scheduler) ---------------------------------------


def client_config(server: Server) -> Any:
    """A ``nodus.client.ClientConfig`` for this server's administrator token (plain HTTP or HTTPS)."""
    from nodus.client import ClientConfig

    scheme = "https" if server.tls else "http"
    ca_file = str(server.ca_file) if server.ca_file else None
    return ClientConfig(server=f"{scheme}://{server.host}:{server.port}", token=server.token, ca_file=ca_file)


def write_kubeconfig(server: Server, path: Path, namespace: str = PROJECT, *, admin: bool = False) -> Path:
    """A kubeconfig for ``nodus controllers`` (their own token) and ``nodus agent`` processes (which take only the
    server and CA from it and join with a bootstrap token); ``admin``: the administrator's, for the CLI."""
    scheme = "https" if server.tls else "http"
    cluster: dict[str, Any] = {"server": f"{scheme}://{server.host}:{server.port}"}
    if server.ca_file is not None:
        cluster["certificate-authority"] = str(server.ca_file)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "bench", "cluster": cluster}],
        "users": [{"name": "bench", "user": {"token": server.token if admin else server.controllers_token}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench", "namespace": namespace}}],
        "current-context": "bench",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))  # JSON is YAML
    path.chmod(0o600)
    return path


def spread(values: Sequence[float]) -> tuple[float, float]:
    """(min, max) of the rounds' values, for reporting a median with its spread."""
    return (min(values), max(values)) if values else (float("nan"), float("nan"))
