"""What an update may change in a Job's spec: immutability, the raise-only cap and the state machine.

The reference (L16) makes everything immutable after create except ``parallelism``,
``backoffLimit``, ``timeout``, ``maxCostUSD`` (raise only), ``recovery.maxAttempts``,
``recovery.checkpoint.interval`` and ``retainAfterFinish``, ``ttlSecondsAfterFinished`` and
``state``. ``activeDeadlineSeconds`` is an alias of ``timeout``, so it is as mutable (ADR 0046 §10),
and a leftover ``resources.nodes`` is a conflict that validation already reports.

Every changed immutable field gets its own error at its deepest changed path
(``spec.resources.gpu.count: Invalid value: 8: field is immutable``). A list that changed length is
reported as a whole. ``maxCostUSD`` may be added, or raised, never lowered or removed.
``state: Cancelled`` is one-way (ADR 0046 §1); entering it from Running or Suspended is allowed. A
finished Job (phase Succeeded, Failed or Cancelled) keeps its state: nothing is left to suspend, resume or
cancel, and a changed state would read as if it had been (``State: Cancelled`` beside ``Phase: Succeeded``).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, TypeAlias

from nodus.api.kinds.job.jsonview import JSONObject, as_str
from nodus.apimachinery import fieldpath, units
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1 import phases

# A nested dict lists the mutable fields below an immutable object; True marks a mutable field.
_MutableTree: TypeAlias = dict[str, "bool | _MutableTree"]
MUTABLE_FIELDS: _MutableTree = {
    "parallelism": True,
    "backoffLimit": True,
    "timeout": True,
    "activeDeadlineSeconds": True,
    "maxCostUSD": True,
    "ttlSecondsAfterFinished": True,
    "state": True,
    "recovery": {"maxAttempts": True, "checkpoint": {"interval": True, "retainAfterFinish": True}},
    "resources": {"nodes": True},
}
CANCELLED = "Cancelled"


def update_rules(new: JSONObject, old: JSONObject, path: Path, *, phase: str | None = None) -> list[FieldError]:
    """Every problem with changing spec ``old`` into ``new`` (both as stored: aliases folded, defaults written)
    of a Job whose ``status.phase`` is ``phase``."""
    return [
        *_immutable_changes(new, old, path, MUTABLE_FIELDS),
        *_max_cost_rules(new, old, path.child("maxCostUSD")),
        *_state_rules(new, old, path.child("state"), phase),
    ]


def _immutable_changes(new: Any, old: Any, path: Path, mutable: _MutableTree) -> list[FieldError]:
    if new == old:
        return []
    if isinstance(new, dict) and isinstance(old, dict):
        errors: list[FieldError] = []
        for key in [*old, *(key for key in new if key not in old)]:
            rule = mutable.get(key, {})
            if isinstance(rule, dict):
                errors.extend(_immutable_changes(new.get(key), old.get(key), path.child(key), rule))
        return errors
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        errors = []
        for index, (new_item, old_item) in enumerate(zip(new, old, strict=True)):
            errors.extend(_immutable_changes(new_item, old_item, path.index(index), {}))
        return errors
    shown = new if isinstance(new, str | int | float | bool) else None
    return [fieldpath.invalid(path, shown, "field is immutable")]


def _usd(value: object) -> Decimal | None:
    text = as_str(value)
    if text is None:
        return None
    try:
        return units.parse_usd(text)
    except ValueError:
        return None


def _max_cost_rules(new: JSONObject, old: JSONObject, path: Path) -> list[FieldError]:
    old_cap = old.get("maxCostUSD")
    if old_cap is None:
        return []  # adding a cap is always allowed
    if new.get("maxCostUSD") is None:
        return [fieldpath.forbidden(path, f"may not be removed: the cap can only be raised (it is {old_cap} now)")]
    old_amount, new_amount = _usd(old_cap), _usd(new.get("maxCostUSD"))
    if old_amount is None or new_amount is None or new_amount >= old_amount:
        return []
    return [
        fieldpath.invalid(
            path, new.get("maxCostUSD"), f"may only be raised: it is {old_cap} now; set {old_cap} or more"
        )
    ]


def _state_rules(new: JSONObject, old: JSONObject, path: Path, phase: str | None) -> list[FieldError]:
    if new.get("state") == old.get("state"):
        return []
    if phase in phases.JOB_FINISHED:
        return [
            fieldpath.invalid(
                path,
                new.get("state"),
                f"the Job has finished (phase {phase}), so its state stays {old.get('state')}: nothing is left to "
                "suspend, resume or cancel; create a new Job to run the work again",
            )
        ]
    if old.get("state") != CANCELLED:
        return []
    return [
        fieldpath.invalid(
            path,
            new.get("state"),
            "a Cancelled Job stays Cancelled: cancelling stops it for good; create a new Job to run it again",
        )
    ]
