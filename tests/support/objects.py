"""Small builders for objects used by the end-to-end tests."""

from __future__ import annotations

import copy
from typing import Any

from tests.support import images

API = "/apis/nodus.dev/v1"


def job(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A valid Job: one H100 running a short command in the session registry's base image, with overrides merged
    into spec."""
    body: dict[str, Any] = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "image": images.registry_python_image(),
            "command": ["python", "-c", "print('hello')"],
            "resources": {"gpu": {"type": ["H100"], "count": 1}},
        },
    }
    body["spec"].update(copy.deepcopy(spec))
    return body


def jobs_path(project: str, name: str = "") -> str:
    return f"{API}/namespaces/{project}/jobs" + (f"/{name}" if name else "")
