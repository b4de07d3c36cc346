"""Budget (``budgets.nodus.dev``): a project's spending limit per period over a label selection of its Jobs.

The wire models of the kind: what the API server validates and what clients read, defined once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.apis.v1.base import WireModel, list_map
from nodus.apis.v1.scalars import PositiveUsd, Time, Usd

Period = Literal["Daily", "Monthly", "Total"]


class LabelSelectorRequirement(WireModel):
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


class LabelSelector(WireModel):
    """LabelSelector selects Jobs by their labels (metav1.LabelSelector): every requirement must hold; an empty
    selector selects every Job of the project."""

    match_labels: dict[str, str] | None = Field(
        None,
        description="MatchLabels is a map of {key,value} pairs; each is the requirement key In (value).",
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        None, max_length=100, description="MatchExpressions is a list of label selector requirements."
    )


class BudgetSpec(WireModel):
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


class BudgetCondition(WireModel):
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


class BudgetStatus(WireModel):
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
