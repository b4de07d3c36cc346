"""A project's credits: the ledger's figures as the API shows them, grants, and the Project's display copy.

``status.credits`` of a Project is a display copy of the ledger (like every ``status.cost``). What the API
server moves itself it copies at once (:func:`show`): a grant, the blob collector's storage charges, the
starting credit of ``nodus dev``. What the controllers move through the ledger door (holds, charges, releases)
is copied by the credits reconciler of ``nodus controllers`` (``nodus.controllers.credits``, ADR 0044), which
reads ``GET .../projects/NAME/credits``: that answer reads the ledger itself, and ``nodus billing verify``
proves the copies equal it.

Services here never open a transaction of their own: each ledger posting is one, as the ledger makes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.api.registry import API_VERSION, GROUP
from nodus.api.store import GenericStore
from nodus.apimachinery.causes import PROJECT_TERMINATING
from nodus.billing import ledger, money
from nodus.storage.ledger import KeyReused
from nodus.storage.objects import Storage

Object = dict[str, Any]


def figures_wire(figures: dict[str, Decimal]) -> dict[str, str]:
    """``balanceUSD``, ``heldUSD`` and ``availableUSD`` of ``figures`` (from ``ledger.credits``): what
    ``status.credits`` shows, and every answer of the API that carries a project's credits."""
    return {
        "balanceUSD": money.text(figures["balance"]),
        "heldUSD": money.text(figures["held"]),
        "availableUSD": money.text(figures["available"]),
    }


def body(name: str, figures: dict[str, Decimal]) -> Object:
    """The ``Credits`` answer for ``figures`` (from ``ledger.credits``)."""
    return {"kind": "Credits", "apiVersion": API_VERSION, "project": name, **figures_wire(figures)}


async def show(projects: GenericStore, storage: Storage, name: str, ctx: RequestContext) -> dict[str, Decimal]:
    """Read ``name``'s credits from the ledger and write them into its ``status.credits``; returns them."""
    figures = await ledger.credits(storage, name)
    shown = figures_wire(figures)

    def update(project: Object) -> Object:
        project["status"] = {**(project.get("status") or {}), "credits": shown}
        return project

    await projects.patch(None, name, update, ctx, subresource="status")
    return figures


@dataclass(frozen=True)
class Granted:
    """A grant as it landed: the project's credits after it, and whether ``key`` had granted it before
    (``replayed``: nothing more was granted now)."""

    figures: dict[str, Decimal]
    key: str
    amount: Decimal
    replayed: bool


class Credits:
    """Reads and grants of projects' credits (``GET``/``POST .../projects/NAME/credits``)."""

    def __init__(self, projects: GenericStore, storage: Storage) -> None:
        self._projects = projects
        self._storage = storage

    async def read(self, name: str) -> Object:
        """The ``Credits`` answer of project ``name`` from the ledger; a 404 Status when there is no such project."""
        await self._projects.get(None, name)
        return body(name, await ledger.credits(self._storage, name))

    async def grantable(self, name: str) -> None:
        """Return when project ``name`` may be granted credit: a 404 Status when it does not exist, a 403 when it
        is being deleted (its credit is closed once its contents are gone, ADR 0037)."""
        project = await self._projects.get(None, name)
        if not project["metadata"].get("deletionTimestamp"):
            return
        message = f"unable to grant credit to project {name} because it is being deleted"
        raise APIError(
            "Forbidden",
            message,
            fix="Wait until the project is gone and grant credit to the project created again (it starts with none).",
            details={
                "name": name,
                "group": GROUP,
                "kind": "projects",
                "causes": [{"reason": PROJECT_TERMINATING, "message": message, "field": "metadata.name"}],
            },
        )

    async def grant(self, name: str, amount: Decimal, key: str, memo: str, ctx: RequestContext) -> Granted:
        """Grant ``amount`` to project ``name`` under ``key`` (once: the same key and amount again grant nothing)
        and copy the credits into its ``status.credits``. A 409 Status when ``key`` granted another amount, or
        granted credit to an earlier project of the name (closed since: this one got nothing)."""
        try:
            posted = await ledger.grant(self._storage, name, amount, f"grant:{name}:{key}", memo)
        except KeyReused:
            raise APIError(
                "Conflict",
                f'the grant key "{key}" was used before for project {name} with another amount',
                fix="Use a new key for a new grant; send the same key and amount to retry a grant safely.",
                details={"name": name, "group": GROUP, "kind": "projects"},
            ) from None
        if await ledger.granted_to_an_earlier_project(self._storage, name, posted):
            raise APIError(
                "Conflict",
                f'the grant key "{key}" granted credit to an earlier project named {name}, deleted since (its '
                "credit was closed with it); nothing was granted to this one",
                fix="Use a new key: grant keys are spent by every project of the name (ADR 0037).",
                details={"name": name, "group": GROUP, "kind": "projects"},
            )
        figures = await show(self._projects, self._storage, name, ctx)
        return Granted(figures, key, amount, posted.replayed)
