"""The client's raw byte transfers: streamed blob uploads and downloads, errors as APIError."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import AsyncIterator

import httpx
import pytest

from nodus.client import Client, errors
from tests.conftest import make_project

pytestmark = pytest.mark.e2e


async def pieces(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def test_upload_a_stream_and_download_it(client: Client, admin: httpx.Client) -> None:
    project = make_project(admin)
    body = os.urandom(2 * 1024 * 1024 + 3)
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    blob = await client.upload_blob(project, pieces(body, 100_000), "application/x-tar", digest=digest)
    assert blob == {
        "kind": "Blob",
        "apiVersion": "nodus.dev/v1",
        "digest": digest,
        "size": len(body),
        "mediaType": "application/x-tar",
    }
    path = f"/apis/nodus.dev/v1/namespaces/{project}/blobs/{digest}"
    assert b"".join([chunk async for chunk in client.download(path)]) == body
    async with client.open_download(path) as response:
        assert response.headers["etag"].strip('"') == digest
    # One bytes value works too, and stopping a download early releases it.
    assert (await client.upload_blob(project, b"small"))["size"] == 5
    async with contextlib.aclosing(client.download(path)) as stream:
        async for _ in stream:
            break


async def test_errors_are_api_errors(client: Client, admin: httpx.Client) -> None:
    project = make_project(admin)
    with pytest.raises(errors.Invalid) as mismatch:
        await client.upload_blob(project, b"abc", digest="sha256:" + "1" * 64)
    assert "sha256:" + "1" * 64 in mismatch.value.message
    with pytest.raises(errors.NotFound):
        async for _ in client.download(f"/apis/nodus.dev/v1/namespaces/{project}/blobs/sha256:{'2' * 64}"):
            pass
