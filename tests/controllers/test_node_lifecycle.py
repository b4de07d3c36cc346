"""The node lifecycle controller over Leases (ADR 0055), with informers and a client that record what it does."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.client.workqueue import WorkQueue
from nodus.controllers.nodes.lifecycle import NodeLifecycle, enqueue_node_of_lease

Object = dict[str, Any]
GRACE = timedelta(seconds=40)


class Cache:
    """What a controller reads of an informer: objects by name."""

    def __init__(self, *objects: Object) -> None:
        self.objects = {obj["metadata"]["name"]: obj for obj in objects}

    def get(self, namespace: str | None, name: str) -> Object | None:
        return self.objects.get(name)

    def by_index(self, index: str, value: str) -> list[Object]:
        return []


class Recorder:
    """A client that records writes and answers them as the server would."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    async def create(self, plural: str, body: Object, namespace: str | None = None) -> Object:
        self.calls.append(("create", plural, body))
        return body

    async def update(self, plural: str, body: Object, namespace: str | None = None, **kw: Any) -> Object:
        self.calls.append(("update", plural, body))
        return body

    async def delete(self, plural: str, name: str, namespace: str | None = None, **kw: Any) -> Object:
        self.calls.append(("delete", plural, name))
        return {}


def ago(seconds: float) -> str:
    return units.format_micro_time(units.now() - timedelta(seconds=seconds))


def node(name: str = "h1", phase: str = "Ready", **status: Any) -> Object:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"offering": "o"},
        "status": {"phase": phase, **status},
    }


def lease(node_name: str, renewed: str | None) -> Object:
    spec = {"holderIdentity": node_name, **({"renewTime": renewed} if renewed else {})}
    return {"metadata": {"name": f"node.{node_name}", "labels": {"nodus.dev/node": node_name}}, "spec": spec}


def lifecycle(client: Recorder, nodes: Cache, leases: Cache) -> NodeLifecycle:
    return NodeLifecycle(client, nodes, Cache(), leases, grace=GRACE)  # type: ignore[arg-type]


async def test_a_recent_renewal_keeps_a_node_whose_registration_is_old() -> None:
    client = Recorder()
    ready = node(readyTime=ago(300), heartbeatTime=ago(300))
    result = await lifecycle(client, Cache(ready), Cache(lease("h1", ago(5)))).reconcile((None, "h1"))
    assert client.calls == []
    assert result is not None and 30 < (result.requeue_after or 0) <= 35.1  # it looks again when the grace ends


async def test_a_lapsed_renewal_loses_the_node() -> None:
    client = Recorder()
    ready = node(readyTime=ago(300))
    await lifecycle(client, Cache(ready), Cache(lease("h1", ago(41)))).reconcile((None, "h1"))
    ((verb, plural, written),) = client.calls
    assert (verb, plural, written["status"]["phase"], written["status"]["reason"]) == (
        "update",
        "nodes",
        "Lost",
        "HeartbeatLapsed",
    )


async def test_a_renewal_dated_in_the_future_counts_as_now() -> None:
    client = Recorder()
    future = units.format_micro_time(units.now() + timedelta(days=365))
    result = await lifecycle(client, Cache(node(readyTime=ago(300))), Cache(lease("h1", future))).reconcile(
        (None, "h1")
    )
    assert result is not None and (result.requeue_after or 0) <= GRACE.total_seconds() + 0.1


async def test_a_node_without_a_lease_gets_one_owned_by_it_and_a_gone_node_loses_it() -> None:
    client = Recorder()
    await lifecycle(client, Cache(node(phase="Booting", bootTime=ago(1))), Cache()).reconcile((None, "h1"))
    ((verb, plural, created),) = client.calls
    assert (verb, plural, created["metadata"]["name"]) == ("create", "leases", "node.h1")
    assert created["metadata"]["labels"] == {"nodus.dev/node": "h1"}
    owner = {"apiVersion": "nodus.dev/v1", "kind": "Node", "name": "h1", "uid": "uid-h1"}
    assert created["metadata"]["ownerReferences"] == [owner]
    assert created["spec"] == {"holderIdentity": "h1", "leaseDurationSeconds": 40}

    client = Recorder()
    await lifecycle(client, Cache(), Cache(lease("h1", ago(1)))).reconcile((None, "h1"))
    assert client.calls == [("delete", "leases", "node.h1")]


def test_renewals_wake_nothing_and_a_lease_maps_to_its_node_by_name_only() -> None:
    queue: WorkQueue[Any] = WorkQueue()
    handler = enqueue_node_of_lease(queue)
    renewed, again = lease("h1", ago(2)), lease("h1", ago(1))
    handler(renewed, again)  # a renewal
    handler(None, {"metadata": {"name": "nodus-controllers"}, "spec": {}})  # the election lease
    assert len(queue) == 0
    handler(None, {**renewed, "metadata": {**renewed["metadata"], "labels": {"nodus.dev/node": "h2"}}})
    assert len(queue) == 1  # h1, whatever the label says
