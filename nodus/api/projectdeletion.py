"""What deleting a project refuses, says, and does to the credit it holds (ADR 0037).

* A project the server creates at start (``nodus dev``: ``default``) may not be deleted, as Kubernetes refuses
  to delete its ``default`` namespace: a 403 naming the fix. The server would create it again at its next start,
  and without its starting credit, which is granted once per name.
* Deleting any other project that holds credit warns what becomes of it. Once the project's contents are gone,
  the garbage collector closes its credit (:meth:`ProjectDeletion.close`, before it lifts the
  ``nodus.dev/project-contents`` finalizer): holds still open are released and the available credit moves to
  Nodus's ``closed`` account. The ledger's accounts are named by project, so without this a project created
  later under the same name would start with what the deleted one left, as it would have read its blobs before
  they went with it. ``nodus billing statement NAME`` shows the ``Close`` where one project of the name ended.
* A grant to a project being deleted is refused (``nodus.api.http.credits``), so that nothing lands after the
  close; a grant key used by an earlier project of the name is refused, not replayed as if granted.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.api.registry import GROUP
from nodus.billing import ledger, money
from nodus.storage.objects import Storage

log = logging.getLogger(__name__)

Object = dict[str, Any]


class ProjectDeletion:
    """The deletion check of the projects' store (``GenericStore.deletion``) and the close of a deleted project's
    credit (the garbage collector's ``close_credit``)."""

    def __init__(self, storage: Storage, permanent: Collection[str]) -> None:
        """``permanent``: the projects the server creates at start (``bootstrap_projects``)."""
        self._storage = storage
        self._permanent = frozenset(permanent)

    async def check(self, project: Object, ctx: RequestContext) -> None:
        """Refuse deleting a permanent project; warn what becomes of the credit of another (once: not when it is
        being deleted already)."""
        name = str(project["metadata"]["name"])
        if name in self._permanent:
            raise APIError(
                "Forbidden",
                f'projects.{GROUP} "{name}" is forbidden: this project may not be deleted: the server creates it at '
                "every start",
                fix=f"Delete what it holds instead (kubectl delete jobs --all -n {name}), or work in a project of "
                "your own (an administrator creates it: kubectl create -f project.yaml).",
                details={"name": name, "group": GROUP, "kind": "projects"},
            )
        if project["metadata"].get("deletionTimestamp"):
            return
        figures = await ledger.credits(self._storage, name)
        if figures["balance"] > 0:
            ctx.warn(
                f"project {name} holds {money.text(figures['balance'])} USD of credit: it is closed once the "
                "project's contents are gone, and a project created later under this name starts with none"
            )

    async def close(self, name: str, uid: str) -> None:
        """Close the credit of project ``name`` (uid ``uid``), whose contents are gone (idempotent)."""
        closed = await ledger.close(self._storage, name, uid)
        if not closed.replayed and closed.amount > 0:
            log.info("project %s: closed its credit of %s USD", name, money.text(closed.amount))
