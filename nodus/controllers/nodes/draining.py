"""The drain controller: moves the work off a host being drained, with a checkpoint first (ADR 0050).

A drain is asked for on the Node (``nodus pools drain NODE``; the API server cordons it and writes
``nodus.dev/drain-requested-at`` and ``nodus.dev/drain-grace-seconds``, see ``nodus.api.draining``). Keyed
by Node, this controller asks every attempt still on the host that has no stop yet to stop with reason
``Drained``, a checkpoint, and a deadline of the request time plus the grace. Its agent treats the stop as
the host going away for that attempt (``Lost``, reason ``Drained``, after the checkpoint), so the Job
controller replaces it elsewhere and the replacement restores that checkpoint, as after a preemption. A
loss by drain of an attempt that made progress does not use up ``recovery.maxAttempts`` (ADR 0024).

Level-triggered: every pass looks at the attempts on the host as they are; a stop already asked for is left
alone (the Job controller's own stops, a suspend or cancel, keep their reason). An attempt not yet on the host
(placed there, not yet assigned) is left to the provisioner, which no longer assigns a cordoned host.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects, phases
from nodus.client import Client, errors
from nodus.client.informers import Informer
from nodus.controllers.manager import Result
from nodus.controllers.nodes.provisioning import NODE_INDEX

Object = dict[str, Any]

REASON = "Drained"


class Draining:
    """Stops, with a checkpoint, the attempts on hosts being drained; keyed by node name."""

    def __init__(self, client: Client, nodes: Informer, attempts: Informer) -> None:
        self._client = client
        self._nodes = nodes
        self._attempts = attempts

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        obj = self._nodes.get(None, key[1])
        if obj is None:
            return None
        node = objects.read(objects.Node, obj)
        annotations = node.metadata.annotations
        requested = annotations.get(labels.DRAIN_REQUESTED_AT)
        if requested is None or not node.spec.unschedulable:
            return None  # not being drained, or uncordoned since
        grace_text = annotations.get(labels.DRAIN_GRACE_SECONDS, "")
        grace = int(grace_text) if grace_text.isdigit() else 300
        deadline = units.format_time(units.parse_time(requested) + timedelta(seconds=grace))
        for attempt_obj in self._attempts.by_index(NODE_INDEX, node.metadata.name):
            attempt = objects.read(objects.Attempt, attempt_obj)
            if (
                attempt.spec.node != node.metadata.name
                or attempt.spec.stop is not None
                or attempt.status.phase in phases.ATTEMPT_FINISHED
            ):
                continue
            stop: Object = {
                "reason": REASON,
                "gracePeriodSeconds": grace,
                "requestedTime": requested,
                "deadline": deadline,
                "checkpoint": attempt.status.phase == "Running",
            }
            patch = {"metadata": {"resourceVersion": attempt.metadata.resource_version}, "spec": {"stop": stop}}
            try:
                await self._client.patch("attempts", attempt.metadata.name, patch, attempt.metadata.namespace)
            except errors.NotFound:
                continue
        return None
