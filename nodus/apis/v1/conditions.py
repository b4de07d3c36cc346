"""The condition types Nodus sets in ``status.conditions`` (``metav1.Condition``), each written once.

The models keep ``Condition.type`` a plain string, as Kubernetes does (a reader must tolerate types it
does not know); writers name theirs from here, so a misspelt type is a type error where it is set.
"""

from __future__ import annotations

from typing import Literal

ConditionStatus = Literal["True", "False", "Unknown"]

JobConditionType = Literal["Admitted", "Funded", "Suspended", "SuspendFailed", "Complete", "Failed", "StoragePaid"]
"""A Job's conditions: admitted (pins resolved, rules met), funded (holds covered), suspended or failing to
suspend, finished (Complete or Failed), and its stored outputs' hours paid."""

BudgetConditionType = Literal["Exhausted"]
"""A Budget's condition: its limit is reached for the current period."""

NodeConditionType = Literal["Ready"]
"""A Node's condition: its agent heartbeats."""

PipelineConditionType = Literal["Complete", "Failed", "Suspended"]
"""A Pipeline's conditions: every stage succeeded, a stage failed, its stages are suspended."""

ConditionType = JobConditionType | BudgetConditionType | NodeConditionType | PipelineConditionType
