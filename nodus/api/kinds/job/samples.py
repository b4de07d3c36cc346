"""What one sample of a Job's progress history holds, and when a write records one (ADR 0054).

A sample is the Job's ``status.progress.units`` (``completed``, ``total``), ``status.progress.metrics`` and
``status.cost.totalUSD`` as a write leaves them. A write records one when any of these differ from what the
stored Job showed (a stage name alone is not plotted, so it records nothing), and a Job that shows none of
them (Pending, no charge yet) records nothing.

This runs on every Job write, so it reads the raw status with the lenient accessors of
:mod:`~nodus.api.kinds.job.jsonview` instead of decoding the typed status: a write that changes none of these
fields pays for a few dictionary lookups, not a model validation, and runs no extra statement.
"""

from __future__ import annotations

from nodus.api.kinds.job.jsonview import JSONObject, as_int, as_str, child
from nodus.storage.progresssamples import Sample


def shown(obj: JSONObject) -> Sample | None:
    """The sample ``obj`` shows, or None when it shows no progress and no cost."""
    progress = child(obj, "status", "progress")
    cost = child(obj, "status", "cost")
    units = child(progress, "units")
    raw_metrics = child(progress, "metrics") or {}
    metrics = {str(name): value for name, value in raw_metrics.items() if isinstance(value, str)}
    completed = as_int(units.get("completed")) if units is not None else None
    total = as_int(units.get("total")) if units is not None else None
    cost_usd = as_str(cost.get("totalUSD")) if cost is not None else None
    if completed is None and total is None and not metrics and cost_usd is None:
        return None
    return Sample(completed, total, metrics, cost_usd)


def _raw(obj: JSONObject) -> tuple[object, object, object]:
    """The parts of the status a sample is made of, as stored: equal parts make equal samples."""
    progress = child(obj, "status", "progress") or {}
    cost = child(obj, "status", "cost") or {}
    return progress.get("units"), progress.get("metrics"), cost.get("totalUSD")


def recorded(new: JSONObject, old: JSONObject | None) -> Sample | None:
    """The sample a write from ``old`` (None: a create) to ``new`` records, or None when it records none."""
    if old is not None and _raw(new) == _raw(old):
        return None  # the common case (a phase, a condition, a heartbeat), decided without building samples
    sample = shown(new)
    if sample is None or (old is not None and shown(old) == sample):
        return None
    return sample
