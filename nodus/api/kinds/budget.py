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
from typing import Literal

from pydantic import Field

from nodus.api.kinds.job.base import JobModel, list_map
from nodus.api.kinds.job.scalars import PositiveUsd, Time, Usd
from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apimachinery.money import amount_cell
from nodus.apimachinery.selectors import SelectorError
from nodus.billing import budgets, money

Period = Literal["Daily", "Monthly", "Total"]


class LabelSelectorRequirement(JobModel):
    """LabelSelectorRequirement is a selector that contains values, a key, and an operator that relates the key
    and values."""

    key: str = Field(min_length=1, max_length=316, description="Key is the label key that the selector applies to.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="Operator represents a key's relationship to a set of values: In, NotIn, Exists or DoesNotExist."
    )
    values: list[str] | None = Field(
        None,
        max_length=100,
        description="Values is an array of string values. With In or NotIn it must be non-empty; with Exists or "
        "DoesNotExist it must be empty.",
    )


class LabelSelector(JobModel):
    """LabelSelector selects Jobs by their labels (metav1.LabelSelector): every requirement must hold; an empty
    selector selects every Job of the project."""

    match_labels: dict[str, str] | None = Field(
        None,
        description="MatchLabels is a map of {key,value} pairs; each is the requirement key In (value).",
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        None, max_length=100, description="MatchExpressions is a list of label selector requirements."
    )


class BudgetSpec(JobModel):
    """BudgetSpec limits what the project's Jobs matching the selector may charge and hold per period."""

    limit_usd: PositiveUsd = Field(
        alias="limitUSD",
        description="LimitUSD is the most the matching Jobs may commit (charged in the period plus held) per period: "
        "a decimal USD string greater than 0 with at most 6 fractional digits, such as 250 or 12.50.",
    )
    period: Period = Field(
        "Monthly",
        description="Period is Daily (from 00:00 UTC), Monthly (from the 1st, 00:00 UTC; the default) or Total "
        "(never renews).",
    )
    selector: LabelSelector | None = Field(
        None, description="Selector selects the project's Jobs by label; absent or empty: every Job of the project."
    )
    description: str | None = Field(None, max_length=1024, description="Description says what the budget is for.")


class BudgetCondition(JobModel):
    """BudgetCondition is one observation of the Budget (metav1.Condition), such as Exhausted."""

    last_transition_time: Time | None = Field(
        None, description="LastTransitionTime is when the condition last changed from one status to another."
    )
    message: str | None = Field(None, description="Message is a human-readable explanation of the transition.")
    observed_generation: int | None = Field(
        None, ge=0, description="ObservedGeneration is the metadata.generation the condition was set from."
    )
    reason: str | None = Field(None, description="Reason is a CamelCase code for the last transition.")
    status: Literal["True", "False", "Unknown"] = Field(description="Status is True, False or Unknown.")
    type: str = Field(min_length=1, description="Type is the CamelCase condition type, such as Exhausted.")


class BudgetStatus(JobModel):
    """BudgetStatus is a display copy of the ledger's figures for the budget's current period."""

    observed_generation: int | None = Field(
        None, ge=0, description="ObservedGeneration is the metadata.generation these figures were computed for."
    )
    period_start: Time | None = Field(None, description="PeriodStart is when the current period began (not for Total).")
    period_end: Time | None = Field(None, description="PeriodEnd is when the current period ends (not for Total).")
    spent_usd: Usd | None = Field(
        None,
        alias="spentUSD",
        description="SpentUSD is what matching Jobs were charged in the period (covered time excluded, refunds "
        "deducted).",
    )
    held_usd: Usd | None = Field(None, alias="heldUSD", description="HeldUSD is what open holds of matching Jobs hold.")
    remaining_usd: Usd | None = Field(
        None, alias="remainingUSD", description="RemainingUSD is limitUSD minus spent and held, at least 0."
    )
    conditions: list[BudgetCondition] | None = Field(
        None,
        description="Conditions: Exhausted is True when nothing remains in the period.",
        json_schema_extra=list_map("type"),
    )


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
