"""Upload limits through a real API server (ADR 0034): a blob larger than --max-blob-size is a 413 before or
while its body streams, and an upload that would take a project past --project-storage-quota is a 403,
with nothing stored either way; concurrent uploads near the quota never pass it."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import make_project
from tests.e2e.test_blobs import blobs_path, digest_of, upload, volumes_path
from tests.support import cluster as clusters
from tests.support.cluster import Cluster

pytestmark = pytest.mark.e2e

MIB = 2**20
MAX_BLOB = MIB  # --max-blob-size 1Mi
QUOTA = 3 * MIB  # --project-storage-quota 3Mi


@pytest.fixture(scope="module")
def limited(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("limited")
    flags = ("--max-blob-size", "1Mi", "--project-storage-quota", "3Mi", "--blob-collection-interval", "200ms")
    with clusters.on_own_database(database_server, directory, extra_args=flags) as cluster:
        yield cluster


@pytest.fixture
def admin_of(limited: Cluster) -> Iterator[httpx.Client]:
    with limited.client("admin") as client:
        yield client


def stored_objects(cluster: Cluster) -> list[Path]:
    """Every object in the cluster's blob store, complete or being written."""
    root = cluster.directory / "blobs"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def raw_request(cluster: Cluster, head: str) -> bytes:
    """Send only ``head`` (request line and headers) over TLS and return what the server answers before any
    body is sent: a server that waited for the body would answer nothing within the timeout."""
    parts = urlsplit(cluster.url)
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    with (
        socket.create_connection((parts.hostname, parts.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=parts.hostname) as tls,
    ):
        tls.sendall(head.encode())
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            piece = tls.recv(65536)
            if not piece:
                break
            answer += piece
        return answer


def test_a_declared_size_over_the_maximum_is_a_413_before_the_body_is_read(
    limited: Cluster, admin_of: httpx.Client
) -> None:
    project = make_project(admin_of)
    before = stored_objects(limited)
    head = (
        f"POST {blobs_path(project)} HTTP/1.1\r\nHost: {urlsplit(limited.url).netloc}\r\n"
        f"Authorization: Bearer {limited.tokens['admin']}\r\nContent-Type: application/octet-stream\r\n"
        f"Content-Length: {64 * MIB}\r\n\r\n"
    )
    answer = raw_request(limited, head)  # no byte of the 64 MiB body is ever sent
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"reason":"BlobTooLarge"' in answer and b"1Mi (1048576 bytes)" in answer
    assert b"connection: close" in answer.lower()
    assert stored_objects(limited) == before


def test_a_body_without_a_length_is_refused_the_moment_it_passes_the_maximum(
    limited: Cluster, admin_of: httpx.Client
) -> None:
    project = make_project(admin_of)
    before = stored_objects(limited)
    sent = 0
    total = 256 * MIB

    def endless() -> Iterator[bytes]:
        nonlocal sent
        piece = os.urandom(64 * 1024)
        while sent < total:
            sent += len(piece)
            yield piece

    try:
        refused = admin_of.post(blobs_path(project), content=endless())
    except httpx.TransportError:
        refused = None  # the server closed the connection with the body still coming: also a refusal
    if refused is not None:
        assert refused.status_code == 413, refused.text
        assert refused.json()["reason"] == "BlobTooLarge" and "1Mi (1048576 bytes)" in refused.json()["message"]
    # The server stopped reading at the limit: what was sent is the limit plus what the sockets buffer.
    assert sent < 64 * MIB
    assert stored_objects(limited) == before, "the partial object is deleted"


def test_a_volume_revision_over_the_maximum_is_refused_too(admin_of: httpx.Client) -> None:
    project = make_project(admin_of)
    volume = {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": "data"}, "spec": {}}
    assert admin_of.post(volumes_path(project), json=volume).status_code == 201
    refused = admin_of.post(volumes_path(project, "data") + "/revisions", content=b"x" * (MAX_BLOB + 1))
    assert refused.status_code == 413 and refused.json()["reason"] == "BlobTooLarge", refused.text
    assert admin_of.get(volumes_path(project, "data")).json()["status"]["revisions"] == []


def test_an_upload_past_the_quota_is_a_403_and_the_project_keeps_what_it_had(
    limited: Cluster, admin_of: httpx.Client
) -> None:
    project = make_project(admin_of)
    kept = [os.urandom(MIB) for _ in range(3)]
    for body in kept:
        assert upload(admin_of, project, body).status_code == 201
    before = stored_objects(limited)

    extra = os.urandom(1024)
    refused = upload(admin_of, project, extra)
    assert refused.status_code == 403, refused.text
    status = refused.json()
    assert status["reason"] == "StorageQuotaExceeded" and status["code"] == 403
    assert (
        f"project {project} stores 3Mi (3145728 bytes) of its storage quota of 3Mi (3145728 bytes)" in status["message"]
    )
    assert "1Ki (1024 bytes)" in status["message"] and "--project-storage-quota" in status["fix"]
    assert admin_of.get(blobs_path(project, digest_of(extra))).status_code == 404
    assert stored_objects(limited) == before

    # Bytes the project holds already take no quota: uploading them again is a 201, as before.
    again = upload(admin_of, project, kept[0], digest=digest_of(kept[0]))
    assert again.status_code == 201, again.text
    # The quota is per project: another project stores as much again.
    assert upload(admin_of, make_project(admin_of), extra).status_code == 201

    def usage() -> object:
        return (admin_of.get(f"/apis/nodus.dev/v1/projects/{project}").json().get("status") or {}).get("storage")

    shown = wait_for(usage)
    assert shown["bytes"] == QUOTA and shown["quotaBytes"] == QUOTA


def wait_for(check: object, timeout: float = 30) -> dict[str, object]:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()  # type: ignore[operator]
        if value:
            return value  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_concurrent_uploads_near_the_quota_never_pass_it(limited: Cluster, admin_of: httpx.Client) -> None:
    project = make_project(admin_of)
    bodies = [os.urandom(MIB) for _ in range(8)]  # 8 MiB offered at once to a 3 MiB quota
    before = len(stored_objects(limited))

    async def race() -> list[httpx.Response]:
        async with limited.async_client("admin") as client:
            return list(
                await asyncio.gather(
                    *(
                        client.post(blobs_path(project), content=body, params={"digest": digest_of(body)})
                        for body in bodies
                    )
                )
            )

    answers = asyncio.run(race())
    codes = sorted(a.status_code for a in answers)
    assert codes == [201] * 3 + [403] * 5, [a.text for a in answers if a.status_code not in (201, 403)]
    stored = [b for b, a in zip(bodies, answers, strict=True) if a.status_code == 201]
    for body in bodies:
        expected = 200 if body in stored else 404
        assert admin_of.get(blobs_path(project, digest_of(body))).status_code == expected
    assert len(stored_objects(limited)) == before + 3  # the refused uploads left nothing behind
