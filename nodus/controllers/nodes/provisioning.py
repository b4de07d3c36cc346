"""The provisioner: gives each placed Attempt a host, and releases hosts nobody uses.

After the scheduler has placed an Attempt (``status.placement``: an offering, and a warm node when
it chose to reuse one) and the billing controller has funded it (a hold: ``status.cost.fundedUntilTime``;
for a gang rank, every rank of its epoch), the provisioner assigns it a Node: the warm one if it is still free, else a
new Node in phase ``Booting`` that the provider brings up. The assignment is one write to the
Attempt (``spec.node``, ``spec.offering`` and the ``nodus.dev/node`` label its agent selects on),
guarded by the resourceVersion read, so a stale view is refused and retried. A Node created for an
Attempt whose assignment then fails is not lost: it is idle capacity and is reused or released.

A placement on a pool host (``placement.pool``) always names its node, and the provisioner never
creates a Node for it: it assigns the node while the placement still fits there (Ready, schedulable,
its GPUs free and its cpu and memory within what is left), and otherwise gives the attempt up as
``Lost`` (``CapacityBusy``, not charged) so that the Job places a new one. A placement that shares a
host (``gpuIndexes``) is checked the same way on its warm host; hosts are shared, so "free" means
"the attempt still fits" (ADR 0048). Without a provider (``--provider none``) nothing boots a new
Node, so a warm host that is no longer free gives the attempt up the same way.

Keyed by Node, it keeps idle hosts warm for the last Job's ``scaledownWindow`` (at least a short
reuse grace, so the next index of the same Job lands on it) and then marks them ``Terminating``;
hosts started by hand and pool hosts are never released (their owners release them).
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from datetime import timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects, phases
from nodus.client import Client, errors
from nodus.client.informers import Handler, Informer
from nodus.client.workqueue import WorkQueue
from nodus.controllers.jobs.gangs import ASSEMBLY_REASONS
from nodus.controllers.manager import Result
from nodus.scheduler import capacity
from nodus.scheduler.rooms import Demand, Room

Object = dict[str, Any]

NODE_INDEX = "node"
RAN_ON_INDEX = "ran-on"
REUSE_GRACE = timedelta(seconds=10)
#: Nodes of these providers are released by whoever brought them, never scaled down here.
NEVER_RELEASED = frozenset({"manual", "pool"})


def nodes_of(obj: Object) -> list[str]:
    """The nodes an attempt occupies or is about to: its assigned node and a warm node chosen for it."""
    attempt = objects.read(objects.Attempt, obj)
    if attempt.status.phase in phases.ATTEMPT_FINISHED:
        return []
    placement = attempt.status.placement
    names = {attempt.spec.node, placement.node if placement is not None else None}
    return sorted(n for n in names if n)


def ran_on(obj: Object) -> list[str]:
    """The node an attempt was assigned to, whatever its phase."""
    node = objects.read(objects.Attempt, obj).spec.node
    return [node] if node else []


def idle_since(node: Object, ran: list[Object]) -> str:
    """When a host became idle: its last attempt's end, else when it registered (or was created).

    ``status.idleSince`` is written when a host goes idle and not cleared while it is busy (one write
    fewer per reuse), so a value older than this is left over from an earlier idle spell.
    """
    ended = [t for a in ran if (t := objects.read(objects.Attempt, a).status.finish_time)]
    host = objects.read(objects.Node, node)
    start = host.status.ready_time or host.metadata.creation_timestamp or ""
    return max([start, *ended])


def enqueue_gang(queue: WorkQueue[tuple[str | None, str]]) -> Handler:
    """A handler that queues every rank of a changed gang rank's epoch: a rank waiting for its peers' holds
    (:meth:`AttemptProvisioner._gang_funded`) is looked at again as soon as the last one is placed."""

    def handler(old: Object | None, new: Object | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        attempt = objects.read(objects.Attempt, obj)
        for member in attempt.spec.gang.members if attempt.spec.gang is not None else ():
            queue.add((attempt.metadata.namespace, member))

    return handler


def never_came(ran: list[Object]) -> bool:
    """A host still booting whose attempt was given up because the host did not come in time for its gang: it
    is released rather than kept warm, so that the gang's next assembly is not placed on it again."""
    stops = (objects.read(objects.Attempt, a).spec.stop for a in ran)
    return any(stop is not None and stop.reason in ASSEMBLY_REASONS for stop in stops)


def node_for(offering: objects.Offering, provider: str, now: str, name: str | None = None) -> Object:
    """A new Node (in phase Booting) of ``offering``'s shape, to be created; named ``name`` or at random."""
    offering_name = offering.metadata.name
    name = name or f"{offering_name}-{secrets.token_hex(3)}"
    shape = offering.spec
    capacity: Object = {"memory": shape.memory, "disk": shape.disk, "gpus": shape.gpus, "cpu": str(shape.vcpu)}
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {labels.OFFERING: offering_name}},
        "spec": {"offering": offering_name, "provider": provider},
        "status": {
            "phase": "Booting",
            "bootTime": now,
            "capacity": capacity,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "Booting",
                    "message": "The host is booting.",
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def unfit(
    attempt_obj: Object, node_obj: Object | None, others: list[Object], offering_obj: Object | None
) -> str | None:
    """Why an attempt's placement no longer fits its host (a reason that reads after the host), or None. Pure.

    ``others`` are the unfinished attempts assigned to the host (``spec.node``), ``offering_obj`` the host's
    offering (None for a pool host). A placement with ``gpuIndexes`` shares its host: it fits while its GPUs
    are free and its cpu and memory fit beside the others (a request left unset counts as its per-GPU share).
    One without takes the whole host: nothing else may be there. A pool host must be Ready.
    """
    if node_obj is None:
        return "is gone"
    node = objects.read(objects.Node, node_obj)
    phase = node.status.phase or "Booting"
    if phase not in phases.NODE_USABLE or (node.spec.pool is not None and phase != "Ready"):
        return f"is {phase}"
    if node.spec.unschedulable:
        return "is cordoned"
    placement = objects.read(objects.Attempt, attempt_obj).status.placement
    indexes = placement.gpu_indexes if placement is not None else None
    if indexes is None and node.spec.pool is None:
        return "is in use" if others else None
    host = capacity.Host.from_object(node_obj, busy=False, uses=[capacity.Use.from_object(a) for a in others])
    if host.shape is not None:
        room = Room.of(host, host.shape.gpu_indexes, host.shape.vcpu, host.shape.memory)
    elif offering_obj is not None:
        offering = capacity.Offering.from_object(offering_obj)
        room = Room.of(host, tuple(range(offering.gpus)), offering.vcpu, offering.memory)
    else:
        return "is of an offering gone from the price book"
    held = capacity.Use.from_object(attempt_obj)
    demand = Demand(len(held.gpus), held.cpu, held.memory, held.whole)
    return room.why_not_at(None if indexes is None else tuple(indexes), demand)


class AttemptProvisioner:
    """Assigns placed attempts to hosts; keyed by (project, attempt name)."""

    def __init__(self, client: Client, attempts: Informer, nodes: Informer, offerings: Informer, provider: str) -> None:
        self._client = client
        self._attempts = attempts
        self._nodes = nodes
        self._offerings = offerings
        self._provider = provider

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        obj = self._attempts.get(*key)
        if obj is None:
            return None
        attempt = objects.read(objects.Attempt, obj)
        spec, status = attempt.spec, attempt.status
        placement = status.placement
        if (
            status.phase != "Provisioning"
            or spec.node
            or spec.stop is not None
            or placement is None
            or not (placement.offering or (placement.pool and placement.node))
            # No capacity before its hold: the billing controller funds the attempt first (ADR 0017).
            or not _funded(attempt)
        ):
            return None
        if not self._gang_funded(attempt):
            # A gang's hosts come up together: none is billed while another rank waits for its hold. The last
            # rank's hold brings every rank back (``enqueue_gang``).
            return None
        node_name = placement.node
        unfit = self._unfit(node_name, obj) if node_name else "is not named"
        if unfit is not None and (placement.pool or self._provider == "manual"):
            # A pool host is never replaced by a new Node, and without a provider nothing would boot one.
            where = f"pool {placement.pool} host {node_name}" if placement.pool else f"host {node_name}"
            await self._give_up(obj, f"The {where} {unfit} since it was chosen; the Job places a new attempt.")
            return None
        if unfit is not None or not node_name:
            offering = self._offerings.get(None, placement.offering or "")
            if offering is None:
                raise RuntimeError(f"offering {placement.offering} is gone")
            node_name = await self._new_node(objects.read(objects.Offering, offering), attempt)
        # Billing starts when capacity is assigned (not when the attempt was placed: it may have waited for
        # its hold since). The time is written first and the node second: billing needs both, so a
        # controller killed between the two writes leaves an attempt that bills nothing yet, and the retry
        # writes a later time before assigning the node. (The other order could leave a node without a
        # time, billed from scheduledTime, waiting for the hold included.)
        # Both writes are conditional on the attempt as read, so a stop asked for meanwhile is never missed.
        started = {
            "metadata": {"resourceVersion": attempt.metadata.resource_version},
            "status": {"provisioningTime": units.format_time(units.now())},
        }
        namespace = attempt.metadata.namespace
        written = await self._client.patch("attempts", key[1], started, namespace, subresource="status")
        patch = {
            "metadata": {
                "resourceVersion": written["metadata"]["resourceVersion"],
                "labels": {labels.NODE: node_name},
            },
            "spec": {"node": node_name, **({"offering": placement.offering} if placement.offering else {})},
        }
        await self._client.patch("attempts", key[1], patch, namespace)
        return None

    async def _give_up(self, obj: Object, message: str) -> None:
        """The attempt's host is no longer fit and no new one may be made: it ends ``Lost`` (``CapacityBusy``: not
        charged, it never ran) and the Job controller places a replacement. Conditional on the attempt as read."""
        status = {
            **(obj.get("status") or {}),
            "phase": "Lost",
            "reason": "CapacityBusy",
            "message": message,
            "finishTime": units.format_time(units.now()),
        }
        with contextlib.suppress(errors.NotFound, errors.Conflict):
            await self._client.update(
                "attempts", {**obj, "status": status}, obj["metadata"]["namespace"], subresource="status"
            )

    def _unfit(self, node_name: str, obj: Object) -> str | None:
        """Why the attempt's placement no longer fits ``node_name`` (see :func:`unfit`), from the informers."""
        node = self._nodes.get(None, node_name)
        uid = obj["metadata"].get("uid")
        others = [
            other
            for other in self._attempts.by_index(NODE_INDEX, node_name)
            if (other.get("spec") or {}).get("node") == node_name and other["metadata"].get("uid") != uid
        ]
        offering = (node.get("spec") or {}).get("offering") if node is not None else None
        return unfit(obj, node, others, self._offerings.get(None, offering) if offering else None)

    async def _new_node(self, offering: objects.Offering, attempt: objects.Attempt) -> str:
        """A new host for ``attempt``, named after the attempt: a retry after a conflict (or a failover mid-way)
        finds the host it already created instead of booting another one."""
        digest = hashlib.sha256(attempt.metadata.uid.encode()).hexdigest()[:6]
        name = f"{offering.metadata.name}-{digest}"
        now = units.format_time(units.now())
        try:
            created = await self._client.create("nodes", node_for(offering, self._provider, now, name))
            return str(created["metadata"]["name"])
        except errors.AlreadyExists:
            existing = self._nodes.get(None, name) or await self._client.get("nodes", name)
            if objects.read(objects.Node, existing).status.phase in phases.NODE_USABLE and self._free(name, attempt):
                return name
        created = await self._client.create("nodes", node_for(offering, self._provider, now))
        return str(created["metadata"]["name"])

    def _gang_funded(self, attempt: objects.Attempt) -> bool:
        """Every rank of the attempt's gang epoch is funded (a plain attempt: True)."""
        members = attempt.spec.gang.members if attempt.spec.gang is not None else ()
        for name in members:
            member = self._attempts.get(attempt.metadata.namespace, name)
            if member is None or not _funded(objects.read(objects.Attempt, member)):
                return False
        return True

    def _free(self, node_name: str, attempt: objects.Attempt) -> bool:
        """Whether the host created for ``attempt`` (found again after a retry) is free for it."""
        obj = self._nodes.get(None, node_name)
        if obj is None:
            return False
        node = objects.read(objects.Node, obj)
        if node.status.phase not in phases.NODE_USABLE or node.spec.unschedulable:
            return False
        others = (objects.read(objects.Attempt, a) for a in self._attempts.by_index(NODE_INDEX, node_name))
        return not any(other.spec.node == node_name for other in others if other.metadata.uid != attempt.metadata.uid)


def _funded(attempt: objects.Attempt) -> bool:
    """Billing has funded the attempt: its hold shows a funded edge (``status.cost.fundedUntilTime``)."""
    return attempt.status.cost is not None and bool(attempt.status.cost.funded_until_time)


class IdleHosts:
    """Keeps idle hosts warm for a while, then marks them Terminating; keyed by node name."""

    def __init__(self, client: Client, attempts: Informer, nodes: Informer) -> None:
        self._client = client
        self._attempts = attempts
        self._nodes = nodes

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        name = key[1]
        obj = self._nodes.get(None, name)
        if obj is None:
            return None
        node = objects.read(objects.Node, obj)
        status = node.status
        if node.spec.provider in NEVER_RELEASED or node.spec.pool is not None:
            return None  # hosts started by hand and pool hosts are released by whoever brought them
        if self._attempts.by_index(NODE_INDEX, name):
            return None  # in use; its idle window is written afresh when it next goes idle
        if status.phase == "Booting" and never_came(self._attempts.by_index(RAN_ON_INDEX, name)):
            await self._release(node, "AssemblyTimeout", "It did not come up in time for its gang; released.")
            return None
        if status.phase != "Ready":
            return None
        now = units.now()
        since = idle_since(obj, self._attempts.by_index(RAN_ON_INDEX, name))
        if status.idle_since != since:
            window = max(self._window(name), REUSE_GRACE)
            until = units.parse_time(since) + window
            await self._status(obj, {"idleSince": since, "warmUntil": units.format_time(until)})
            return Result(requeue_after=max((until - now).total_seconds(), 0.05))
        until = units.parse_time(status.warm_until or since)
        if now < until:
            return Result(requeue_after=max((until - now).total_seconds(), 0.05))
        await self._release(node, "ScaledDown", "Idle past its warm window.")
        return None

    async def _release(self, node: objects.Node, reason: str, message: str) -> None:
        patch = {"metadata": {"resourceVersion": node.metadata.resource_version}, "spec": {"unschedulable": True}}
        written = await self._client.patch("nodes", node.metadata.name, patch)
        await self._status(written, {"phase": "Terminating", "reason": reason, "message": message})

    def _window(self, name: str) -> timedelta:
        """The scaledownWindow of the Job whose attempt ran here last (0s when it set none)."""
        ran = [objects.read(objects.Attempt, a) for a in self._attempts.by_index(RAN_ON_INDEX, name)]
        if not ran:
            return timedelta(0)
        last = max(ran, key=lambda a: a.status.finish_time or "")
        return units.parse_duration(last.spec.scaledown_window or "0s")

    async def _status(self, node: Object, changes: Object) -> None:
        """Write ``changes`` (None: remove) over ``node``'s status as stored, kept as JSON."""
        status = {**(node.get("status") or {}), **changes}
        status = {k: v for k, v in status.items() if v is not None}
        with contextlib.suppress(errors.NotFound):
            await self._client.update("nodes", {**node, "status": status}, subresource="status")
