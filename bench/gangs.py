"""Gang assembly and gang restart times on the simulated cloud, against its boot time measured in the same run.

Setup: a ``nodus apiserver`` (plain HTTP) on a scratch database and one ``nodus controllers`` process with the
simulated cloud and the test suite's flags (``tests/support/controllers.py``: heartbeats every 0.5 s, a node
lost after 3 s of silence, checkpoint cadences 20 times faster), a fixed boot of ``BOOT_TIME`` (2 s) and
enough capacity for the largest gang. Every host is a real ``nodus agent`` process; a gang's ranks really
register, probe each other (32 MiB to the next rank) and start their command in the sandbox.

* **Assembly**: for each size (2, 4, 8 nodes) ``rounds`` gangs, one at a time, each on cold hosts (the run
  waits until the previous gang's hosts are released): a Plain-launcher gang whose ranks print the
  environment contract and sleep. Assembly time is from the create request to ``status.gang.started ==
  size`` (every rank started the command), polled every 0.1 s; its stages come from the ranks' own times.
  The baseline is a plain one-node Job of the same program, create to Running, in the same run (it pays the
  same boot, agent start and sandbox), next to the configured boot time.
* **Restart**: ``restarts`` two-node gangs of ``tests/e2e/running/test_gangs.GANG_COUNTER`` (each rank keeps
  a counter and answers checkpoint requests; a gang checkpoint every 3 s); once a gang checkpoint is
  committed, rank 1's host is killed (``nodus sim kill``: no notice). Restart time is from the kill to
  ``status.gang.epoch == 2`` with both ranks started; "detected" is the part until the lost rank's
  ``finishTime`` (the 3 s node grace and the heartbeat check).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench import common, recovery

BOOT_TIME = recovery.BOOT_TIME
OFFERING = "cpu-8c-eu"
SIZES = (2, 4, 8)
SLEEP_S = "2"


def _job(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def _contract_spec(nodes: int | None) -> dict[str, Any]:
    from tests.e2e.running.test_gangs import CONTRACT

    spec: dict[str, Any] = {
        "image": "python:3.12-slim",
        "command": [sys.executable, "-c", CONTRACT, SLEEP_S],
        "resources": {"cpu": "1"},
        "placement": {"offerings": [OFFERING]},
    }
    if nodes:
        spec["distributed"] = {"nodes": nodes}
    return spec


def _counter_spec() -> dict[str, Any]:
    from tests.e2e.running.test_gangs import GANG_COUNTER

    return {
        "image": "python:3.12-slim",
        "command": [sys.executable, "-c", GANG_COUNTER, "1000000"],
        "resources": {"cpu": "1"},
        "placement": {"offerings": [OFFERING]},
        "distributed": {"nodes": 2},
        "recovery": {"checkpoint": {"format": "Snapshot", "interval": "1m"}, "minProgressDuration": "1s"},
    }


async def _poll(client: Any, what: str, check: Any, timeout: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


async def _job_status(client: Any, name: str) -> dict[str, Any]:
    return dict((await client.get("jobs", name, common.PROJECT)).get("status") or {})


async def _no_live_hosts(client: Any) -> None:
    async def check() -> bool:
        nodes = (await client.list("nodes"))["items"]
        return not any((n.get("status") or {}).get("phase", "Booting") in recovery.LIVE_NODE_PHASES for n in nodes)

    await _poll(client, "every host released", check, timeout=120)


async def _members(client: Any, job: str, epoch: int | None = None) -> list[dict[str, Any]]:
    items = (await client.list("attempts", common.PROJECT, label_selector=f"nodus.dev/job={job}"))["items"]
    return [a for a in items if epoch is None or a["spec"]["number"] == epoch]


async def _assembly(client: Any, name: str, nodes: int | None) -> dict[str, float]:
    """One cold start: create to every rank started (a plain Job: to Running), and the ranks' stages."""
    from nodus.apimachinery import units

    await _no_live_hosts(client)
    started = time.monotonic()
    await client.create("jobs", _job(name, _contract_spec(nodes)), common.PROJECT)

    async def up() -> bool:
        status = await _job_status(client, name)
        if nodes:
            return int((status.get("gang") or {}).get("started") or 0) >= nodes
        return status.get("phase") in ("Running", "Succeeded")

    await _poll(client, f"{name} to start", up)
    seconds = time.monotonic() - started
    ranks = await _members(client, name)
    created = units.parse_time(ranks[0]["metadata"]["creationTimestamp"])

    def latest(field: str, where: str = "status") -> float:
        values = [units.time_or_none((a.get(where) or {}).get(field)) for a in ranks]
        known = [v for v in values if v is not None]
        return (max(known) - created).total_seconds() if known else float("nan")

    def gang_time(field: str) -> float:
        values = [units.time_or_none(((a.get("status") or {}).get("gang") or {}).get(field)) for a in ranks]
        known = [v for v in values if v is not None]
        return (max(known) - created).total_seconds() if known else float("nan")

    stages = {
        "seconds": seconds,
        "bound_s": latest("scheduledTime"),
        "hosts_s": latest("provisioningTime"),
        "registered_s": gang_time("registeredTime") if nodes else float("nan"),
        "probed_s": gang_time("probedTime") if nodes else float("nan"),
        "started_s": latest("startTime"),
    }
    await _poll(client, f"{name} to finish", lambda: _finished(client, name))
    return stages


async def _finished(client: Any, name: str) -> bool:
    return (await _job_status(client, name)).get("phase") in ("Succeeded", "Failed")


async def _restart(client: Any, name: str) -> dict[str, float]:
    """Kill rank 1's host once a gang checkpoint is committed; seconds until epoch 2 has both ranks started."""
    from nodus.apimachinery import units

    await client.create("jobs", _job(name, _counter_spec()), common.PROJECT)

    async def checkpointed() -> list[dict[str, Any]] | None:
        ranks = sorted(await _members(client, name, 1), key=lambda a: a["spec"]["rank"])
        requests = [
            {s["request"] for s in ((a.get("status") or {}).get("gang") or {}).get("shards") or []} for a in ranks
        ]
        running = len(ranks) == 2 and all((a.get("status") or {}).get("phase") == "Running" for a in ranks)
        return ranks if running and requests[0] & requests[1] else None

    ranks = await _poll(client, f"{name} to commit a gang checkpoint", checkpointed)
    killed_at = units.now()
    started = time.monotonic()
    annotations = {"sim.nodus.dev/kill-requested-at": units.format_micro_time(killed_at)}
    await client.patch("nodes", ranks[1]["spec"]["node"], {"metadata": {"annotations": annotations}})

    async def restarted() -> bool:
        gang = (await _job_status(client, name)).get("gang") or {}
        return int(gang.get("epoch") or 0) >= 2 and int(gang.get("started") or 0) >= 2

    await _poll(client, f"{name} to restart", restarted)
    seconds = time.monotonic() - started
    lost = next(a for a in await _members(client, name, 1) if a["spec"]["rank"] == 1)
    finished = units.time_or_none((lost.get("status") or {}).get("finishTime"))
    second = await _members(client, name, 2)
    restored = all((a.get("spec") or {}).get("restore") for a in second)
    await client.patch("jobs", name, {"spec": {"state": "Cancelled"}}, common.PROJECT)
    return {
        "seconds": seconds,
        "detected_s": (finished - killed_at).total_seconds() if finished else float("nan"),
        "restored": 1.0 if restored else 0.0,
    }


async def run(workdir: Path, rounds: int = 5, restarts: int = 5, timeout: float = 1800.0) -> dict[str, Any]:
    from nodus.client import Client

    hosts = await asyncio.to_thread(recovery._directories, workdir)
    flags = recovery._controller_flags(max(SIZES) + 2)
    result: dict[str, Any] = {"boot_time_s": float(BOOT_TIME.rstrip("s")), "rounds": rounds, "controller_flags": flags}
    controllers: list[recovery.Controller] = []
    async with recovery.api_server(workdir, result) as (_, server, kubeconfig):
        controllers.append(recovery._start_controller(kubeconfig, workdir, hosts, flags))
        try:
            async with Client(common.client_config(server), user_agent="bench-gangs") as client:
                await recovery._wait_for_leader(client, controllers)
                await asyncio.sleep(2.0)  # the leader publishes the offerings' capacity once it leads
                async with asyncio.timeout(timeout):
                    baseline = [await _assembly(client, f"single-{n}", None) for n in range(rounds)]
                    result["single"] = _summary(baseline)
                    result["assembly"] = {}
                    for size in SIZES:
                        runs = [await _assembly(client, f"gang{size}-{n}", size) for n in range(rounds)]
                        result["assembly"][str(size)] = _summary(runs)
                    runs = [await _restart(client, f"restart-{n}") for n in range(restarts)]
                    result["restart"] = _summary(runs)
        finally:
            for controller in controllers:
                await asyncio.to_thread(recovery._stop, controller.process)
            result["agents_left_killed"] = recovery._kill_agents(hosts)
            result["lease_losses"] = recovery._count_in_logs(controllers, "lost the lease")
            shutil.rmtree(hosts, ignore_errors=True)
    return result


def _summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(runs), "samples": [round(r["seconds"], 2) for r in runs]}
    seconds = [r["seconds"] for r in runs]
    out["p50_s"], out["p95_s"] = common.percentile(seconds, 50), common.percentile(seconds, 95)
    for key in runs[0]:
        if key != "seconds":
            values = [r[key] for r in runs if r[key] == r[key]]  # not NaN
            out[f"{key}_p50"] = common.median(values) if values else float("nan")
    return out


def rows(r: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """The benchmark table's rows (``bench/run.py``)."""
    boot, single = r["boot_time_s"], r["single"]
    out = [
        (
            "gangs: one node, create to Running, p50 / p95 s",
            f"{single['p50_s']:.1f} / {single['p95_s']:.1f}",
            f"boot {boot:.0f} s",
            f"{single['p50_s'] / boot:.1f}x boot",
            "",
            "-",
        )
    ]
    for size, entry in r["assembly"].items():
        out.append(
            (
                f"  gang of {size}: create to all ranks started, p50 / p95 s",
                f"{entry['p50_s']:.1f} / {entry['p95_s']:.1f}",
                f"1 node {single['p50_s']:.1f}",
                f"{entry['p50_s'] / single['p50_s']:.2f}x 1 node, {entry['p50_s'] / boot:.1f}x boot",
                "",
                "-",
            )
        )
    restart = r["restart"]
    out.append(
        (
            "  gang restart: host killed to epoch 2 started, p50 / p95 s",
            f"{restart['p50_s']:.1f} / {restart['p95_s']:.1f} (detected {restart['detected_s_p50']:.1f})",
            f"boot {boot:.0f} s",
            f"{restart['p50_s'] / boot:.1f}x boot",
            "",
            "-",
        )
    )
    return out
