"""The pools controller: a Pool's status from its hosts and their attempts (pure), what queues a Pool, and the
reconciler against a real API server: the status written through /status, and a deleted Pool's hosts revoked
before its finalizer is lifted."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from nodus.apis.v1 import objects
from nodus.client import Client, errors
from nodus.client.informers import Informer
from nodus.client.workqueue import WorkQueue
from nodus.controllers import pools
from tests.support import cluster as clusters

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def pool(generation: int = 1, status: dict[str, Any] | None = None) -> objects.Pool:
    obj = {"metadata": {"name": "lab", "namespace": "p", "generation": generation}, "spec": {}, "status": status or {}}
    return objects.read(objects.Pool, obj)


def host(
    name: str,
    phase: str | None = "Ready",
    gpus: int = 4,
    accelerator: str | None = "h100-sxm-80g",
    created: str = "2026-11-29T10:00:00Z",
    cordoned: bool = False,
) -> objects.Node:
    status: dict[str, Any] = {}
    if phase is not None:
        status = {"phase": phase, "gpuIndexes": list(range(gpus)), "capacity": {"gpus": gpus, "cpu": "32"}}
        if gpus and accelerator:
            status["capacity"] |= {"accelerator": accelerator, "gpuFamily": accelerator.split("-")[0].upper()}
    obj = {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"pool": {"project": "p", "name": "lab"}, "provider": "pool", "unschedulable": cordoned or None},
        "status": status,
    }
    return objects.read(objects.Node, obj)


def attempt(node: str, gpu_indexes: list[int] | None, phase: str = "Running") -> objects.Attempt:
    placement = {"pool": "lab", "node": node, "provider": "pool"}
    if gpu_indexes is not None:
        placement["gpuIndexes"] = gpu_indexes  # type: ignore[assignment]
    obj = {
        "metadata": {"name": f"j-0-{uuid.uuid4().hex[:4]}", "namespace": "p"},
        "spec": {"job": "j", "jobUID": "u", "index": 0, "number": 1, "node": node},
        "status": {"phase": phase, "placement": placement},
    }
    return objects.read(objects.Attempt, obj)


def on(*attempts: objects.Attempt) -> Any:
    def attempts_on(node: str) -> list[objects.Attempt]:
        return [a for a in attempts if a.spec.node == node]

    return attempts_on


def test_an_empty_pool_has_no_ready_host() -> None:
    status = pools.summarize(pool(), [], on(), NOW)
    assert {k: status[k] for k in ("hosts", "readyHosts", "busyHosts", "totalGPUs", "freeGPUs", "gpus")} == {
        "hosts": 0,
        "readyHosts": 0,
        "busyHosts": 0,
        "totalGPUs": 0,
        "freeGPUs": 0,
        "gpus": [],
    }
    [ready] = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "NoReadyHosts")
    assert "lastJoinTime" not in status


def test_hosts_by_phase_busy_hosts_and_free_gpus() -> None:
    hosts = [
        host("a", created="2026-11-29T10:00:00Z"),
        host("b", created="2026-11-29T11:00:00Z"),
        host("c", phase=None, created="2026-11-29T11:30:00Z"),  # joined, its agent not registered yet
        host("d", phase="Lost", created="2026-11-29T09:00:00Z"),
        host("e", gpus=2, accelerator="l4-24g", cordoned=True),
        host("f", gpus=0),
    ]
    running = on(
        attempt("a", [0]),
        attempt("a", [2, 3]),
        attempt("b", None),  # no gpuIndexes: the whole host
        attempt("a", [1], phase="Succeeded"),  # finished attempts are not passed by the index, but hold nothing
        attempt("f", None),
    )
    status = pools.summarize(
        pool(generation=3), hosts, lambda n: [a for a in running(n) if a.status.phase == "Running"], NOW
    )
    assert status["hosts"] == 6
    assert status["hostsByPhase"] == {"Joining": 1, "Lost": 1, "Ready": 4}
    assert (status["readyHosts"], status["busyHosts"]) == (4, 3)
    assert status["gpus"] == [
        {"accelerator": "h100-sxm-80g", "family": "H100", "total": 8, "free": 1},
        {"accelerator": "l4-24g", "family": "L4", "total": 2, "free": 0},  # cordoned: nothing free
    ]
    assert (status["totalGPUs"], status["freeGPUs"]) == (10, 1)
    assert (status["lastJoinNode"], status["lastJoinTime"]) == ("c", "2026-11-29T11:30:00Z")
    assert status["observedGeneration"] == 3
    assert status["conditions"][0]["status"] == "True"


def test_an_unchanged_pool_writes_the_same_status() -> None:
    first = pools.summarize(pool(), [host("a")], on(), NOW)
    later = datetime(2026, 11, 29, 13, 0, 0, tzinfo=UTC)
    assert pools.summarize(pool(status=first), [host("a")], on(), later) == first


def node_object(name: str, pool_name: str | None) -> dict[str, Any]:
    spec = {"pool": {"project": "p", "name": pool_name}} if pool_name else {"offering": "x"}
    return {"metadata": {"name": name}, "spec": spec}


def test_a_change_of_a_pools_host_or_of_an_attempt_on_one_queues_the_pool() -> None:
    queue: WorkQueue[Any] = WorkQueue()
    pools.enqueue_pool_of_node(queue)(node_object("a", "lab"), None)
    pools.enqueue_pool_of_node(queue)(None, node_object("z", None))
    assert len(queue) == 1

    class Nodes:
        def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
            return node_object(name, "other") if name == "b" else None

    second: WorkQueue[Any] = WorkQueue()
    bound = {
        "metadata": {"name": "j-0-1", "namespace": "p"},
        "spec": {"job": "j", "jobUID": "u", "index": 0, "number": 1},
    }
    pools.enqueue_pool_of_attempt(second, Nodes())(None, {**bound, "spec": {**bound["spec"], "node": "b"}})  # type: ignore[arg-type]
    pools.enqueue_pool_of_attempt(second, Nodes())(None, bound)  # type: ignore[arg-type]
    assert len(second) == 1


# --- against the API server ----------------------------------------------------------------------


@pytest.fixture
async def informed(client: Client) -> AsyncIterator[tuple[pools.PoolStatus, dict[str, Informer]]]:
    informers = {plural: Informer(client, plural) for plural in ("pools", "nodes", "attempts")}
    informers["nodes"].add_index(pools.POOL_INDEX, pools.pool_of)
    informers["attempts"].add_index(pools.ATTEMPT_HOST_INDEX, pools.host_of)
    tasks = [asyncio.create_task(i.run()) for i in informers.values()]
    for informer in informers.values():
        await informer.wait_synced()
    yield pools.PoolStatus(client, informers["pools"], informers["nodes"], informers["attempts"]), informers
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(what: str, check: Any) -> None:
    for _ in range(100):
        if check():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


async def test_the_reconciler_writes_the_status_and_revokes_a_deleted_pools_hosts(
    client: Client, cluster: clusters.Cluster, informed: tuple[pools.PoolStatus, dict[str, Informer]]
) -> None:
    reconciler, informers = informed
    project = f"p-{uuid.uuid4().hex[:8]}"
    await client.create("projects", {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": project}})
    await client.create("pools", {"kind": "Pool", "metadata": {"name": "lab"}, "spec": {"maxHosts": 3}}, project)
    names = [f"ph-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        body = {
            "apiVersion": "nodus.dev/v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nodus.dev/pool": "lab", "nodus.dev/pool-project": project}},
            "spec": {"pool": {"project": project, "name": "lab"}, "provider": "pool"},
            "status": {"phase": "Ready", "capacity": {"gpus": 2, "accelerator": "l4-24g"}, "gpuIndexes": [0, 1]},
        }
        await client.create("nodes", body)
    await until("the informers", lambda: len(informers["nodes"].by_index(pools.POOL_INDEX, f"{project}/lab")) == 2)
    await until("the pool", lambda: informers["pools"].get(project, "lab") is not None)

    assert await reconciler.reconcile((project, "lab")) is None
    status = (await client.get("pools", "lab", project))["status"]
    assert (status["hosts"], status["readyHosts"], status["freeGPUs"], status["totalGPUs"]) == (2, 2, 4, 4)
    assert status["gpus"] == [{"accelerator": "l4-24g", "total": 4, "free": 4}]

    await client.delete("pools", "lab", project)
    await until(
        "the deletion", lambda: (informers["pools"].get(project, "lab") or {})["metadata"].get("deletionTimestamp")
    )
    assert await reconciler.reconcile((project, "lab")) is not None  # the hosts go first
    for name in names:
        with pytest.raises(errors.NotFound):
            await client.get("nodes", name)
    await until("the hosts to go", lambda: not informers["nodes"].by_index(pools.POOL_INDEX, f"{project}/lab"))
    assert await reconciler.reconcile((project, "lab")) is None
    with pytest.raises(errors.NotFound):
        await client.get("pools", "lab", project)
