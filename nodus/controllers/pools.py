"""Pools: each Pool's status counted from its hosts and what runs on them, and its hosts revoked when it goes.

Keyed by (project, Pool name); level-triggered and idempotent (ADR 0047). A reconcile reads the Pool, its
Nodes (those with ``spec.pool`` naming it, from the Nodes informer's index) and the unfinished Attempts on
them (the Attempts informer's index by ``spec.node``), and converges:

* a Pool being deleted: every Node of the pool is deleted (which revokes its host's credential: the agent
  exits), and once none is left the ``nodus.dev/pool-hosts`` finalizer is lifted, so the Pool goes;
* otherwise ``status`` is made equal to :func:`summarize` of what is read, written through ``/status``
  only when it differs.

What ``status`` says (:func:`summarize`, a pure function):

* ``hosts`` and ``hostsByPhase``: every Node of the pool by phase; one whose agent has not registered yet
  (no phase) counts as ``Joining``. ``readyHosts``: the Ready ones. ``busyHosts``: Ready hosts with at
  least one unfinished attempt.
* ``gpus``: per accelerator (variant id and family as the host reported them), the GPUs of Ready hosts
  (``total``) and of those the ``free`` ones: on Ready, schedulable (not cordoned), not deleted hosts, the
  ordinals no unfinished attempt holds in ``status.placement.gpuIndexes``; an unfinished attempt on a
  host without ``gpuIndexes`` holds the whole host. ``totalGPUs`` and ``freeGPUs`` are their sums.
* ``lastJoinTime`` and ``lastJoinNode``: the newest Node of the pool (its creation is the join).
* condition ``Ready``: True while a host is Ready.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects, phases
from nodus.client import Client, errors
from nodus.client.informers import Handler, Informer, Object
from nodus.client.workqueue import WorkQueue
from nodus.controllers.jobs import conditions
from nodus.controllers.manager import Result

log = logging.getLogger("nodus.controllers.pools")

POOL_INDEX = "pools-by-pool"
"""Nodes by ``<project>/<pool>`` of their ``spec.pool``."""
ATTEMPT_HOST_INDEX = "pools-by-host"
"""Unfinished Attempts by the Node they are bound to (``spec.node``)."""
JOINING = "Joining"
RETRY_SECONDS = 1.0


def pool_of(obj: Object) -> list[str]:
    """The index value of a Node: ``[<project>/<pool>]`` for a pool's host, ``[]`` otherwise."""
    pool = objects.read(objects.Node, obj).spec.pool
    return [f"{pool.project}/{pool.name}"] if pool is not None else []


def host_of(obj: Object) -> list[str]:
    """The index value of an Attempt: ``[<node>]`` while it is bound to one and unfinished."""
    attempt = objects.read(objects.Attempt, obj)
    if attempt.spec.node and attempt.status.phase not in phases.ATTEMPT_FINISHED:
        return [attempt.spec.node]
    return []


def enqueue_pool_of_node(queue: WorkQueue[Any]) -> Handler:
    """A Node of a pool changed (joined, registered, went Lost, was deleted): its Pool is counted again."""

    def handler(old: Object | None, new: Object | None) -> None:
        for obj in (old, new):
            for key in pool_of(obj) if obj is not None else ():
                project, _, name = key.partition("/")
                queue.add((project, name))

    return handler


def enqueue_pool_of_attempt(queue: WorkQueue[Any], nodes: Informer) -> Handler:
    """An Attempt on a pool's host changed (bound, placed, finished): that Pool's busy hosts and free GPUs move."""

    def handler(old: Object | None, new: Object | None) -> None:
        hosts = {objects.read(objects.Attempt, obj).spec.node for obj in (old, new) if obj is not None}
        for host in hosts:
            node = nodes.get(None, host) if host else None
            for key in pool_of(node) if node is not None else ():
                project, _, name = key.partition("/")
                queue.add((project, name))

    return handler


def summarize(
    pool: objects.Pool,
    hosts: Iterable[objects.Node],
    attempts_on: Callable[[str], list[objects.Attempt]],
    now: datetime,
) -> Object:
    """The ``status`` ``pool`` should show for its ``hosts`` and the unfinished attempts on each (see the module
    docstring); the condition keeps its ``lastTransitionTime`` while its status does not change."""
    by_phase: Counter[str] = Counter()
    gpus: dict[tuple[str | None, str | None], list[int]] = {}
    ready = busy = 0
    last: objects.Node | None = None
    for host in hosts:
        phase = host.status.phase or JOINING
        by_phase[phase] += 1
        if last is None or (host.metadata.creation_timestamp or "", host.metadata.name) > (
            last.metadata.creation_timestamp or "",
            last.metadata.name,
        ):
            last = host
        if phase != "Ready":
            continue
        ready += 1
        running = attempts_on(host.metadata.name)
        busy += bool(running)
        capacity = host.status.capacity
        indexes = list(host.status.gpu_indexes or range((capacity.gpus if capacity else 0) or 0))
        if not indexes:
            continue
        key = (capacity.accelerator, capacity.gpu_family) if capacity else (None, None)
        counts = gpus.setdefault(key, [0, 0])
        counts[0] += len(indexes)
        if host.spec.unschedulable or host.metadata.deletion_timestamp:
            continue
        held: set[int] = set()
        for attempt in running:
            placement = attempt.status.placement
            taken = placement.gpu_indexes if placement is not None else None
            held.update(indexes if taken is None else taken)
        counts[1] += len(set(indexes) - held)
    status: Object = {
        "hosts": sum(by_phase.values()),
        "hostsByPhase": dict(sorted(by_phase.items())),
        "readyHosts": ready,
        "busyHosts": busy,
        "gpus": [
            {
                **({"accelerator": accelerator} if accelerator else {}),
                **({"family": family} if family else {}),
                "total": total,
                "free": free,
            }
            for (accelerator, family), (total, free) in sorted(
                gpus.items(), key=lambda item: (str(item[0][0]), str(item[0][1]))
            )
        ],
        "totalGPUs": sum(total for total, _ in gpus.values()),
        "freeGPUs": sum(free for _, free in gpus.values()),
        "observedGeneration": pool.metadata.generation,
        "conditions": [c.to_json() for c in pool.status.conditions or ()],
    }
    if last is not None:
        status["lastJoinNode"] = last.metadata.name
        if last.metadata.creation_timestamp:
            status["lastJoinTime"] = last.metadata.creation_timestamp
    if ready:
        message = f"{ready} of {status['hosts']} hosts are Ready; {status['freeGPUs']} GPUs are free."
        conditions.set(status, "Ready", "True", "HostsReady", message, now, pool.metadata.generation)
    else:
        message = "No host of the pool is Ready: join one (nodus pools join-token POOL, then nodus agent on the host)."
        conditions.set(status, "Ready", "False", "NoReadyHosts", message, now, pool.metadata.generation)
    return status


class PoolStatus:
    """Keeps each Pool's ``status`` equal to what its hosts show, and deletes its hosts when it is deleted."""

    def __init__(
        self,
        client: Client,
        pools: Informer,
        nodes: Informer,
        attempts: Informer,
        clock: Callable[[], datetime] = units.now,
    ) -> None:
        self._client = client
        self._pools = pools
        self._nodes = nodes
        self._attempts = attempts
        self._clock = clock

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        namespace, name = key
        obj = self._pools.get(namespace, name) if namespace is not None else None
        if obj is None or namespace is None:
            return None
        pool = objects.read(objects.Pool, obj)
        hosts = [objects.read(objects.Node, n) for n in self._nodes.by_index(POOL_INDEX, f"{namespace}/{name}")]
        if pool.metadata.deletion_timestamp:
            return await self._release(obj, pool, hosts)

        def attempts_on(node: str) -> list[objects.Attempt]:
            return [objects.read(objects.Attempt, a) for a in self._attempts.by_index(ATTEMPT_HOST_INDEX, node)]

        status = summarize(pool, hosts, attempts_on, self._clock())
        if status == pool.status.to_json():
            return None
        try:
            await self._client.update("pools", {**obj, "status": status}, namespace, subresource="status")
        except errors.NotFound:
            return None
        except errors.Conflict:
            return Result(requeue_after=RETRY_SECONDS)  # the informer has not seen the newest Pool yet
        return None

    async def _release(self, obj: Object, pool: objects.Pool, hosts: list[objects.Node]) -> Result | None:
        """Delete the pool's Nodes; lift the finalizer once none is left."""
        for host in hosts:
            if host.metadata.deletion_timestamp:
                continue
            try:
                await self._client.delete("nodes", host.metadata.name, uid=host.metadata.uid)
                log.info(
                    "pool %s/%s is deleted: its host %s is revoked",
                    pool.metadata.namespace,
                    pool.metadata.name,
                    host.metadata.name,
                )
            except (errors.NotFound, errors.Conflict):
                continue  # gone already, or replaced by another Node of that name (not this pool's to delete)
        if hosts:
            return Result(requeue_after=RETRY_SECONDS)  # each Node's deletion queues the pool again, too
        if labels.POOL_HOSTS not in pool.metadata.finalizers:
            return None
        finalizers = [f for f in pool.metadata.finalizers if f != labels.POOL_HOSTS]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": pool.metadata.resource_version}}
        try:
            await self._client.patch("pools", pool.metadata.name, patch, pool.metadata.namespace)
        except errors.NotFound:
            return None
        except errors.Conflict:
            return Result(requeue_after=RETRY_SECONDS)
        return None
