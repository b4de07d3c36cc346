"""``status.conditions`` as ``metav1.Condition`` (set one by type, moving its time only on a change), and the
reason, message and fix that explain the Job's state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import statusreasons
from nodus.apis.v1.conditions import ConditionStatus, ConditionType

Object = dict[str, Any]


def get(status: Object, type_: ConditionType) -> Object | None:
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == type_:
            return condition
    return None


def set(
    status: Object,
    type_: ConditionType,
    value: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None = None,
) -> None:
    """Set condition ``type_``; ``lastTransitionTime`` changes only when the status value changes."""
    conditions: list[Object] = status.setdefault("conditions", [])
    existing = get(status, type_)
    if existing is None:
        existing = {"type": type_}
        conditions.append(existing)
    if existing.get("status") != value or not existing.get("lastTransitionTime"):
        existing["lastTransitionTime"] = units.format_time(now)
    existing.update(status=value, reason=reason, message=message)
    if generation is not None:
        existing["observedGeneration"] = generation


def explain(status: Object, reason: str | None, message: str | None) -> None:
    """ADR 0046 §25: ``status.reason``, ``message`` and ``fix`` explain the current state and go when it is over
    (``reason`` None clears them); the fix, and a missing message, come from the registered reason."""
    if reason is None:
        for key in ("reason", "message", "fix"):
            status.pop(key, None)
        return
    status["reason"] = reason
    status["message"] = message or statusreasons.get(reason).summary
    status["fix"] = statusreasons.get(reason).fix
