"""Storage tests run against the real PostgreSQL of the test run, in-process; blob tests against both
object stores (the filesystem, and moto's real S3-compatible server)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from nodus.storage.objects import Storage
from nodus.storage.objectstore import FilesystemStore, ObjectStore, S3Store


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


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ObjectStore:
    if request.param == "file":
        return FilesystemStore(tmp_path / "blobs")
    endpoint = request.getfixturevalue("s3_endpoint")
    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")):
        monkeypatch.setenv(name, value)
    bucket = f"b-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return S3Store(bucket, "nodus", endpoint=endpoint, region="us-east-1")


def object_count(store: ObjectStore) -> int:
    if isinstance(store, FilesystemStore):
        uploads = store.root / "uploads"
        return sum(1 for path in uploads.rglob("*") if path.is_file()) if uploads.exists() else 0
    assert isinstance(store, S3Store)
    listed = store._client.list_objects_v2(Bucket=store.bucket)
    return int(listed.get("KeyCount", 0))
