"""The columns ``kubectl get jobs`` shows (kubectl adds NAME itself, from ``metadata.name``).

Default: PHASE, COMPLETIONS (``succeeded/completions``, e.g. ``0/4``), COST and AGE. With ``-o
wide`` also REASON, OFFERING, ATTEMPTS and GANG (a gang Job's ``started/size phase epoch``, e.g.
``2/2 Running e1``).

COST is ``status.cost.totalUSD`` as dollars to the cent, as every table shows an amount
(:func:`nodus.apimachinery.money.amount_cell`: ``12.5`` -> ``$12.50``, ``1234`` -> ``$1,234.00``); a
charge below half a cent shows as ``<$0.01``, never ``$0.00``, because the column is the one place a
user sees what a Job cost and a small charge must not look like none. The exact amount is in
``-o yaml``. A Job without a charge yet shows ``$0.00``.
"""

from __future__ import annotations

from typing import Any

from nodus.api.kinds.job.jsonview import as_int, as_object, as_str, child
from nodus.api.registry import PrinterColumn
from nodus.apimachinery import money, units

DEFAULT_COMPLETIONS = 1


def completions(obj: dict[str, Any]) -> str:
    """``succeeded/completions``; a missing count is 0 succeeded, and a missing completions its default, 1."""
    succeeded = as_int((as_object(obj.get("status")) or {}).get("succeeded")) or 0
    wanted = as_int((as_object(obj.get("spec")) or {}).get("completions")) or DEFAULT_COMPLETIONS
    return f"{succeeded}/{wanted}"


def cost(obj: dict[str, Any]) -> str:
    """``status.cost.totalUSD`` as ``$1,234.50`` (``<$0.01`` for less than half a cent); ``$0.00`` before any
    charge."""
    total = as_str((child(obj, "status", "cost") or {}).get("totalUSD"))
    if total is None:
        return "$0.00"
    try:
        amount = units.parse_usd(total)
    except ValueError:
        return total  # shown as stored rather than hidden
    return money.amount_cell(amount, "$")


def gang(obj: dict[str, Any]) -> str | None:
    """A gang Job's ranks started out of its size, its gang phase and epoch (``3/4 Starting e2``); None for a
    Job that is not distributed or has no gang status yet."""
    status = child(obj, "status", "gang") or {}
    size = as_int(status.get("size"))
    if not size:
        return as_str(status.get("phase"))
    started = as_int(status.get("started")) or 0
    return f"{started}/{size} {as_str(status.get('phase')) or ''} e{as_int(status.get('epoch')) or 0}"


PRINTER_COLUMNS: tuple[PrinterColumn, ...] = (
    PrinterColumn("Phase", "string", ".status.phase", "The run-to-completion phase."),
    PrinterColumn(
        "Completions",
        "string",
        ".status.succeeded",
        "Indexes that succeeded out of spec.completions.",
        value=completions,
    ),
    PrinterColumn(
        "Cost",
        "string",
        ".status.cost.totalUSD",
        "What has been charged so far, in USD to the cent (the exact amount is status.cost.totalUSD).",
        value=cost,
    ),
    PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the Job was created."),
    PrinterColumn(
        "Reason",
        "string",
        ".status.reason",
        "Why the Job failed, stopped for good or is suspended.",
        priority=1,
    ),
    PrinterColumn("Offering", "string", ".status.placement.offering", "Where the current attempt runs.", priority=1),
    PrinterColumn("Attempts", "integer", ".status.attempts.total", "How many attempts have run.", priority=1),
    PrinterColumn(
        "Gang",
        "string",
        ".status.gang.phase",
        "A gang Job's ranks started out of its size, its gang phase and epoch.",
        priority=1,
        value=gang,
    ),
)
