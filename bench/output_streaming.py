"""A large Job output streamed through real processes: upload and download MB/s and peak memory, vs the disk
and PostgreSQL of the same machine.

Setup: a ``nodus apiserver`` (plain HTTP, ``--secret-key-file``) on a scratch database and a ``nodus
controllers`` process with the simulated cloud and the test suite's flags (``tests/support/controllers.py``
``TEST_FLAGS``, as ``CONTROLLER_FLAGS``): every host is a real ``nodus agent`` running programs in bubblewrap.

A warm-up Job (a 1 MiB output, ``scaledownWindow: 10m``) boots one ``cpu-8c-us`` host and warms the upload
path; every measured Job then reuses that host and its agent. A measured Job's program
(``/usr/bin/python3``, the host's) writes ``size`` bytes of ``os.urandom`` in 1 MiB pieces to
``/nodus/scratch/big.bin``, prints ``time.time()`` when the file is closed and declares
``outputs: [{name: big, path: /nodus/scratch/big.bin}]``. (Not under ``/nodus/outputs``: anything there
is also committed as the implicit ``outputs`` directory archive, a second, zstd-packed copy of the bytes.)

* **upload**: from the program's end (its printed time) to the arrival, at our watch of the project's
  Attempts, of the event showing the Attempt ``Succeeded``: the agent's ``collecting.collect`` (``POST
  .../blobs`` streamed from disk, hashed on the way, into the server's ``--blob-store``: a directory in the
  work directory, written to a temporary file, fsynced and renamed) plus one status write and its watch
  delivery. The server's own share is the ``create blobs`` request
  duration (``nodus_apiserver_request_duration_seconds_sum``).
* **download**: ``nodus outputs get JOB big -o FILE`` as a subprocess, start to exit; its peak RSS is
  ``ru_maxrss`` from ``wait4``; the file's sha256 must equal ``status.outputs[].sha256``.
* **peak RSS** of the agent (pid from the Node's ``sim.nodus.dev/pid``) and of the API server: VmHWM, the
  kernel's high-water mark, reset (``/proc/PID/clear_refs``) once the process is idle and warm, read after
  the transfer; the lifetime VmHWM before the reset and the idle VmRSS are reported beside it. A body held
  whole in memory would show as at least ``size`` above the baseline.

Baselines, on the same disk (the work directory), in the same run, after the Jobs: ``shutil.copyfile`` of a
``size``-byte file of random bytes (the floor of a filesystem blob store); ``cat FILE > /dev/null``; sha256
of the file (``archives.digest_file``); and, for comparison with the earlier PostgreSQL-backed blob store,
asyncpg INSERT of the file's bytes in 1 MiB bytea pieces, one autocommitted statement each on one
connection, into a scratch table (storage EXTERNAL), and SELECTs of them back by ``seq``. The files are
freshly written, so every read is from the page cache, as the agent's and the copy's are; nothing is
fsynced by either side (PostgreSQL's own WAL flushes follow its ``fsync``/``synchronous_commit``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import common

MIB = 1 << 20
OFFERING = "cpu-8c-us"
OUTPUT_PATH = "/nodus/scratch/big.bin"
PID_ANNOTATION = "sim.nodus.dev/pid"
UPLOAD_METRIC = 'nodus_apiserver_request_duration_seconds_sum{resource="blobs",verb="create"}'
# tests/support/controllers.py TEST_FLAGS (less its slow-boot offering): hosts boot at once, heartbeat every 0.5 s.
CONTROLLER_FLAGS = (
    "--sim-boot-time",
    "0s",
    "--sim-heartbeat-interval",
    "500ms",
    "--node-grace",
    "3s",
    "--sim-capacity",
    "4",
    "--workers",
    "4",
    "--lease-duration",
    "4s",
    "--renew-deadline",
    "3s",
    "--retry-period",
    "500ms",
)
_END = re.compile(r"nodus-bench-(start|end) ([0-9.]+)")


# --- processes ------------------------------------------------------------------------------------


def _start_controllers(kubeconfig: Path, directory: Path) -> tuple[subprocess.Popen[bytes], Path]:
    directory.mkdir(parents=True, exist_ok=True)
    log_file = directory / "controllers.log"
    args = [sys.executable, "-m", "nodus", "controllers", "--kubeconfig", str(kubeconfig), "--identity", "bench"]
    args += ["--sim-work-dir", str(directory / "hosts"), *CONTROLLER_FLAGS]
    with log_file.open("ab") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=common.ROOT)
    return process, log_file


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-8000:] if path.exists() else ""


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _kill_host(pid: int, hosts: Path) -> None:
    """SIGKILL a simulated host the controllers left behind, if ``pid`` is still an agent under ``hosts``."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    if b"agent" in argv and any(arg.startswith(str(hosts).encode()) for arg in argv):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, 9)


@dataclass
class Memory:
    """A process's memory around one transfer (KiB): idle VmRSS, lifetime VmHWM before, VmHWM during."""

    pid: int
    idle_kib: int = 0
    lifetime_peak_kib: int = 0
    peak_kib: int = 0
    reset: bool = False

    def start(self) -> None:
        self.idle_kib = common.rss_kib(self.pid)
        self.lifetime_peak_kib = common.peak_rss_kib(self.pid)
        self.reset = common.reset_peak_rss(self.pid)

    def stop(self) -> None:
        self.peak_kib = common.peak_rss_kib(self.pid)

    def summary(self) -> dict[str, Any]:
        return {
            "idle_mib": self.idle_kib / 1024,
            "lifetime_peak_before_mib": self.lifetime_peak_kib / 1024,
            "peak_mib": self.peak_kib / 1024,
            "growth_mib": (self.peak_kib - self.idle_kib) / 1024,
            "peak_was_reset": self.reset,
        }


@contextlib.contextmanager
def _profiled(server: common.Server, agent_pid: int, label: str) -> Iterator[None]:
    """With ``--profile``: the API server (``Server.profiled``) and the agent recorded by py-spy, as
    ``outputs-<label>-server.txt`` and ``outputs-<label>-agent.txt``; a no-op otherwise."""
    directory = os.environ.get("NODUS_BENCH_PROFILE_DIR")
    pyspy = os.environ.get("NODUS_BENCH_PYSPY") or shutil.which("py-spy")
    if not directory or not pyspy:
        yield
        return
    output = Path(directory) / f"outputs-{label}-agent.txt"
    args = [pyspy, "record", "--pid", str(agent_pid), "--format", "raw", "--rate", "250", "-o", str(output)]
    profiler = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with server.profiled(f"outputs-{label}-server"):
            yield
    finally:
        profiler.send_signal(signal.SIGINT)
        try:
            profiler.wait(timeout=30)
        except subprocess.TimeoutExpired:
            profiler.kill()
            profiler.wait()


# --- watching -------------------------------------------------------------------------------------


@dataclass
class Tracker:
    """Arrival (wall clock) of each Attempt's terminal event, and each Node's agent pid."""

    finished: dict[str, tuple[float, dict[str, Any]]] = field(default_factory=dict)  # job -> (when, attempt)
    events: dict[str, asyncio.Event] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)

    def attempt(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:
            return
        job = str((new.get("spec") or {}).get("job", ""))
        phase = (new.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Lost", "Stopped") and job not in self.finished:
            self.finished[job] = (time.time(), new)
            self.events.setdefault(job, asyncio.Event()).set()

    def node(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is not None:
            text = str((new["metadata"].get("annotations") or {}).get(PID_ANNOTATION) or "")
            if text.isdigit():
                self.pids[new["metadata"]["name"]] = int(text)

    async def wait(self, job: str, timeout: float) -> tuple[float, dict[str, Any]]:
        await asyncio.wait_for(self.events.setdefault(job, asyncio.Event()).wait(), timeout)
        return self.finished[job]


def _program(size: int) -> str:
    return (
        "import os, time\n"
        "print('nodus-bench-start', repr(time.time()), flush=True)\n"
        f"with open({OUTPUT_PATH!r}, 'wb') as f:\n"
        f"    for _ in range({size // MIB}):\n"
        f"        f.write(os.urandom({MIB}))\n"
        f"    f.write(os.urandom({size % MIB}))\n"
        "print('nodus-bench-end', repr(time.time()), flush=True)\n"
    )


def _job(name: str, size: int) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "image": "python:3.12-slim",
            "command": ["/usr/bin/python3", "-c", _program(size)],
            "resources": {"cpu": "1"},
            "placement": {"offerings": [OFFERING]},
            "scaledownWindow": "10m",
            "outputs": [{"name": "big", "path": OUTPUT_PATH}],
        },
    }


def _program_times(server: common.Server, job: str) -> dict[str, float]:
    """The program's printed start and end (wall clock), from the Job's log."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, data = server.request("GET", f"{common.jobs_path()}/{job}/log")
        found = {kind: float(value) for kind, value in _END.findall(data.decode(errors="replace"))}
        if status == 200 and "end" in found:
            return found
        time.sleep(0.2)
    raise RuntimeError(f"no end time in the log of job {job}")


# --- the measurements -----------------------------------------------------------------------------


async def _run_job(
    client: Any, tracker: Tracker, server: common.Server, name: str, size: int, log_file: Path
) -> dict[str, Any]:
    await client.create("jobs", _job(name, size), common.PROJECT)
    try:
        succeeded_at, attempt = await tracker.wait(name, timeout=120 + 8 * size / MIB)
    except TimeoutError:
        raise RuntimeError(f"job {name} did not finish:\n{_tail(log_file)}") from None
    status = attempt.get("status") or {}
    if status.get("phase") != "Succeeded":
        raise RuntimeError(f"job {name} ended {status.get('phase')}: {status.get('message')}")
    return {"succeeded_at": succeeded_at, "attempt": attempt}


def _download(kubeconfig: Path, job: str, target: Path) -> dict[str, Any]:
    """``nodus outputs get`` in a subprocess: wall time and its peak RSS (``ru_maxrss``, KiB on Linux)."""
    args = [sys.executable, "-m", "nodus", "outputs", "get", job, "big", "-n", common.PROJECT, "-o", str(target)]
    args += ["--kubeconfig", str(kubeconfig.with_name("admin.kubeconfig"))]
    started = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=common.ROOT)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.stderr is not None
    stderr = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    if process.returncode != 0:
        raise RuntimeError(f"nodus outputs get exited with {process.returncode}: {stderr}")
    return {"seconds": elapsed, "peak_rss_mib": usage.ru_maxrss / 1024}


@dataclass
class Setup:
    """What a round needs: the API client and watches, the server, the warm host's agent, files."""

    client: Any
    tracker: Tracker
    server: common.Server
    agent_pid: int
    kubeconfig: Path
    workdir: Path
    log_file: Path


async def _round(setup: Setup, name: str, size: int) -> dict[str, Any]:
    from nodus.agent import archives

    client, tracker, server, agent_pid = setup.client, setup.tracker, setup.server, setup.agent_pid
    kubeconfig, workdir, log_file = setup.kubeconfig, setup.workdir, setup.log_file

    agent, api = Memory(agent_pid), Memory(server.pid)
    agent.start()
    api.start()
    metrics = await asyncio.to_thread(server.metrics)
    cpu = {"agent": common.cpu_seconds(agent_pid), "server": common.cpu_seconds(server.pid)}
    cpu["postgres"] = common.postgres_cpu_seconds()
    with _profiled(server, agent_pid, name):
        job = await _run_job(client, tracker, server, name, size, log_file)
    agent.stop()
    api.stop()
    after = await asyncio.to_thread(server.metrics)
    cpu = {
        "agent": common.cpu_seconds(agent_pid) - cpu["agent"],
        "server": common.cpu_seconds(server.pid) - cpu["server"],
        "postgres": common.postgres_cpu_seconds() - cpu["postgres"],
    }
    times = await asyncio.to_thread(_program_times, server, name)
    upload_s = job["succeeded_at"] - times["end"]
    server_upload_s = after.get(UPLOAD_METRIC, 0.0) - metrics.get(UPLOAD_METRIC, 0.0)
    outputs = {o["name"]: o for o in (job["attempt"].get("status") or {}).get("outputs") or []}
    if outputs.get("big", {}).get("size") != size:
        raise RuntimeError(f"job {name}: unexpected outputs {outputs}")

    # Download through the CLI, with the API server's peak reset again.
    target = workdir / f"{name}.download"
    api_download = Memory(server.pid)
    api_download.start()
    with _profiled(server, agent_pid, f"{name}-download"):
        download = await asyncio.to_thread(_download, kubeconfig, name, target)
    api_download.stop()
    try:
        digest, got = await asyncio.to_thread(archives.digest_file, target)
    finally:
        target.unlink(missing_ok=True)
    return {
        "job": name,
        "program_write_mb_s": size / 1e6 / (times["end"] - times["start"]),
        "upload_s": upload_s,
        "upload_mb_s": size / 1e6 / upload_s,
        "server_upload_request_s": server_upload_s,
        "agent_before_request_s": upload_s - server_upload_s,
        "cpu_s_during_job": cpu,
        "agent_memory": agent.summary(),
        "server_memory_upload": api.summary(),
        "download_s": download["seconds"],
        "download_mb_s": size / 1e6 / download["seconds"],
        "cli_peak_rss_mib": download["peak_rss_mib"],
        "server_memory_download": api_download.summary(),
        "sha256_matches": digest == outputs["big"]["sha256"] and got == size,
    }


def _write_random(path: Path, size: int) -> None:
    with path.open("wb") as handle:
        for _ in range(size // MIB):
            handle.write(os.urandom(MIB))
        handle.write(os.urandom(size % MIB))


def _disk(directory: Path, size: int) -> dict[str, float]:
    """Same disk, same bytes: copyfile, cat to /dev/null, the agent's sha256 pass."""
    from nodus.agent import archives

    source, copy = directory / "baseline.bin", directory / "baseline.copy"
    _write_random(source, size)
    try:
        started = time.perf_counter()
        shutil.copyfile(source, copy)
        copy_s = time.perf_counter() - started
        copy.unlink()
        started = time.perf_counter()
        subprocess.run(f"cat {source} > /dev/null", shell=True, check=True)
        cat_s = time.perf_counter() - started
        started = time.perf_counter()
        archives.digest_file(source)
        sha_s = time.perf_counter() - started
    finally:
        source.unlink(missing_ok=True)
        copy.unlink(missing_ok=True)
    return {"copy_mb_s": size / 1e6 / copy_s, "cat_mb_s": size / 1e6 / cat_s, "sha256_mb_s": size / 1e6 / sha_s}


async def _raw_postgres(db: str, directory: Path, size: int) -> dict[str, float]:
    """asyncpg on one connection: the file's bytes INSERTed as 1 MiB bytea rows (autocommit), then SELECTed."""
    import asyncpg

    from nodus.storage import database

    source = directory / "raw.bin"
    await asyncio.to_thread(_write_random, source, size)
    conn = await asyncpg.connect(database.asyncpg_dsn(db))
    try:
        await conn.execute(
            "CREATE TABLE bench_chunks (upload_id uuid NOT NULL, seq integer NOT NULL, data bytea NOT NULL,"
            " PRIMARY KEY (upload_id, seq))"
        )
        await conn.execute("ALTER TABLE bench_chunks ALTER COLUMN data SET STORAGE EXTERNAL")
        upload_id = secrets.token_hex(16)
        started = time.perf_counter()
        with source.open("rb") as handle:
            seq = 0
            while chunk := handle.read(MIB):
                await conn.execute("INSERT INTO bench_chunks VALUES ($1::uuid, $2, $3)", upload_id, seq, chunk)
                seq += 1
        insert_s = time.perf_counter() - started
        digest = hashlib.sha256()
        started = time.perf_counter()
        for n in range(seq):
            digest.update(
                await conn.fetchval(
                    "SELECT data FROM bench_chunks WHERE upload_id = $1::uuid AND seq = $2", upload_id, n
                )
            )
        select_s = time.perf_counter() - started
        await conn.execute("DROP TABLE bench_chunks")
    finally:
        await conn.close()
        source.unlink(missing_ok=True)
    return {"insert_mb_s": size / 1e6 / insert_s, "select_mb_s": size / 1e6 / select_s}


# --- the benchmark --------------------------------------------------------------------------------


def _prepare(workdir: Path) -> tuple[Path, Path]:
    """The API server's secret key file and the simulated hosts' directory."""
    from nodus.apimachinery.sealing import Keyring

    workdir.mkdir(parents=True, exist_ok=True)
    key_file = workdir / "secret.key"
    Keyring.generate(key_file)
    return key_file, Path(tempfile.mkdtemp(prefix="nodus-bench-outputs-", dir=workdir)).resolve()


async def run(workdir: Path, size_mib: int = 1024, rounds: int = 1) -> dict[str, Any]:
    from nodus.client import Client
    from nodus.client.informers import Informer

    size = size_mib * MIB
    key_file, hosts = await asyncio.to_thread(_prepare, workdir)
    result: dict[str, Any] = {"size_mib": size_mib, "rounds": rounds, "output_path": OUTPUT_PATH}
    kept_rounds: list[dict[str, Any]] = []
    server_url = common.database_server_url()
    tracker = Tracker()
    async with (
        common.scratch_database(server_url) as db,
        common.running_server(db, workdir / "apiserver", extra_args=["--secret-key-file", str(key_file)]) as server,
    ):
        result["postgres"] = await common.postgres_facts(db)
        await asyncio.to_thread(common.create_project, server)
        kubeconfig = common.write_kubeconfig(server, workdir / "kubeconfig")
        common.write_kubeconfig(server, workdir / "admin.kubeconfig", admin=True)  # for nodus outputs get
        controllers, log_file = _start_controllers(kubeconfig, hosts)
        try:
            async with Client(common.client_config(server), user_agent="bench-outputs") as client:
                attempts = Informer(client, "attempts", namespace=common.PROJECT)
                nodes = Informer(client, "nodes")
                attempts.add_handler(tracker.attempt)
                nodes.add_handler(tracker.node)
                tasks = [asyncio.create_task(i.run()) for i in (attempts, nodes)]
                try:
                    await asyncio.wait_for(asyncio.gather(attempts.wait_synced(), nodes.wait_synced()), 30)
                    warmup = await _run_job(client, tracker, server, "warmup", MIB, log_file)
                    node = str(warmup["attempt"]["spec"].get("node") or "")
                    agent_pid = tracker.pids.get(node)
                    if agent_pid is None:
                        raise RuntimeError(f"no {PID_ANNOTATION} on node {node!r}")
                    # The CLI's own cost (interpreter start, imports, one request): a 1 MiB download.
                    small = await asyncio.to_thread(_download, kubeconfig, "warmup", workdir / "warmup.download")
                    (workdir / "warmup.download").unlink(missing_ok=True)
                    result["cli_1mib_s"] = small["seconds"]
                    await asyncio.sleep(1.0)  # the host goes idle, the warm-up's writes settle
                    setup = Setup(client, tracker, server, agent_pid, kubeconfig, workdir, log_file)
                    for n in range(rounds):
                        name = f"big-{n}"
                        kept = await _round(setup, name, size)
                        if (tracker.finished[name][1].get("spec") or {}).get("node") != node:
                            raise RuntimeError(f"job {name} did not reuse the warm host {node}")
                        kept_rounds.append(kept)
                        await asyncio.sleep(1.0)
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await asyncio.to_thread(_stop, controllers)
            for pid in tracker.pids.values():
                _kill_host(pid, hosts)
            shutil.rmtree(hosts, ignore_errors=True)
        result["raw_postgres"] = await _raw_postgres(db, workdir, size)
    result["disk"] = await asyncio.to_thread(_disk, workdir, size)
    result["rounds_detail"] = kept_rounds
    result.update(_summarise(kept_rounds, result["disk"], result["raw_postgres"]))
    return result


def _summarise(rounds: list[dict[str, Any]], disk: dict[str, float], raw: dict[str, float]) -> dict[str, Any]:
    upload = common.median([r["upload_mb_s"] for r in rounds])
    download = common.median([r["download_mb_s"] for r in rounds])
    return {
        "upload_mb_s": upload,
        "download_mb_s": download,
        "upload_vs_copy": upload / disk["copy_mb_s"],
        "upload_vs_raw_insert": upload / raw["insert_mb_s"],
        "download_vs_copy": download / disk["copy_mb_s"],
        "download_vs_raw_select": download / raw["select_mb_s"],
        "agent_peak_mib": max(r["agent_memory"]["peak_mib"] for r in rounds),
        "agent_idle_mib": max(r["agent_memory"]["idle_mib"] for r in rounds),
        "server_peak_mib": max(
            max(r["server_memory_upload"]["peak_mib"], r["server_memory_download"]["peak_mib"]) for r in rounds
        ),
        "server_idle_mib": max(r["server_memory_upload"]["idle_mib"] for r in rounds),
        "cli_peak_mib": max(r["cli_peak_rss_mib"] for r in rounds),
        "sha256_matches": all(r["sha256_matches"] for r in rounds),
    }
