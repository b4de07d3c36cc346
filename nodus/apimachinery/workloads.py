"""What makes two Jobs "the same program": the workload signature, for the estimate's history.

The estimate takes a Job's duration from its ``expectedDuration``, else from how long earlier Jobs of
the project with the same image and command ran. The Job controller labels every Attempt with the
signature of its Job's image, command and args (:data:`LABEL`), so the API server finds those runs
with one indexed label query; both compute it here, in exactly one way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

LABEL = "nodus.dev/workload"


def signature(spec: Mapping[str, Any]) -> str:
    """A label value (24 hex digits) naming the image (or imageRef), command and args of a Job spec.

    Environment, resources and placement are left out on purpose: the same program on other capacity
    or with another seed is still the same program, and its history is the best guess there is."""
    image = spec.get("image") or spec.get("imageRef") or ""
    text = orjson.dumps([image, spec.get("command") or [], spec.get("args") or []])
    return hashlib.sha256(text).hexdigest()[:24]
