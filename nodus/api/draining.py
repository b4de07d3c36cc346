"""Draining a host: cordon it, then move its work elsewhere with a checkpoint (``nodus pools drain NODE``).

A drain (ADR 0050) is a request recorded on the Node, as ``kubectl drain`` is a sequence of requests: the API
server sets ``spec.unschedulable`` (the scheduler places nothing new there) and the annotations
``nodus.dev/drain-requested-at`` and ``nodus.dev/drain-grace-seconds``. The drain controller
(``nodus.controllers.nodes.draining``) then asks every attempt still on the host to stop with reason
``Drained`` and a checkpoint; the agent ends each ``Lost``/``Drained`` once its checkpoint is taken (or the
grace ran out), and the Job controller replaces it elsewhere from that checkpoint, as after any lost host.
The host itself stays: its agent keeps heartbeating, cordoned, until it is uncordoned or its Node deleted.

Who may drain: administrators any host; a project's Owners the hosts of that project's Pools (a Node
with ``spec.pool``), the hosts they brought. Nobody else, and no host of a cloud provider but by an
administrator.

:class:`Draining` keeps the rules; ``nodus.api.http.drain`` serves them at ``/apis/nodus.dev/v1/nodes/{name}/drain``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson

from nodus.api.auth.authorization import Role, role_in
from nodus.api.auth.principal import Principal
from nodus.api.context import RequestContext
from nodus.api.errors import APIError, invalid
from nodus.api.registry import GROUP
from nodus.api.store import GenericStore
from nodus.apimachinery import fieldpath, units
from nodus.apimachinery.fieldpath import Path
from nodus.apimachinery.selectors import parse_label_selector
from nodus.apis.v1 import labels, objects, phases
from nodus.storage.listing import ListQuery
from nodus.storage.objects import Storage

Object = dict[str, Any]

DEFAULT_GRACE = timedelta(minutes=5)
MAX_GRACE = timedelta(hours=1)


@dataclass(frozen=True)
class DrainState:
    """Where a drain stands: the host is cordoned, and which attempts are still on it."""

    node: str
    unschedulable: bool
    requested_time: str | None
    grace_seconds: int | None
    attempts: list[Object]

    def body(self) -> Object:
        """The answer, as served (``kind: NodeDrain``)."""
        draining = self.requested_time is not None
        phase = ("Draining" if self.attempts else "Drained") if draining else "NotDraining"
        status: Object = {"phase": phase, "unschedulable": self.unschedulable, "attempts": self.attempts}
        if draining:
            status.update(requestedTime=self.requested_time, gracePeriodSeconds=self.grace_seconds)
        return {"apiVersion": f"{GROUP}/v1", "kind": "NodeDrain", "metadata": {"name": self.node}, "status": status}


class Draining:
    """Cordons and drains hosts for the principals allowed to, and says how far a drain got."""

    def __init__(self, nodes: GenericStore, attempts: GenericStore, projects: GenericStore, storage: Storage) -> None:
        self._nodes = nodes
        self._attempts = attempts
        self._projects = projects
        self._storage = storage

    async def authorize(self, principal: Principal, node: Object, verb: str) -> None:
        """A 403 Status unless ``principal`` may drain ``node`` (administrators; Owners of its Pool's project)."""
        if principal.is_admin:
            return
        pool = objects.read(objects.Node, node).spec.pool
        name = node["metadata"]["name"]
        if pool is None:
            raise _forbidden(principal, verb, name, "Only administrators drain a cloud provider's hosts.")
        project = await self._projects.find(None, pool.project)
        if role_in(project, principal) < Role.OWNER:
            raise _forbidden(
                principal,
                verb,
                name,
                f"Owners of project {pool.project} drain the hosts of its Pools; ask one to add you "
                f"(kubectl edit project {pool.project}).",
            )

    async def node(self, name: str) -> Object:
        return await self._nodes.get(None, name)

    async def state(self, node: Object) -> DrainState:
        """The host's drain as it stands, with the attempts not yet finished on it."""
        view = objects.read(objects.Node, node)
        annotations = view.metadata.annotations
        grace = annotations.get(labels.DRAIN_GRACE_SECONDS)
        return DrainState(
            node=view.metadata.name,
            unschedulable=bool(view.spec.unschedulable),
            requested_time=annotations.get(labels.DRAIN_REQUESTED_AT),
            grace_seconds=int(grace) if grace and grace.isdigit() else None,
            attempts=await self._live_attempts(view.metadata.name),
        )

    async def drain(self, name: str, grace: timedelta, ctx: RequestContext) -> Object:
        """Cordon ``name`` and record the drain (a new request time each call: a drain asked again starts again)."""
        annotations = {
            labels.DRAIN_REQUESTED_AT: units.format_time(units.now()),
            labels.DRAIN_GRACE_SECONDS: str(int(grace.total_seconds())),
        }

        def cordoned(current: Object) -> Object:
            meta = current["metadata"]
            meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
            current["spec"] = {**(current.get("spec") or {}), "unschedulable": True}
            return current

        return await self._nodes.patch(None, name, cordoned, ctx)

    async def uncordon(self, name: str, ctx: RequestContext) -> Object:
        """End a drain: new work may land on the host again."""

        def uncordoned(current: Object) -> Object:
            meta = current["metadata"]
            kept = {
                k: v
                for k, v in (meta.get("annotations") or {}).items()
                if k not in (labels.DRAIN_REQUESTED_AT, labels.DRAIN_GRACE_SECONDS)
            }
            meta["annotations"] = kept
            spec = {k: v for k, v in (current.get("spec") or {}).items() if k != "unschedulable"}
            current["spec"] = spec
            return current

        return await self._nodes.patch(None, name, uncordoned, ctx)

    async def _live_attempts(self, node: str) -> list[Object]:
        query = ListQuery(kind=self._attempts.info.kind, labels=parse_label_selector(f"{labels.NODE}={node}"))
        found: list[Object] = []
        async with self._storage.open_list(query) as cursor:
            async for batch in cursor.batches():
                for _, _, body in batch:
                    attempt = objects.read(objects.Attempt, orjson.loads(body))
                    if attempt.status.phase in phases.ATTEMPT_FINISHED:
                        continue
                    found.append(
                        {
                            "namespace": attempt.metadata.namespace,
                            "name": attempt.metadata.name,
                            "phase": attempt.status.phase,
                            "stopping": attempt.spec.stop is not None,
                        }
                    )
        return found


def parse_grace(value: Any) -> timedelta:
    """``spec.gracePeriodSeconds`` of a drain request: 0 to an hour, default five minutes."""
    if value is None:
        return DEFAULT_GRACE
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or value > MAX_GRACE.total_seconds():
        limit = int(MAX_GRACE.total_seconds())
        why = f"must be an integer from 0 to {limit}: the seconds a program has to checkpoint before it stops"
        raise invalid("NodeDrain", GROUP, "", [fieldpath.invalid(Path("spec", "gracePeriodSeconds"), value, why)])
    return timedelta(seconds=value)


def _forbidden(principal: Principal, verb: str, node: str, why: str) -> APIError:
    return APIError(
        "Forbidden",
        f'nodes.{GROUP} "{node}" is forbidden: User "{principal.user}" cannot {verb} resource "nodes/drain" in API '
        f'group "{GROUP}"',
        fix=why,
        details={"name": node, "group": GROUP, "kind": "nodes"},
    )
