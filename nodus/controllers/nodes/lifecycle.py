"""Node lifecycle: a node whose heartbeats lapse is lost, and so is everything it was running.

Keyed by node name. A node's heartbeats are renewals of its Lease ``node.<name>`` (ADR 0055), which this
controller creates for every Booting or Ready Node (owned by the Node, so it goes with it) and deletes once the
Node is gone. A ``Ready`` node whose last heartbeat (the latest of its Lease's renewTime, its status's heartbeatTime
and readyTime; a time in the future counts as now) is older than the grace period becomes ``Lost`` (reason
``HeartbeatLapsed``, condition Ready ``Unknown``). Renewals do not wake the controller: it looks again when the
grace period from the last heartbeat it saw ends, as Kubernetes' node lifecycle controller polls, so thousands of
renewals cost no reconciles. A node still ``Booting`` after the boot timeout becomes ``Failed`` (``BootFailed``).

Once a node is Lost or Failed, or is gone, every attempt assigned to it that has not ended is marked ``Lost`` with
the reason that says whose fault it was (``NodeLost``, ``Preempted``, ``BootFailed``), so the Job controller starts
a replacement. Writes carry the resourceVersion read; the agent's own last report wins a race by refusing ours.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects, phases
from nodus.apis.v1.lease import node_lease_name, node_of_lease
from nodus.client import Client, errors
from nodus.client.informers import Handler, Informer, Key
from nodus.client.workqueue import WorkQueue
from nodus.controllers.manager import Result
from nodus.controllers.nodes.provisioning import RAN_ON_INDEX

Object = dict[str, Any]

_ATTEMPT_REASON = {"BootFailed": "BootFailed", "Preempted": "Preempted", "CapacityBusy": "CapacityBusy"}


class NodeLifecycle:
    def __init__(
        self,
        client: Client,
        nodes: Informer,
        attempts: Informer,
        leases: Informer,
        *,
        grace: timedelta = timedelta(seconds=40),
        boot_timeout: timedelta = timedelta(minutes=15),
    ) -> None:
        self._client = client
        self._nodes = nodes
        self._attempts = attempts
        self._leases = leases
        self._grace = grace
        self._boot_timeout = boot_timeout

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        name = key[1]
        obj = self._nodes.get(None, name)
        now = units.now()
        if obj is None:
            await self._lose_attempts(name, "NodeLost", f"Node {name} was deleted.")
            await self._delete_lease(name)
            return None
        node = objects.read(objects.Node, obj)
        status = node.status
        phase = status.phase
        if phase in ("Booting", "Ready"):
            await self._ensure_lease(obj)
        if phase == "Ready":
            deadline = self._last_heartbeat(name, now, status.heartbeat_time, status.ready_time)
            if deadline is not None:
                deadline += self._grace
                if now < deadline:
                    return Result(requeue_after=(deadline - now).total_seconds() + 0.05)
            message = f"No heartbeat for more than {units.format_duration(self._grace)}."
            await self._mark(obj, "Lost", "HeartbeatLapsed", message, now)
            return None
        if phase == "Booting":
            started = units.time_or_none(status.boot_time)
            if started is not None and now < started + self._boot_timeout:
                return Result(requeue_after=(started + self._boot_timeout - now).total_seconds() + 0.05)
            message = f"The host did not register within {units.format_duration(self._boot_timeout)}."
            await self._mark(obj, "Failed", "BootFailed", message, now)
            return None
        if phase in ("Lost", "Failed"):
            reason = _ATTEMPT_REASON.get(status.reason or "", "NodeLost")
            await self._lose_attempts(name, reason, f"Node {name}: {status.message or status.reason}")
        return None

    def _last_heartbeat(self, name: str, now: datetime, *on_node: str | None) -> datetime | None:
        """The latest of the Lease's renewal and the times on the Node (registration, a heartbeat written there
        while the Lease did not exist). The node writes these times itself: one in the future counts as ``now``, so
        neither a skewed clock nor a hostile agent can keep a silent node alive past one grace period."""
        lease = self._leases.get(None, node_lease_name(name)) or {}
        renewed = (lease.get("spec") or {}).get("renewTime")
        times = [min(t, now) for t in (units.time_or_none(v) for v in (renewed, *on_node)) if t is not None]
        return max(times, default=None)

    async def _ensure_lease(self, node: Object) -> None:
        """Create the node's heartbeat Lease unless the cache shows it (another worker or an earlier pass may
        have: AlreadyExists is success)."""
        name = node["metadata"]["name"]
        lease_name = node_lease_name(name)
        if self._leases.get(None, lease_name) is not None:
            return
        lease = {
            "apiVersion": "nodus.dev/v1",
            "kind": "Lease",
            "metadata": {
                "name": lease_name,
                "labels": {labels.NODE: name},
                "ownerReferences": [
                    {"apiVersion": "nodus.dev/v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
                ],
            },
            "spec": {"holderIdentity": name, "leaseDurationSeconds": max(1, round(self._grace.total_seconds()))},
        }
        with contextlib.suppress(errors.AlreadyExists):
            await self._client.create("leases", lease)

    async def _delete_lease(self, name: str) -> None:
        """The gone Node's Lease (garbage collection would too, through its owner reference; this is sooner)."""
        if self._leases.get(None, node_lease_name(name)) is None:
            return
        with contextlib.suppress(errors.NotFound):
            await self._client.delete("leases", node_lease_name(name))

    async def _mark(self, node: Object, phase: str, reason: str, message: str, now: datetime) -> None:
        """Write ``phase`` (Ready ``Unknown``) over the Node's status as stored (``node``), kept as JSON."""
        stamp = units.format_time(now)
        shown = objects.read(objects.Node, node).status.conditions or ()
        conditions = [c.to_json() for c in shown if c.type != "Ready"]
        conditions.append(
            {"type": "Ready", "status": "Unknown", "reason": reason, "message": message, "lastTransitionTime": stamp}
        )
        status = {**(node.get("status") or {}), "phase": phase, "reason": reason, "message": message}
        status["conditions"] = conditions
        await self._client.update("nodes", {**node, "status": status}, subresource="status")

    async def _lose_attempts(self, node_name: str, reason: str, message: str) -> None:
        for attempt in self._attempts.by_index(RAN_ON_INDEX, node_name):
            if objects.read(objects.Attempt, attempt).status.phase in phases.ATTEMPT_FINISHED:
                continue
            await lose(self._client, attempt, reason, message)


async def lose(client: Client, attempt: Object, reason: str, message: str) -> None:
    """Mark an attempt Lost (capacity gone); a write refused as stale is retried by the caller."""
    status = {
        **(attempt.get("status") or {}),
        "phase": "Lost",
        "reason": reason,
        "message": message,
        "finishTime": units.format_time(units.now()),
    }
    with contextlib.suppress(errors.NotFound):
        await client.update(
            "attempts", {**attempt, "status": status}, attempt["metadata"]["namespace"], subresource="status"
        )


def enqueue_node_of_lease(queue: WorkQueue[Key]) -> Handler:
    """Wake the lifecycle of a node whose Lease appeared or went away; renewals wake nothing (see the module)."""

    def handler(old: Object | None, new: Object | None) -> None:
        if old is not None and new is not None:
            return
        node = node_of_lease(str(((new or old) or {}).get("metadata", {}).get("name") or ""))
        if node:
            queue.add((None, node))

    return handler
