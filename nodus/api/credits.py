"""A project's credits as the API shows them: the ledger's figures, and the Project's display copy.

``status.credits`` of a Project is a display copy of the ledger (like every ``status.cost``): it is
brought up to date after each grant by :func:`show`; ``GET .../projects/NAME/credits`` reads the
ledger itself, and ``nodus billing verify`` proves the copies equal it.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from nodus.api.context import RequestContext
from nodus.api.registry import API_VERSION
from nodus.api.store import GenericStore
from nodus.billing import ledger, money
from nodus.storage.objects import Storage


def body(name: str, figures: dict[str, Decimal]) -> dict[str, Any]:
    """The ``Credits`` answer for ``figures`` (from ``ledger.credits``)."""
    return {
        "kind": "Credits",
        "apiVersion": API_VERSION,
        "project": name,
        "balanceUSD": money.text(figures["balance"]),
        "heldUSD": money.text(figures["held"]),
        "availableUSD": money.text(figures["available"]),
    }


async def show(projects: GenericStore, storage: Storage, name: str, ctx: RequestContext) -> dict[str, Decimal]:
    """Read ``name``'s credits from the ledger and write them into its ``status.credits``; returns them."""
    figures = await ledger.credits(storage, name)
    shown = {k: v for k, v in body(name, figures).items() if k.endswith("USD")}

    def update(project: dict[str, Any]) -> dict[str, Any]:
        project["status"] = {**(project.get("status") or {}), "credits": shown}
        return project

    await projects.patch(None, name, update, ctx, subresource="status")
    return figures
