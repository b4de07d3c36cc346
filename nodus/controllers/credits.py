"""Project credits: a display copy of what the ledger says each project has, holds and may use.

Keyed by project name. A Project's ``status.credits`` (``balanceUSD``, ``heldUSD``, ``availableUSD``) copies
the ledger, as every ``status.cost`` does. Controllers never touch the ledger's tables: this reconciler reads
the figures through the API (``GET /apis/nodus.dev/v1/projects/NAME/credits``, which reads the ledger itself)
and writes ``status.credits`` through ``/status`` when they differ. Level-triggered: a reconcile knows only
the project's name, reads the figures now and converges, so however many movements happened meanwhile, one
reconcile shows them all, and two writers of the copy (this one, the API server after a grant) end equal to
the ledger: each write is a Project event that queues the project again.

When it looks (ADR 0044): money moves when the billing controllers post to the ledger door, and each movement
shows on the object it was for, whose ``status.cost`` the controller rewrites right after: an Attempt's (a
hold, an extension, a capture, a refund, the release) or a Job's (a storage charge). A change of either's
``status.cost`` queues its project (:func:`enqueue_on_cost`); so does every Project event (a grant, the blob
collector's charges, a copy written by hand), and the informers' periodic resync looks at every project again.
A copy may lag a movement by one watch event and one reconcile; nothing reads it to decide anything.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from nodus.apis.v1 import objects
from nodus.apis.v1.jobcost import Cost
from nodus.client import Client, errors
from nodus.client.informers import Handler, Informer, Object
from nodus.client.workqueue import WorkQueue
from nodus.controllers.manager import Result

log = logging.getLogger("nodus.controllers.credits")

API = "/apis/nodus.dev/v1"
FIGURES = ("balanceUSD", "heldUSD", "availableUSD")


def shown(answer: Object) -> dict[str, str]:
    """The ``status.credits`` a project should show for the API's ``Credits`` ``answer`` (a pure function)."""
    return {field: str(answer[field]) for field in FIGURES}


def enqueue_on_cost(queue: WorkQueue[Any], kind: type[objects.Attempt] | type[objects.Job]) -> Handler:
    """A handler for Attempts or Jobs (``kind``): money moved for the object, so its ``status.cost`` copy
    changed: its project's credits are looked at again. Other changes (and resyncs) queue nothing."""

    def cost(obj: Object | None) -> Cost | None:
        return objects.read(kind, obj).status.cost if obj is not None else None

    def handler(old: Object | None, new: Object | None) -> None:
        obj = new if new is not None else old
        if obj is None or cost(old) == cost(new):
            return
        project = objects.read(kind, obj).metadata.namespace
        if project:
            queue.add((None, project))

    return handler


class ProjectCredits:
    """Keeps each Project's ``status.credits`` equal to the ledger's figures."""

    def __init__(self, client: Client, projects: Informer) -> None:
        self._client = client
        self._projects = projects

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        _, name = key
        obj = self._projects.get(None, name)
        if obj is None:
            return None
        project = objects.read(objects.Project, obj)
        try:
            response = await self._client.request("GET", f"{API}/projects/{name}/credits")
        except errors.NotFound:
            return None  # deleted meanwhile
        credits = shown(response.json())
        current = project.status.credits.to_json() if project.status.credits is not None else None
        if credits == current:
            return None
        # A merge patch without a precondition: the figures were read just now, after every movement that
        # queued this reconcile; a write that lands later with older figures queues the project again.
        with contextlib.suppress(errors.NotFound):
            await self._client.patch("projects", name, {"status": {"credits": credits}}, subresource="status")
        return None
