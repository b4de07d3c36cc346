"""Hosts: makes each Node real through the provider, and takes it down when it is done.

Keyed by node name. A ``Booting`` node gets a host (``provider.boot``), or is adopted when a previous
controller already started it. A ``Terminating`` node is taken down: at once when it was released
idle, at its deadline when it was preempted (the agent has until then to stop its attempts). A node
``Lost`` or ``Failed`` has whatever is left of its host killed. Nodes that are over are deleted
once no live attempt refers to them, after a short retention so users can see what happened.

With a provider that can inject faults (:class:`~nodus.cloud.provider.FaultInjection`: the simulated
cloud), fault injection arrives the way a user asks for any action: an annotation
``sim.nodus.dev/<action>-requested-at`` (``nodus sim preempt|kill|fail-boot NODE``), handled once per
value (the handled value is recorded in ``sim.nodus.dev/<action>-handled-at``). Other providers leave
those annotations alone.

The controller knows its provider only as a :class:`~nodus.cloud.provider.Provider`.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.client import Client, errors
from nodus.client.informers import Informer
from nodus.cloud.provider import FaultInjection, Provider
from nodus.controllers.jobs.slots import TERMINAL
from nodus.controllers.manager import Result
from nodus.controllers.nodes import jointokens
from nodus.controllers.nodes.provisioning import RAN_ON_INDEX

Object = dict[str, Any]
log = logging.getLogger("nodus.controllers.hosts")

TERMINATE_AT_ANNOTATION = "nodus.dev/terminate-at"
SIM_ACTIONS = ("preempt", "kill", "fail-boot")
RETENTION = timedelta(minutes=2)


def requested(action: str) -> str:
    return f"sim.nodus.dev/{action}-requested-at"


def handled(action: str) -> str:
    return f"sim.nodus.dev/{action}-handled-at"


class Hosts:
    def __init__(
        self, client: Client, provider: Provider, nodes: Informer, offerings: Informer, attempts: Informer
    ) -> None:
        self._client = client
        self._provider = provider
        # Fault requests are for providers that can inject faults; on any other they are ignored.
        self._injector: FaultInjection | None = provider if isinstance(provider, FaultInjection) else None
        self._nodes = nodes
        self._offerings = offerings
        self._attempts = attempts
        # Nodes whose join token this process has deleted (it is also deleted with the Node).
        self._registered: set[str] = set()

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        name = key[1]
        node = self._nodes.get(None, name)
        if node is None:
            self._registered.discard(name)
            await self._provider.terminate(name, 0)
            return None
        if (node.get("spec") or {}).get("provider") != self._provider.name:
            return None  # a host someone else runs (an agent started by hand)
        if (node.get("status") or {}).get("phase") in ("Ready", "Terminating") and not self._provider.is_up(name):
            # A new leader: take over the hosts a previous one started before injecting faults into them.
            self._provider.adopt(node)
        if self._injector is not None:
            node = await self._faults(node, self._injector)
        status = node.get("status") or {}
        phase = status.get("phase")
        now = units.now()
        if phase == "Booting" and not self._provider.is_up(name) and not self._provider.adopt(node):
            offering = self._offerings.get(None, node["spec"]["offering"])
            if offering is None:
                await self._set_status(node, "Failed", "BootFailed", f"Offering {node['spec']['offering']} is gone.")
                return None
            await self._provider.boot(node, offering, await jointokens.issue(self._client, node))
            return None
        if phase == "Ready" and name not in self._registered:
            # The agent has its own credential now: its join token is of no more use to anyone.
            await jointokens.revoke(self._client, node)
            self._registered.add(name)
        if phase == "Ready" and not self._provider.is_up(name):
            self._provider.adopt(node)
        if phase == "Ready" and (record := self._unrecorded(node)):
            await self._client.patch("nodes", name, {"metadata": {"annotations": record}})
            return None
        if phase == "Terminating":
            deadline = units.time_or_none((node["metadata"].get("annotations") or {}).get(TERMINATE_AT_ANNOTATION))
            if deadline is not None and now < deadline:
                return Result(requeue_after=(deadline - now).total_seconds() + 0.05)
            await self._provider.terminate(name, 0 if deadline is not None else 10)
            if self._live(name):
                # The host is gone with attempts its agent never reported: they are lost with it.
                reason = str(status.get("reason") or "NodeLost")
                await self._set_status(node, "Lost", reason, "The host went away before its attempts ended.")
                return None
            return await self._delete_when_done(node, now)
        if phase in ("Lost", "Failed"):
            self._provider.kill(name)
            await self._provider.terminate(name, 0)
            return await self._delete_when_done(node, now)
        return None

    async def _delete_when_done(self, node: Object, now: Any) -> Result | None:
        name = node["metadata"]["name"]
        if self._live(name):
            return Result(requeue_after=1.0)
        over = units.time_or_none(node["metadata"].get("creationTimestamp"))
        for condition in (node.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Ready":
                over = units.time_or_none(condition.get("lastTransitionTime")) or over
        if (node.get("status") or {}).get("phase") == "Terminating" or over is None or now >= over + RETENTION:
            with contextlib.suppress(errors.NotFound):
                await self._client.delete("nodes", name, uid=node["metadata"]["uid"])
            return None
        return Result(requeue_after=(over + RETENTION - now).total_seconds() + 0.05)

    def _unrecorded(self, node: Object) -> dict[str, str]:
        """What the provider wants recorded on ``node`` (to adopt its host later) that the Node does not carry."""
        carried = node["metadata"].get("annotations") or {}
        wanted = self._provider.annotations(node["metadata"]["name"])
        return {key: value for key, value in wanted.items() if carried.get(key) != value}

    def _live(self, name: str) -> bool:
        attempts = self._attempts.by_index(RAN_ON_INDEX, name)
        return any((a.get("status") or {}).get("phase") not in TERMINAL for a in attempts)

    async def _faults(self, node: Object, injector: FaultInjection) -> Object:
        annotations = node["metadata"].get("annotations") or {}
        for action in SIM_ACTIONS:
            value = annotations.get(requested(action))
            if not value or annotations.get(handled(action)) == value:
                continue
            node = await self._inject(node, action, injector)
            patch = {"metadata": {"annotations": {handled(action): value}}}
            node = await self._client.patch("nodes", node["metadata"]["name"], patch)
        return node

    async def _inject(self, node: Object, action: str, injector: FaultInjection) -> Object:
        name = node["metadata"]["name"]
        phase = (node.get("status") or {}).get("phase")
        log.warning("simulated cloud: %s node %s (phase %s)", action, name, phase)
        if action == "kill":
            self._provider.kill(name)
            return node
        if action == "fail-boot":
            if injector.fail_boot(name) or phase == "Booting":
                return await self._set_status(node, "Failed", "BootFailed", "The host failed to boot (simulated).")
            return node
        annotations = node["metadata"].get("annotations") or {}
        notice = units.parse_duration(annotations.get("sim.nodus.dev/preempt-notice") or "30s")
        # A retry (the status write below lost to a heartbeat) keeps the deadline the first try announced.
        at = units.time_or_none(annotations.get(TERMINATE_AT_ANNOTATION)) or units.now() + notice
        patch = {
            "metadata": {"annotations": {TERMINATE_AT_ANNOTATION: units.format_time(at)}},
            "spec": {"unschedulable": True},
        }
        node = await self._client.patch("nodes", name, patch)
        return await self._set_status(node, "Terminating", "Preempted", self._preempted_message(node, at))

    def _preempted_message(self, node: Object, at: datetime) -> str:
        """Says what was reclaimed as it was sold: interruptible capacity, or an on-demand host (which a real
        provider takes back only for maintenance; here, ``nodus sim preempt``)."""
        offering = self._offerings.get(None, str((node.get("spec") or {}).get("offering") or ""))
        if offering is not None and (offering.get("spec") or {}).get("interruptible"):
            capacity = "interruptible capacity"
        else:
            capacity = "on-demand capacity, taken back as nodus sim preempt simulates"
        return f"The provider reclaimed the host ({capacity}); it goes away at {units.format_time(at)}."

    async def _set_status(self, node: Object, phase: str, reason: str, message: str) -> Object:
        """A merge patch of the phase, without a precondition: the agent's heartbeats write the same status every
        half second, and a guarded write would lose to them again and again."""
        patch = {"status": {"phase": phase, "reason": reason, "message": message}}
        return await self._client.patch("nodes", node["metadata"]["name"], patch, subresource="status")
