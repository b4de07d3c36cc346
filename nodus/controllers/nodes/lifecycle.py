"""Node lifecycle: a node whose heartbeats lapse is lost, and so is everything it was running.

Keyed by node name. A ``Ready`` node whose last heartbeat is older than the grace period becomes
``Lost`` (reason ``HeartbeatLapsed``, condition Ready ``Unknown``); a node still ``Booting`` after the
boot timeout becomes ``Failed`` (``BootFailed``). Once a node is Lost or Failed, or is gone, every
attempt assigned to it that has not ended is marked ``Lost`` with the reason that says whose fault
it was (``NodeLost``, ``Preempted``, ``BootFailed``), so the Job controller starts a replacement.
Writes carry the resourceVersion read; the agent's own last report wins a race by refusing ours.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import objects, phases
from nodus.client import Client, errors
from nodus.client.informers import Informer
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
        *,
        grace: timedelta = timedelta(seconds=40),
        boot_timeout: timedelta = timedelta(minutes=15),
    ) -> None:
        self._client = client
        self._nodes = nodes
        self._attempts = attempts
        self._grace = grace
        self._boot_timeout = boot_timeout

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        name = key[1]
        obj = self._nodes.get(None, name)
        now = units.now()
        if obj is None:
            await self._lose_attempts(name, "NodeLost", f"Node {name} was deleted.")
            return None
        node = objects.read(objects.Node, obj)
        status = node.status
        phase = status.phase
        if phase == "Ready":
            deadline = units.time_or_none(status.heartbeat_time or status.ready_time)
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
