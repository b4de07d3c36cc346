"""Running Jobs in their images (issue 17): image pull, container start and create-to-Running, each against a
baseline measured in the same run, interleaved with it (A, B, A, B, ...), reported as p50 and p90 and their ratio.

* **pull**: ``ImageCache.ensure`` (``nodus/agent/images.py``: skopeo resolves the tag's digest, podman pulls
  ``name@digest``) of a ~1 GiB image from a local CNCF registry (``tests/support/registry.py``), the image removed
  from podman's store before every round, vs ``skopeo copy docker://... dir:`` of the same image (target: time ratio
  <= 1.25, i.e. ensure's throughput >= 0.8 of skopeo's). The image is the development base image plus one layer of
  1 GiB of random (incompressible) bytes; it is built and pushed once into a registry whose storage is cached under
  ``.cache/bench-images`` (``make clean`` removes it), so reruns only start the registry. Context: a bare
  ``podman pull name@digest`` in the same rounds (ensure's own overhead is the difference).
* **start**: a whole run of ``true`` through ``PodmanRuntime`` (``AttemptLayout.create``, ``start``, ``wait``, the
  pod removed) vs ``podman run --rm IMAGE true`` (target <= 1.2x), both on the cached base image; also the
  runtime's start alone (to Running) against the same baseline. Every podman call the runtime makes is timed (an
  ``Engine`` whose ``run`` records its duration by subcommand): where a start's time goes.
* **latency**: warm create-to-Running (``bench/run_latency.py``'s samples: create response to the watch event of the
  Job Running, a warm reused host, ``sleep 1``) on two systems at once, each its own API server, scratch database and
  ``nodus controllers``: one with ``--sim-runtime bubblewrap`` (the previous runtime), one with ``--sim-runtime
  podman`` and the Job's image in the local registry (``--sim-agent-insecure-registry``). Samples alternate
  between the two; ratio podman / bubblewrap.

Everything it starts is removed at the end: the pulled images, containers and pods, the registry process, the
servers and controllers; only the registry's cached storage stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from bench import common, run_latency

CACHE = common.ROOT / ".cache" / "bench-images"
PODMAN = ("podman", "--cgroup-manager=cgroupfs")
ULIMITS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096")
REPOSITORY = "bench/blob"
PULL_TARGET = 1.25
START_TARGET = 1.2
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CHUNK = 4 << 20


def _podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True, check=check, timeout=1800)


def _stats(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_s": common.percentile(values, 50),
        "p90_s": common.percentile(values, 90),
        "samples_s": [round(v, 4) for v in values],
    }


def _compare(measured: list[float], baseline: list[float], target: float | None) -> dict[str, Any]:
    """p50/p90 of both and their ratios; met when both ratios are within ``target``."""
    a, b = _stats(measured), _stats(baseline)
    out: dict[str, Any] = {"measured": a, "baseline": b}
    out["p50_ratio"] = a["p50_s"] / b["p50_s"]
    out["p90_ratio"] = a["p90_s"] / b["p90_s"]
    out["target"] = target
    out["met"] = None if target is None else out["p50_ratio"] <= target and out["p90_ratio"] <= target
    return out


# --- the 1 GiB image ------------------------------------------------------------------------------


def _tag(base: str, blob_mib: int) -> str:
    return f"{base.rsplit(':', 1)[-1]}-{blob_mib}m"


def _in_registry(address: str, reference: str) -> bool:
    done = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", "--", f"docker://{address}/{reference}"],
        capture_output=True,
        check=False,
        timeout=60,
    )
    return done.returncode == 0


def _build(registry: Any, base: str, reference: str, blob_mib: int, directory: Path) -> None:
    """The base image plus one layer of ``blob_mib`` MiB of random bytes, pushed as ``reference``; nothing of it
    stays in podman's store (a local copy would make every pull a no-op)."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "blob").open("wb") as out:
        for _ in range(blob_mib * (1 << 20) // CHUNK):
            out.write(os.urandom(CHUNK))
    (directory / "Containerfile").write_text(f"FROM {base}\nCOPY blob /blob\n")
    local = f"localhost/nodus-bench/blob:{reference.rsplit(':', 1)[-1]}"
    _podman("build", "--quiet", "--pull=never", "--tag", local, str(directory))
    try:
        registry.push(local, reference)
    finally:
        _podman("rmi", "--force", local, check=False)
        shutil.rmtree(directory, ignore_errors=True)


def _manifest_bytes(address: str, reference: str) -> int:
    """The compressed bytes of the image's layers, as its manifest lists them (what a pull downloads at most)."""
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", "--", f"docker://{address}/{reference}"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    return sum(int(layer["size"]) for layer in json.loads(raw)["layers"])


def _remove_pulled(address: str) -> None:
    """Every name podman's store holds from this run's registry: an image known by no other name is removed (the
    previous round's pull), any other only loses those names (the base image pulled back keeps its local tag)."""
    listed = json.loads(_podman("images", "--format", "json").stdout or "[]")
    for image in listed:
        names = [str(n) for n in image.get("Names") or []]
        ours = [n for n in names if n.startswith(address + "/")]
        if ours and len(ours) == len(names):
            _podman("rmi", "--force", str(image["Id"]), check=False)
        elif ours:
            _podman("rmi", *ours, check=False)


def _sync() -> None:
    # The previous round's writes are flushed outside every measured window.
    os.sync()


async def _timed(step: Callable[[], Any]) -> float:
    started = time.perf_counter()
    await step()
    return time.perf_counter() - started


async def _pulls(address: str, reference: str, rounds: int, workdir: Path) -> dict[str, Any]:
    from nodus.agent.images import ImageCache

    cache = ImageCache(insecure_registries=[address], work_dir=workdir / "image-cache", retry_delays=())
    target = workdir / "skopeo-dir"
    digest = ""
    times: dict[str, list[float]] = {"ensure": [], "skopeo": [], "podman_pull": []}

    async def ensure() -> None:
        nonlocal digest
        image = await cache.ensure(f"{address}/{reference}", credentials=None, pinned_digest=None)
        if image.cached:
            raise RuntimeError(f"{image.pinned} was already in podman's store: the pull measured nothing")
        digest = image.digest

    async def skopeo() -> None:
        process = await asyncio.create_subprocess_exec(
            "skopeo", "copy", "--quiet", "--src-tls-verify=false", "--",
            f"docker://{address}/{reference}", f"dir:{target}",
        )  # fmt: skip
        if await process.wait() != 0:
            raise RuntimeError("skopeo copy failed")

    async def podman_pull() -> None:
        name = reference.rsplit(":", 1)[0]
        process = await asyncio.create_subprocess_exec(
            *PODMAN, "pull", "--quiet", "--tls-verify=false", "--", f"{address}/{name}@{digest}",
            stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        if await process.wait() != 0:
            raise RuntimeError("podman pull failed")

    steps = {"ensure": ensure, "skopeo": skopeo, "podman_pull": podman_pull}
    for r in range(rounds + 1):  # round 0 warms the registry's files into the page cache: not counted
        for name, step in steps.items():
            await asyncio.to_thread(_remove_pulled, address)
            shutil.rmtree(target, ignore_errors=True)
            await asyncio.to_thread(_sync)
            elapsed = await _timed(step)
            if r:
                times[name].append(elapsed)
    await asyncio.to_thread(_remove_pulled, address)
    shutil.rmtree(target, ignore_errors=True)
    size = await asyncio.to_thread(_manifest_bytes, address, reference)
    out = _compare(times["ensure"], times["skopeo"], PULL_TARGET)
    out["bytes"] = size
    out["ensure_mb_s"] = size / out["measured"]["p50_s"] / 1e6
    out["skopeo_mb_s"] = size / out["baseline"]["p50_s"] / 1e6
    out["podman_pull"] = _stats(times["podman_pull"])
    out["podman_pull_mb_s"] = size / out["podman_pull"]["p50_s"] / 1e6
    return out


# --- container start ------------------------------------------------------------------------------


def _timed_engine(work_dir: Path, calls: list[tuple[str, float]]) -> Any:
    """The agent's podman ``Engine`` whose every ``run`` is timed, recorded as (subcommand, seconds)."""
    from nodus.agent.podengine import Engine

    class TimedEngine(Engine):
        async def run(self, *args: str, timeout: float = 120.0, env: Any = None) -> tuple[int, str, str]:
            label = " ".join(args[:2]) if args[0] == "pod" else args[0]
            started = time.perf_counter()
            try:
                return await super().run(*args, timeout=timeout, env=env or {})
            finally:
                calls.append((label, time.perf_counter() - started))

    plain = Engine.configured(work_dir)
    return TimedEngine(plain.podman, plain.conf)


async def _starts(base: str, rounds: int, workdir: Path) -> dict[str, Any]:
    from nodus.agent import runtime
    from nodus.agent.layout import AttemptLayout
    from nodus.agent.podman import PodmanRuntime

    calls: list[tuple[str, float]] = []
    containers = PodmanRuntime(_timed_engine(workdir / "engine", calls))
    image = runtime.ContainerImage(base, base)
    times: dict[str, list[float]] = {"whole": [], "to_running": [], "podman_run": []}
    profiles: list[list[tuple[str, float]]] = []

    async def through_runtime(i: int) -> tuple[float, float]:
        started = time.perf_counter()
        layout = AttemptLayout.create(workdir / "attempts", f"start-{os.urandom(3).hex()}-{i}")
        spec = runtime.RunSpec(argv=["true"], env={"PATH": PATH}, working_dir="/workspace", layout=layout, image=image)
        process = await containers.start(spec)
        running = time.perf_counter() - started
        async for _ in process.lines():
            pass
        ended = await process.wait()
        whole = time.perf_counter() - started
        layout.remove()
        if not ended.succeeded:
            raise RuntimeError(f"true through the runtime ended {ended}")
        return whole, running

    async def podman_run() -> float:
        started = time.perf_counter()
        process = await asyncio.create_subprocess_exec(*PODMAN, "run", "--rm", *ULIMITS, base, "true")
        if await process.wait() != 0:
            raise RuntimeError("podman run failed")
        return time.perf_counter() - started

    for i in range(rounds + 1):  # round 0 warms both up: not counted
        calls.clear()
        whole, running = await through_runtime(i)
        baseline = await podman_run()
        if i:
            times["whole"].append(whole)
            times["to_running"].append(running)
            times["podman_run"].append(baseline)
            profiles.append(list(calls))
    out: dict[str, Any] = {
        "whole": _compare(times["whole"], times["podman_run"], START_TARGET),
        "to_running": _compare(times["to_running"], times["podman_run"], None),
    }
    # Per podman subcommand: the median over rounds of its total time in one run (pod rm runs twice).
    labels = dict.fromkeys(label for profile in profiles for label, _ in profile)
    out["podman_calls_p50_s"] = {
        label: common.median([sum(s for name, s in profile if name == label) for profile in profiles])
        for label in labels
    }
    out["podman_calls_per_run"] = common.median([len(profile) for profile in profiles])
    return out


# --- create-to-Running: podman vs bubblewrap --------------------------------------------------------


@contextlib.asynccontextmanager
async def _system(
    workdir: Path, server_url: str, sim_runtime: str, registries: list[str]
) -> AsyncIterator[tuple[Any, run_latency.Tracker, Callable[[], str]]]:
    """An API server on a scratch database, its ``nodus controllers`` with ``sim_runtime`` hosts, and a client
    whose informers feed a ``run_latency.Tracker``."""
    from nodus.client import Client
    from nodus.client.informers import Informer

    hosts = run_latency._scratch_directory()
    async with (
        common.scratch_database(server_url) as db,
        common.running_server(db, workdir / sim_runtime) as server,
    ):
        await asyncio.to_thread(common.create_project, server)
        kubeconfig = common.write_kubeconfig(server, workdir / sim_runtime / "kubeconfig")
        controllers = run_latency._start_controllers(
            kubeconfig, hosts, sim_runtime=sim_runtime, insecure_registries=registries
        )
        tracker = run_latency.Tracker()
        try:
            async with Client(common.client_config(server), user_agent=f"bench-{sim_runtime}") as client:
                await run_latency._wait_for_controllers(client, controllers)
                informers = [
                    Informer(client, "jobs", namespace=common.PROJECT),
                    Informer(client, "attempts", namespace=common.PROJECT),
                    Informer(client, "nodes"),
                ]
                for informer, handler in zip(informers, (tracker.job, tracker.attempt, tracker.node), strict=True):
                    informer.add_handler(handler)
                tasks = [asyncio.create_task(i.run()) for i in informers]
                try:
                    await asyncio.gather(*(i.wait_synced() for i in informers))
                    yield client, tracker, controllers.logs
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            await asyncio.to_thread(run_latency._stop_process, controllers.process, 20)
            for text in tracker.pids.values():
                if text.isdigit() and run_latency._is_our_agent(int(text), hosts):
                    run_latency._kill_session(int(text))
            shutil.rmtree(hosts, ignore_errors=True)


async def _latency(workdir: Path, registry: Any, base: str, warm: int, program: str) -> dict[str, Any]:
    registry.push(base, "nodus/python:3.11")
    image = f"{registry.address}/nodus/python:3.11"
    server_url = common.database_server_url()
    samples: dict[str, list[run_latency.Sample]] = {"bubblewrap": [], "podman": []}
    async with (
        _system(workdir, server_url, "bubblewrap", []) as (bw_client, bw_tracker, bw_logs),
        _system(workdir, server_url, "podman", [registry.address]) as (pm_client, pm_tracker, pm_logs),
    ):
        systems = {
            "bubblewrap": (bw_client, bw_tracker, bw_logs),
            "podman": (pm_client, pm_tracker, pm_logs),
        }
        for i in range(warm + 1):  # sample 0 boots each warm host (and pulls the image): not counted
            for kind, (client, tracker, logs) in systems.items():
                name = "warmup-w" if i == 0 else f"w-{i}"
                sample = await run_latency._sample(client, tracker, name, True, program, logs, image=image)
                if i:
                    samples[kind].append(sample)
    latencies = {
        kind: [s.stages["job_running"] - s.created for s in measured if "job_running" in s.stages]
        for kind, measured in samples.items()
    }
    out = _compare(latencies["podman"], latencies["bubblewrap"], None)
    out["warm_reuse"] = {kind: sum(1 for s in measured if s.warm_reuse) for kind, measured in samples.items()}
    out["starting_to_running_p50_s"] = {
        kind: common.median(
            [s.stages["running"] - s.stages["starting"] for s in measured if {"running", "starting"} <= s.stages.keys()]
        )
        for kind, measured in samples.items()
    }
    return out


# --- the benchmark --------------------------------------------------------------------------------


async def run(
    workdir: Path,
    pull_rounds: int = 3,
    start_rounds: int = 20,
    warm: int = 20,
    blob_mib: int = 1024,
    program: str = "sleep 1",
) -> dict[str, Any]:
    from tests.support.images import base_image
    from tests.support.registry import running_registry

    base = await asyncio.to_thread(base_image)
    reference = f"{REPOSITORY}:{_tag(base, blob_mib)}"
    result: dict[str, Any] = {"base_image": base, "blob_mib": blob_mib, "program": program}
    with running_registry(CACHE / "registry") as registry:
        try:
            if not await asyncio.to_thread(_in_registry, registry.address, reference):
                started = time.monotonic()
                await asyncio.to_thread(_build, registry, base, reference, blob_mib, workdir / "build")
                result["built_seconds"] = time.monotonic() - started
            result["pull"] = await _pulls(registry.address, reference, pull_rounds, workdir)
            result["start"] = await _starts(base, start_rounds, workdir)
            result["latency"] = await _latency(workdir, registry, base, warm, program)
        finally:
            await asyncio.to_thread(_remove_pulled, registry.address)
    return result


def rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """The table lines of ``bench/run.py``: (benchmark, measured, baseline, ratio, target, verdict)."""

    def verdict(met: bool | None) -> str:
        return "-" if met is None else ("met" if met else "NOT met")

    def ms(entry: dict[str, Any]) -> str:
        return f"p50 {1000 * entry['p50_s']:.0f}, p90 {1000 * entry['p90_s']:.0f} ms"

    out: list[tuple[str, str, str, str, str, str]] = []
    p = r["pull"]
    out.append(
        (
            f"image pull {p['bytes'] / 2**20:.0f} MiB: ensure vs skopeo copy",
            f"{ms(p['measured'])} ({p['ensure_mb_s']:.0f} MB/s)",
            f"{ms(p['baseline'])} ({p['skopeo_mb_s']:.0f} MB/s)",
            f"{p['p50_ratio']:.2f} / {p['p90_ratio']:.2f}",
            f"<= {p['target']:.2f}x",
            verdict(p["met"]),
        )
    )
    out.append(("  context: podman pull name@digest", ms(p["podman_pull"]), "", "", "", ""))
    s = r["start"]
    for key, label in (("whole", "run of true through the runtime"), ("to_running", "  runtime start to Running")):
        e = s[key]
        target = f"<= {e['target']:.1f}x" if e["target"] else ""
        out.append(
            (
                label,
                ms(e["measured"]),
                f"podman run {ms(e['baseline'])}",
                f"{e['p50_ratio']:.2f} / {e['p90_ratio']:.2f}",
                target,
                verdict(e["met"]),
            )
        )
    calls = ", ".join(f"{k} {1000 * v:.0f}" for k, v in s["podman_calls_p50_s"].items())
    out.append(("  podman calls of a run, p50 ms", calls, "", "", "", ""))
    la = r["latency"]
    out.append(
        (
            "create->Running warm: podman vs bubblewrap",
            ms(la["measured"]),
            ms(la["baseline"]),
            f"{la['p50_ratio']:.2f} / {la['p90_ratio']:.2f}",
            "",
            "-",
        )
    )
    return out
