"""Whether a Job's attempts are funded (ADR 0046 §15): the ``Funded`` condition and ``status.stopByTime``.

An attempt whose hold the project's credit, the Job's ``maxCostUSD`` or a Budget cannot fund waits without
capacity (the billing controller says why in its reason); a running one whose hold could not be extended
stops at its funded edge. The Job reports the first such reason and the earliest edge, and says ``Funded``
again once none waits.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nodus.controllers.jobs import conditions
from nodus.controllers.jobs.slots import view

Object = dict[str, Any]

# Why an attempt waits unfunded (nodus.controllers.billing.WAITS).
WAITS_FOR_MONEY = frozenset({"InsufficientCredits", "MaxCostReached", "BudgetExceeded"})


def report(status: Object, live: list[Object], now: datetime) -> None:
    """ADR 0046 §15: an attempt whose hold the project's credit, the Job's maxCostUSD or a Budget cannot fund
    waits; the Job says so (``Funded``)."""
    waiting = [s for a in live if (s := view(a).status).reason is not None and s.reason in WAITS_FOR_MONEY]
    # Running attempts whose holds could not be extended stop at their funded edge: the earliest is the Job's.
    edges = sorted(s.stop_by_time for s in waiting if s.stop_by_time)
    if edges:
        status["stopByTime"] = edges[0]
    else:
        status.pop("stopByTime", None)
    if waiting:
        reason, message = str(waiting[0].reason), waiting[0].message or ""
        if edges:
            message = f"{message}; running attempts stop at {edges[0]} unless funds are added"
        conditions.set(status, "Funded", "False", reason, message, now)
        conditions.explain(status, reason, message)
    elif (conditions.get(status, "Funded") or {}).get("status") == "False":
        conditions.set(status, "Funded", "True", "Funded", "The project's credit covers the Job's holds.", now)
