"""Budget status: a display copy of what the ledger says each Budget has spent, holds and has left.

Keyed by (project, Budget name). Enforcement is not here: every hold is checked against the
Budgets its Job matches inside the ledger transaction (ADR 0018). This reconciler only shows the
figures: it reads them through the API's ledger door (``GET .../ledger/budgets/{name}``) and writes
``status`` (``periodStart``, ``periodEnd``, ``spentUSD``, ``heldUSD``, ``remainingUSD``, condition
``Exhausted``) through ``/status`` when they differ. Charges and holds produce no Budget events, so
each Budget is looked at again every ``REFRESH_INTERVAL`` as well as when it changes; a copy may lag
that long behind the ledger, and nothing reads it to decide anything.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import objects
from nodus.client import Client, errors
from nodus.client.informers import Informer
from nodus.controllers.jobs import conditions
from nodus.controllers.manager import Result

Object = dict[str, Any]
log = logging.getLogger("nodus.controllers.budgets")

API = "/apis/nodus.dev/v1"
REFRESH_INTERVAL = 10.0
_FIGURES = ("spentUSD", "heldUSD", "remainingUSD", "periodStart", "periodEnd")


def shown(budget: objects.Budget, ledger: Object, now: Any) -> Object:
    """The status ``budget`` should show for the ledger's ``ledger`` figures (a pure function)."""
    generation = budget.metadata.generation
    status: Object = {k: ledger[k] for k in _FIGURES if k in ledger}
    status["observedGeneration"] = generation
    status["conditions"] = [c.to_json() for c in budget.status.conditions or ()]
    remaining, limit = Decimal(str(ledger["remainingUSD"])), str(ledger["limitUSD"])
    until = f" until {ledger['periodEnd']}" if ledger.get("periodEnd") else ""
    if remaining <= 0:
        conditions.set(
            status,
            "Exhausted",
            "True",
            "LimitReached",
            f"{ledger['committedUSD']} of {limit} USD are charged and held{until}: holds of matching Jobs wait.",
            now,
            generation,
        )
    else:
        conditions.set(
            status,
            "Exhausted",
            "False",
            "WithinLimit",
            f"{ledger['remainingUSD']} of {limit} USD remain{until}.",
            now,
            generation,
        )
    return status


class BudgetStatus:
    """Keeps each Budget's ``status`` equal to the ledger's figures for its current period."""

    def __init__(self, client: Client, budgets: Informer, interval: float = REFRESH_INTERVAL) -> None:
        self._client = client
        self._budgets = budgets
        self._interval = interval

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        namespace, name = key
        obj = self._budgets.get(namespace, name) if namespace is not None else None
        if obj is None or namespace is None:
            return None
        budget = objects.read(objects.Budget, obj)
        try:
            response = await self._client.request("GET", f"{API}/namespaces/{namespace}/ledger/budgets/{name}")
        except errors.NotFound:
            return None  # deleted meanwhile
        ledger = dict(response.json())
        if ledger.get("uid") != budget.metadata.uid:
            return Result(requeue_after=1.0)  # replaced by a Budget of the same name: the informer catches up
        status = shown(budget, ledger, units.now())
        if status != budget.status.to_json():
            try:
                await self._client.update("budgets", {**obj, "status": status}, namespace, subresource="status")
            except errors.NotFound:
                return None
            except errors.Conflict:
                return Result(requeue_after=0.5)  # the informer has not seen the newest Budget yet
        return Result(requeue_after=self._interval)
