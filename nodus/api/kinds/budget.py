"""Budget (``budgets.nodus.dev/v1``): a project's spending limit per period over a selection of its Jobs.

``spec.limitUSD`` (a positive decimal USD string) limits what the Jobs matching ``spec.selector`` (a
``metav1.LabelSelector`` over the Jobs' labels; absent or empty: every Job of the project) may
commit per ``spec.period``: ``Daily`` (from 00:00 UTC), ``Monthly`` (the default; from the 1st,
00:00 UTC) or ``Total``. Committed is what was charged to them in the period plus what their open
holds hold; every hold and extension must fit every Budget its Job matches, checked inside the
ledger transaction (``nodus.storage.budgets``, ADR 0018). A Job whose hold does not fit waits,
``Funded=False`` with reason ``BudgetExceeded``, until the limit is raised, the period ends or
other Jobs finish.

``status`` is a display copy of the ledger written by the Budget controller (``periodStart``,
``periodEnd``, ``spentUSD``, ``heldUSD``, ``remainingUSD``, condition ``Exhausted``); nothing reads
it to decide anything.
"""

from __future__ import annotations

from decimal import Decimal

from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apimachinery.money import amount_cell
from nodus.apimachinery.selectors import SelectorError
from nodus.apis.v1.budget import (
    BudgetSpec,
    BudgetStatus,
    LabelSelector,
)
from nodus.billing import budgets, money


class BudgetStrategy(Strategy):
    """A Budget is spec written by users; ``period`` defaults to Monthly; status is the controller's."""

    def prepare_for_create(self, obj: Object) -> None:
        super().prepare_for_create(obj)
        _default(obj)

    def prepare_for_update(self, new: Object, old: Object) -> None:
        super().prepare_for_update(new, old)
        _default(new)

    def validate(self, obj: Object) -> list[FieldError]:
        spec, problems = validate_model(BudgetSpec, obj.get("spec"), Path("spec"))
        if spec is None:
            return problems
        if Decimal(spec.limit_usd) > money.MAX:
            problems.append(fieldpath.invalid(Path("spec", "limitUSD"), spec.limit_usd, f"must be at most {money.MAX}"))
        if spec.selector is not None:
            problems += _selector_problems(spec.selector, Path("spec", "selector"))
        return problems

    def validate_status(self, obj: Object) -> list[FieldError]:
        _, problems = validate_model(BudgetStatus, obj.get("status") or {}, Path("status"))
        return problems


def _selector_problems(selector: LabelSelector, path: Path) -> list[FieldError]:
    problems: list[FieldError] = []
    labels = path.child("matchLabels")
    for key, value in (selector.match_labels or {}).items():
        for check, what in ((budgets.check_key, key), (budgets.check_value, value)):
            try:
                check(what)
            except SelectorError as exc:
                problems.append(fieldpath.invalid(labels.key(key), what, str(exc)))
    for i, expression in enumerate(selector.match_expressions or []):
        at = path.child("matchExpressions").index(i)
        try:
            budgets.check_key(expression.key)
        except SelectorError as exc:
            problems.append(fieldpath.invalid(at.child("key"), expression.key, str(exc)))
        values = expression.values or []
        if expression.operator in ("In", "NotIn") and not values:
            problems.append(fieldpath.required(at.child("values"), f"operator {expression.operator} needs values"))
        if expression.operator in ("Exists", "DoesNotExist") and values:
            problems.append(
                fieldpath.forbidden(at.child("values"), f"must be empty with operator {expression.operator}")
            )
        for j, value in enumerate(values):
            try:
                budgets.check_value(value)
            except SelectorError as exc:
                problems.append(fieldpath.invalid(at.child("values").index(j), value, str(exc)))
    return problems


def _default(obj: Object) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict) and spec.get("period") is None:
        spec["period"] = budgets.DEFAULT_PERIOD


def _amount(name: str, path: str, description: str) -> PrinterColumn:
    """A column of USD to the cent, as every table shows an amount (``-o yaml`` has the exact figure)."""
    exact = PrinterColumn(name, "string", path, description)

    def value(obj: Object) -> str | None:
        found = exact.extract(obj)
        return None if found is None else amount_cell(str(found))

    return PrinterColumn(name, "string", path, description, value=value)


BUDGET = KindInfo(
    kind="Budget",
    plural="budgets",
    singular="budget",
    namespaced=True,
    description="Budget limits what the project's Jobs matching its selector may charge and hold per period "
    "(Daily, Monthly or Total); every hold must fit every Budget its Job matches.",
    spec_model=BudgetSpec,
    status_model=BudgetStatus,
    strategy=BudgetStrategy(),
    printer_columns=(
        _amount("Limit", ".spec.limitUSD", "LimitUSD is the most matching Jobs may commit per period."),
        PrinterColumn("Period", "string", ".spec.period", "Period is Daily, Monthly or Total."),
        _amount("Spent", ".status.spentUSD", "SpentUSD is what matching Jobs were charged in the period."),
        _amount("Held", ".status.heldUSD", "HeldUSD is what open holds of matching Jobs hold."),
        _amount("Remaining", ".status.remainingUSD", "RemainingUSD is what is left in the period."),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the budget was created."),
        PrinterColumn("Description", "string", ".spec.description", "Description of the budget.", priority=1),
    ),
    short_names=("bgt",),
    categories=("nodus",),
)
