"""Tests of nodus.api.fieldmanagement, with a realistic Job and the helpers the test modules share."""

from __future__ import annotations

import copy
from typing import Any

from nodus.api.fieldmanagement import apply, update_managed_fields
from nodus.api.fieldmanagement.fieldsets import FieldSet, path_string

API_VERSION = "nodus.dev/v1"
# As the Job kind declares them (a subset).
LIST_KEYS = {
    "spec.env": ("name",),
    "spec.sidecars": ("name",),
    "spec.sidecars.env": ("name",),
    "status.conditions": ("type",),
}

T0 = "2024-05-01T10:00:00Z"
T1 = "2024-05-01T10:01:00Z"
T2 = "2024-05-01T10:02:00Z"
T3 = "2024-05-01T10:03:00Z"


def job_spec() -> dict[str, Any]:
    return {
        "completions": 4,
        "parallelism": 2,
        "image": "registry.example/train:1.4",
        "command": ["python", "-m", "train"],
        "env": [{"name": "EPOCHS", "value": "10"}, {"name": "LR", "value": "0.001"}],
        "resources": {"gpu": {"count": 8}},
    }


def configuration(
    spec: dict[str, Any] | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An applied configuration of the Job ``train`` in ``research``."""
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "research", **(metadata or {})},
    }
    if spec is not None:
        obj["spec"] = spec
    if status is not None:
        obj["status"] = status
    return obj


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the store would hold it: with the system metadata a real object carries."""
    result = copy.deepcopy(obj)
    result["metadata"].update(
        {"uid": "7c4e1f1e-0000-4000-8000-000000000001", "resourceVersion": "12", "creationTimestamp": T0}
    )
    return result


def apply_as(live: dict[str, Any] | None, applied: dict[str, Any], manager: str, **options: Any) -> dict[str, Any]:
    options.setdefault("force", False)
    options.setdefault("now", T1)
    return apply(live, applied, manager=manager, api_version=API_VERSION, list_keys=LIST_KEYS, **options)


def update_as(old: dict[str, Any] | None, new: dict[str, Any], manager: str, **options: Any) -> dict[str, Any]:
    """``new`` with the managedFields an update by ``manager`` records."""
    options.setdefault("now", T1)
    managed = update_managed_fields(old, new, manager=manager, api_version=API_VERSION, list_keys=LIST_KEYS, **options)
    result = copy.deepcopy(new)
    if managed:
        result["metadata"]["managedFields"] = managed
    else:
        result["metadata"].pop("managedFields", None)
    return result


def entry_ids(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(manager, operation, subresource) of each managedFields entry, in order."""
    return [
        (entry.get("manager", ""), entry["operation"], entry.get("subresource", ""))
        for entry in obj["metadata"].get("managedFields", [])
    ]


def entry(obj: dict[str, Any], manager: str, operation: str = "Apply", subresource: str = "") -> dict[str, Any]:
    for candidate in obj["metadata"].get("managedFields", []):
        if (candidate.get("manager"), candidate["operation"], candidate.get("subresource", "")) == (
            manager,
            operation,
            subresource,
        ):
            return dict(candidate)
    raise AssertionError(f"no {operation} entry of {manager!r} in {entry_ids(obj)}")


def owned(obj: dict[str, Any], manager: str, operation: str = "Apply", subresource: str = "") -> list[str]:
    """The paths an entry owns, as kube-apiserver prints them, in structured-merge-diff's order."""
    fields = FieldSet.from_fields_v1(entry(obj, manager, operation, subresource)["fieldsV1"])
    return [path_string(path) for path in fields.ordered()]
