"""A Job's progress history as the API serves it (``JobProgressHistory``, ADR 0054).

The samples are those of the Job as it is stored now (by its uid): a Job deleted and created again under
the same name starts with an empty history. Each sample is rendered with its time (RFC 3339, microseconds),
``completed`` and ``total`` (null when not reported), ``metrics`` (name to decimal string) and ``costUSD``
(decimal string, null before any charge), oldest first.
"""

from __future__ import annotations

from typing import Any

from nodus.api.registry import API_VERSION
from nodus.apimachinery.units import format_micro_time
from nodus.storage import progresssamples
from nodus.storage.objects import Storage

KIND = "JobProgressHistory"


async def history(storage: Storage, job: dict[str, Any]) -> dict[str, Any]:
    """The ``JobProgressHistory`` body of the stored Job ``job``."""
    kept = await progresssamples.samples(storage, str(job["metadata"]["uid"]))
    return {
        "kind": KIND,
        "apiVersion": API_VERSION,
        "job": job["metadata"]["name"],
        "samples": [
            {
                "time": format_micro_time(sample.time) if sample.time is not None else None,
                "completed": sample.completed,
                "total": sample.total,
                "metrics": sample.metrics,
                "costUSD": sample.cost_usd,
            }
            for sample in kept
        ],
    }
