"""Warnings returned with a successful Job write (the ``Warning`` headers kubectl prints).

One situation is worth a warning rather than a refusal (ADR 0046 §16): a
``ttlSecondsAfterFinished`` shorter than ``recovery.checkpoint.retainAfterFinish``. The TTL deletes
the Job and everything it owns, checkpoints included, so the checkpoints live only as long as the
TTL; both are valid settings, but the shorter one wins, and the user should know which.

On update the warning is repeated only when one of the two values changed, so that unrelated edits
(suspending, raising the cap) do not print it again and again.
"""

from __future__ import annotations

from datetime import timedelta

from nodus.api.kinds.job.jsonview import JSONObject, as_int, as_object, as_str, child
from nodus.apimachinery import units


def on_create(obj: JSONObject) -> list[str]:
    warning = _ttl_warning(as_object(obj.get("spec")))
    return [warning] if warning else []


def on_update(new: JSONObject, old: JSONObject) -> list[str]:
    new_spec, old_spec = as_object(new.get("spec")), as_object(old.get("spec"))
    if _ttl_and_retention(new_spec) == _ttl_and_retention(old_spec):
        return []
    return on_create(new)


def _ttl_and_retention(spec: JSONObject | None) -> tuple[object, object]:
    checkpoint = child(spec, "recovery", "checkpoint")
    retain = checkpoint.get("retainAfterFinish") if checkpoint is not None else None
    return (spec.get("ttlSecondsAfterFinished") if spec is not None else None, retain)


def _ttl_warning(spec: JSONObject | None) -> str | None:
    ttl_value, retain_value = _ttl_and_retention(spec)
    ttl, retain_text = as_int(ttl_value), as_str(retain_value)
    if ttl is None or ttl < 0 or retain_text is None:
        return None
    try:
        retain = units.parse_duration(retain_text)
    except ValueError:
        return None  # validation reports it
    kept = timedelta(seconds=ttl)
    if kept >= retain:
        return None
    return (
        f"spec.ttlSecondsAfterFinished ({ttl}s) is shorter than spec.recovery.checkpoint.retainAfterFinish "
        f"({retain_text}): deleting the Job {units.format_duration(kept)} after it finishes also deletes its "
        f"checkpoints, so they are kept {units.format_duration(kept)}, not {retain_text}; raise "
        "ttlSecondsAfterFinished or lower retainAfterFinish if that is not what you want"
    )
