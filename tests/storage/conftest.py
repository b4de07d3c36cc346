"""Storage tests run against the real PostgreSQL of the test run, in-process."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nodus.storage.objects import Storage


@pytest.fixture
async def storage(database_url: str) -> AsyncIterator[Storage]:
    store = Storage(database_url, pool_size=8, compaction_interval=3600)
    await store.start()
    yield store
    await store.stop()


def job(namespace: str, name: str, labels: dict[str, str] | None = None, phase: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "labels": labels or {}},
        "spec": {"image": "busybox"},
    }
    if phase:
        body["status"] = {"phase": phase}
    return body


def unique_namespace() -> str:
    return f"ns-{uuid.uuid4().hex[:8]}"
