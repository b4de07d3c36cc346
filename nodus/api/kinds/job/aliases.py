"""Write-time aliases of the Job spec, folded into their stored form on create and update.

Three spellings are accepted on write and never stored (ADR 0046 §10, §11, reference L135):

* ``activeDeadlineSeconds: 3600`` becomes ``timeout: 1h0m0s``. When ``timeout`` is also given and
  means the same duration, the user's ``timeout`` spelling is kept. On update, a ``timeout`` equal
  to the stored one is the old value carried along (a merge patch, or a read-modify-write), not a
  second opinion, so the alias replaces it.
* ``resources.nodes`` 0 or 1 means one node and is dropped; 2 or more is stored as
  ``distributed.nodes`` (creating ``distributed`` if needed).
* A bare string in ``secrets`` becomes ``{name: <string>}``.

When both spellings are given and disagree (``activeDeadlineSeconds`` against ``timeout``,
``resources.nodes`` against ``distributed.nodes`` or ``distributed.totalGPUs``), both are left in
place: the request is refused by validation (a 422 naming the alias), and folding one into the other
would hide the disagreement. A value of the wrong type is also left for validation to report. This
module never raises.
"""

from __future__ import annotations

from datetime import timedelta

from nodus.api.kinds.job.jsonview import JSONObject, as_int, as_object, as_str
from nodus.apimachinery import units


def canonicalize(spec: object, old_spec: object = None) -> None:
    """Fold the aliases of ``spec`` in place; ``old_spec`` is the stored spec on update, else None."""
    new = as_object(spec)
    if new is None:
        return
    old = as_object(old_spec)
    _fold_active_deadline(new, old.get("timeout") if old is not None else None)
    _fold_resource_nodes(new)
    _expand_bare_secrets(new)


def _parsed_duration(value: object) -> timedelta | None:
    text = as_str(value)
    if text is None:
        return None
    try:
        return units.parse_duration(text)
    except ValueError:
        return None


def _fold_active_deadline(spec: JSONObject, stored_timeout: object) -> None:
    if "activeDeadlineSeconds" not in spec:
        return
    if spec["activeDeadlineSeconds"] is None:
        del spec["activeDeadlineSeconds"]  # JSON null means unset
        return
    seconds = as_int(spec["activeDeadlineSeconds"])
    if seconds is None or seconds < 1:
        return  # not a valid alias value: validation names it
    deadline = timedelta(seconds=seconds)
    timeout = spec.get("timeout")
    if timeout is not None and _parsed_duration(timeout) == deadline:
        del spec["activeDeadlineSeconds"]  # they agree: keep timeout as the user wrote it
        return
    carried_over = stored_timeout is not None and timeout == stored_timeout
    if timeout is None or carried_over:
        spec["timeout"] = units.format_duration(deadline)
        del spec["activeDeadlineSeconds"]


def _fold_resource_nodes(spec: JSONObject) -> None:
    resources = as_object(spec.get("resources"))
    if resources is None or "nodes" not in resources:
        return
    raw = resources["nodes"]
    nodes = as_int(raw)
    if raw is not None and (nodes is None or nodes < 0):
        return  # not a valid node count: validation names it
    if nodes is not None and nodes >= 2 and not _store_as_distributed_nodes(spec, nodes):
        return  # disagrees with spec.distributed: validation names it
    del resources["nodes"]
    if not resources:
        del spec["resources"]


def _store_as_distributed_nodes(spec: JSONObject, nodes: int) -> bool:
    """Move a gang size of 2+ into ``distributed.nodes``; False when ``distributed`` says otherwise."""
    if spec.get("distributed") is None:
        spec["distributed"] = {"nodes": nodes}
        return True
    distributed = as_object(spec["distributed"])
    if distributed is None:
        return False
    if distributed.get("nodes") is None and distributed.get("totalGPUs") is None:
        distributed["nodes"] = nodes
        return True
    return as_int(distributed.get("nodes")) == nodes


def _expand_bare_secrets(spec: JSONObject) -> None:
    secrets = spec.get("secrets")
    if isinstance(secrets, list):
        for index, item in enumerate(secrets):
            if isinstance(item, str):
                secrets[index] = {"name": item}
