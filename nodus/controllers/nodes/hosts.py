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

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects, phases
from nodus.client import Client, errors
from nodus.client.informers import Informer
from nodus.cloud.provider import BootRefused, FaultInjection, Provider, Sweeping
from nodus.controllers.manager import Result
from nodus.controllers.nodes import jointokens
from nodus.controllers.nodes.provisioning import RAN_ON_INDEX

Object = dict[str, Any]
log = logging.getLogger("nodus.controllers.hosts")

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
        obj = self._nodes.get(None, name)
        if obj is None:
            self._registered.discard(name)
            await self._provider.terminate(name, 0)
            return None
        node = objects.read(objects.Node, obj)
        if node.spec.provider != self._provider.name:
            return None  # a host someone else runs (an agent started by hand)
        if node.status.phase in ("Ready", "Terminating") and not self._provider.is_up(name):
            # A new leader: take over the hosts a previous one started before injecting faults into them.
            self._provider.adopt(obj)
        if self._injector is not None:
            obj = await self._faults(obj, self._injector)
            node = objects.read(objects.Node, obj)
        status = node.status
        phase = status.phase
        now = units.now()
        notice = status.preemption_notice
        if notice is not None and phase in ("Booting", "Ready"):
            # The host's agent read the provider's notice (an EC2 spot interruption): the same path as a preemption.
            at = units.time_or_none(notice.time) or now
            message = f"The provider reclaims the host ({notice.source}: {notice.action} at {units.format_time(at)})."
            await self._preempt(node, at, message)
            return None
        if phase == "Booting" and not self._provider.is_up(name) and not self._provider.adopt(obj):
            await self._boot(obj, node)
            return None
        if phase == "Ready" and name not in self._registered:
            # The agent has its own credential now: its join token is of no more use to anyone.
            await jointokens.revoke(self._client, obj)
            self._registered.add(name)
        if phase == "Ready" and not self._provider.is_up(name):
            self._provider.adopt(obj)
        if phase == "Ready" and (record := self._unrecorded(node)):
            await self._client.patch("nodes", name, {"metadata": {"annotations": record}})
            return None
        if phase == "Terminating":
            return await self._take_down(node, now)
        if phase in ("Lost", "Failed"):
            self._provider.kill(name)
            await self._provider.terminate(name, 0)
            return await self._delete_when_done(node, now)
        return None

    async def _boot(self, obj: Object, node: objects.Node) -> None:
        """Have the provider boot a host for the ``Booting`` Node ``node`` (``obj`` as stored), with a join token
        issued for it. When the Node's Offering is gone or the provider refuses, the Node is set ``Failed`` instead."""
        name = node.metadata.name
        offering = self._offerings.get(None, node.spec.offering or "")
        if offering is None:
            await self._set_status(name, "Failed", "BootFailed", f"Offering {node.spec.offering} is gone.")
            return
        try:
            await self._provider.boot(obj, offering, await jointokens.issue(self._client, obj))
        except BootRefused as refused:
            # Out of capacity (CapacityBusy) or a setting to fix: the Node fails and its attempt is placed again.
            log.warning("node %s did not boot: %s", name, refused.message)
            await self._set_status(name, "Failed", refused.reason, refused.message)

    async def _take_down(self, node: objects.Node, now: datetime) -> Result | None:
        """Take down the host of the ``Terminating`` Node ``node``: a preempted one (it carries a deadline) is requeued
        until its deadline and then terminated without grace; one released idle is terminated at once, its agent given
        10 seconds. Attempts on it still live then are lost with it (the Node turns ``Lost``); otherwise the Node is
        deleted when done (:meth:`_delete_when_done`)."""
        name = node.metadata.name
        deadline = units.time_or_none(node.metadata.annotations.get(labels.TERMINATE_AT))
        if deadline is not None and now < deadline:
            return Result(requeue_after=(deadline - now).total_seconds() + 0.05)
        await self._provider.terminate(name, 0 if deadline is not None else 10)
        if self._live(name):
            # The host is gone with attempts its agent never reported: they are lost with it.
            reason = node.status.reason or "NodeLost"
            await self._set_status(name, "Lost", reason, "The host went away before its attempts ended.")
            return None
        return await self._delete_when_done(node, now)

    async def _delete_when_done(self, node: objects.Node, now: Any) -> Result | None:
        name = node.metadata.name
        if self._live(name):
            return Result(requeue_after=1.0)
        over = units.time_or_none(node.metadata.creation_timestamp)
        for condition in node.status.conditions or ():
            if condition.type == "Ready":
                over = units.time_or_none(condition.last_transition_time) or over
        if node.status.phase == "Terminating" or over is None or now >= over + RETENTION:
            with contextlib.suppress(errors.NotFound):
                await self._client.delete("nodes", name, uid=node.metadata.uid)
            return None
        return Result(requeue_after=(over + RETENTION - now).total_seconds() + 0.05)

    def _unrecorded(self, node: objects.Node) -> dict[str, str]:
        """What the provider wants recorded on ``node`` (to adopt its host later) that the Node does not carry."""
        carried = node.metadata.annotations
        wanted = self._provider.annotations(node.metadata.name)
        return {key: value for key, value in wanted.items() if carried.get(key) != value}

    def _live(self, name: str) -> bool:
        attempts = self._attempts.by_index(RAN_ON_INDEX, name)
        return any(objects.read(objects.Attempt, a).status.phase not in phases.ATTEMPT_FINISHED for a in attempts)

    async def _faults(self, obj: Object, injector: FaultInjection) -> Object:
        """Inject each fault newly requested on the Node (``obj``, as stored); returns the Node as last written."""
        annotations = objects.read(objects.Node, obj).metadata.annotations
        for action in SIM_ACTIONS:
            value = annotations.get(requested(action))
            if not value or annotations.get(handled(action)) == value:
                continue
            obj = await self._inject(obj, action, injector)
            patch = {"metadata": {"annotations": {handled(action): value}}}
            obj = await self._client.patch("nodes", obj["metadata"]["name"], patch)
        return obj

    async def _inject(self, obj: Object, action: str, injector: FaultInjection) -> Object:
        """Inject ``action`` into the host of the Node ``obj`` (as stored); returns the Node as last written."""
        node = objects.read(objects.Node, obj)
        name = node.metadata.name
        phase = node.status.phase
        log.warning("simulated cloud: %s node %s (phase %s)", action, name, phase)
        if action == "kill":
            self._provider.kill(name)
            return obj
        if action == "fail-boot":
            if injector.fail_boot(name) or phase == "Booting":
                return await self._set_status(name, "Failed", "BootFailed", "The host failed to boot (simulated).")
            return obj
        annotations = node.metadata.annotations
        notice = units.parse_duration(annotations.get("sim.nodus.dev/preempt-notice") or "30s")
        # A retry (the status write below lost to a heartbeat) keeps the deadline the first try announced.
        at = units.time_or_none(annotations.get(labels.TERMINATE_AT)) or units.now() + notice
        return await self._preempt(node, at, self._preempted_message(node, at))

    async def _preempt(self, node: objects.Node, at: datetime, message: str) -> Object:
        """The provider takes the host back at ``at``: the Node is cordoned, carries the deadline and turns
        ``Terminating`` (``Preempted``); its agent stops its attempts before the deadline and the host goes then."""
        name = node.metadata.name
        patch = {
            "metadata": {"annotations": {labels.TERMINATE_AT: units.format_time(at)}},
            "spec": {"unschedulable": True},
        }
        await self._client.patch("nodes", name, patch)
        return await self._set_status(name, "Terminating", "Preempted", message)

    async def sweep_forever(self, interval: float) -> None:
        """While leading, with a provider that lists its hosts (:class:`~nodus.cloud.provider.Sweeping`): every
        ``interval`` seconds, from the start, hosts of unknown Nodes are terminated and those of known ones adopted."""
        if not isinstance(self._provider, Sweeping):
            return
        while True:
            views = (objects.read(objects.Node, obj) for obj in self._nodes.items())
            known = {v.metadata.name: v.metadata.uid for v in views if v.spec.provider == self._provider.name}
            try:
                swept = await self._provider.sweep(known)
            except Exception:
                log.exception("sweeping the provider's hosts failed; trying again in %.0fs", interval)
            else:
                if swept:
                    log.warning("terminated hosts no Node accounts for: %s", ", ".join(swept))
            await asyncio.sleep(interval)

    def _preempted_message(self, node: objects.Node, at: datetime) -> str:
        """Says what was reclaimed as it was sold: interruptible capacity, or an on-demand host (which a real
        provider takes back only for maintenance; here, ``nodus sim preempt``)."""
        offering = self._offerings.get(None, node.spec.offering or "")
        if offering is not None and objects.read(objects.Offering, offering).spec.interruptible:
            capacity = "interruptible capacity"
        else:
            capacity = "on-demand capacity, taken back as nodus sim preempt simulates"
        return f"The provider reclaimed the host ({capacity}); it goes away at {units.format_time(at)}."

    async def _set_status(self, name: str, phase: str, reason: str, message: str) -> Object:
        """A merge patch of the phase, without a precondition: the agent's heartbeats write the same status every
        half second, and a guarded write would lose to them again and again."""
        patch = {"status": {"phase": phase, "reason": reason, "message": message}}
        return await self._client.patch("nodes", name, patch, subresource="status")
