"""Blobs: streamed round trips, digest checks, deduplication and project scoping, on both object stores.

One suite, run against the filesystem store and the S3 store (moto's real S3-compatible server), as
the same interface must behave the same way behind either.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Iterable

import pytest

from nodus.storage import blobs
from nodus.storage.objects import Storage
from nodus.storage.objectstore import ObjectStore
from tests.storage.conftest import object_count, unique_namespace

MIB = 1024 * 1024


async def pieces(body: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def iterate(items: Iterable[bytes]) -> AsyncIterator[bytes]:
    for item in items:
        yield item


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


async def read_all(store: ObjectStore, info: blobs.BlobInfo, start: int = 0) -> bytes:
    return b"".join([chunk async for chunk in blobs.read(store, info, start)])


async def test_a_20_mib_body_sent_in_100_kib_pieces_reads_back_whole(storage: Storage, store: ObjectStore) -> None:
    body = os.urandom(20 * 1024 * 1024)
    namespace = unique_namespace()
    info = await blobs.put(storage, store, namespace, pieces(body, 100 * 1024), "application/octet-stream")
    assert (info.digest, info.size, info.media_type) == (digest_of(body), len(body), "application/octet-stream")

    opened = await blobs.open(storage, namespace, info.digest)
    assert opened == info
    sizes = [len(chunk) async for chunk in blobs.read(store, opened)]
    assert sum(sizes) == len(body) and max(sizes) <= MIB  # streamed in pieces of at most 1 MiB
    assert await read_all(store, opened) == body


@pytest.mark.parametrize(
    "start",
    [
        pytest.param(0, id="start"),
        pytest.param(1, id="one-byte-in"),
        pytest.param(MIB, id="chunk-boundary"),
        pytest.param(MIB + 7, id="inside-second-chunk"),
        pytest.param(3 * MIB // 2 + 10, id="last-byte"),
        pytest.param(3 * MIB // 2 + 11, id="end"),
    ],
)
async def test_reading_from_an_offset(storage: Storage, store: ObjectStore, start: int) -> None:
    body = os.urandom(3 * MIB // 2 + 11)
    info = await blobs.put(storage, store, unique_namespace(), iterate([body]), "application/x-tar")
    assert await read_all(store, info, start) == body[start:]


async def test_the_expected_digest_is_checked_and_a_mismatch_keeps_nothing(
    storage: Storage, store: ObjectStore
) -> None:
    body = os.urandom(3 * 1024 * 1024 + 5)
    namespace = unique_namespace()
    before = object_count(store)
    wrong = "sha256:" + "0" * 64
    with pytest.raises(blobs.DigestMismatch) as raised:
        await blobs.put(storage, store, namespace, pieces(body, 256 * 1024), expected_digest=wrong)
    assert raised.value.expected == wrong and raised.value.actual == digest_of(body)
    assert wrong in str(raised.value) and digest_of(body) in str(raised.value)
    assert object_count(store) == before
    assert await blobs.open(storage, namespace, digest_of(body)) is None

    right = await blobs.put(storage, store, namespace, pieces(body, 256 * 1024), expected_digest=digest_of(body))
    assert right.digest == digest_of(body)


async def test_a_failing_source_keeps_nothing(storage: Storage, store: ObjectStore) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield os.urandom(2 * MIB + 1)
        raise ConnectionError("client went away")

    before = object_count(store)
    with pytest.raises(ConnectionError):
        await blobs.put(storage, store, unique_namespace(), broken())
    assert object_count(store) == before


async def test_the_same_blob_twice_in_one_project_is_stored_once(storage: Storage, store: ObjectStore) -> None:
    body = os.urandom(2 * MIB + 3)
    namespace = unique_namespace()
    first = await blobs.put(storage, store, namespace, iterate([body]), "application/x-tar")
    after_first = object_count(store)
    second = await blobs.put(storage, store, namespace, pieces(body, 4096), "application/x-tar")
    assert second == first and second.upload_id == first.upload_id
    assert object_count(store) == after_first
    assert await read_all(store, second) == body


async def test_another_project_cannot_open_a_blob_it_never_uploaded(storage: Storage, store: ObjectStore) -> None:
    body = os.urandom(1000)
    owner, other = unique_namespace(), unique_namespace()
    info = await blobs.put(storage, store, owner, iterate([body]), "text/plain")
    assert await blobs.open(storage, other, info.digest) is None
    assert await blobs.open(storage, owner, info.digest) == info


async def test_the_same_bytes_in_two_projects_share_one_copy(storage: Storage, store: ObjectStore) -> None:
    body = os.urandom(MIB + 1)
    first_ns, second_ns = unique_namespace(), unique_namespace()
    first = await blobs.put(storage, store, first_ns, iterate([body]), "application/x-tar")
    after_first = object_count(store)
    second = await blobs.put(storage, store, second_ns, iterate([body]), "application/vnd.nodus.tar+zstd")
    assert object_count(store) == after_first
    assert second.upload_id == first.upload_id
    assert second.media_type == "application/vnd.nodus.tar+zstd"  # each project keeps its own media type
    assert await read_all(store, second) == body


async def test_an_empty_blob(storage: Storage, store: ObjectStore) -> None:
    namespace = unique_namespace()
    info = await blobs.put(storage, store, namespace, iterate([b"", b""]), "text/plain")
    assert (info.digest, info.size) == (digest_of(b""), 0)
    opened = await blobs.open(storage, namespace, info.digest)
    assert opened is not None and await read_all(store, opened) == b""


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        pytest.param("sha256:" + "a" * 64, True, id="valid"),
        pytest.param("sha256:" + "A" * 64, False, id="upper-case"),
        pytest.param("a" * 64, False, id="no-prefix"),
        pytest.param("sha256:" + "a" * 63, False, id="short"),
        pytest.param("sha512:" + "a" * 64, False, id="algorithm"),
    ],
)
def test_digest_syntax(value: str, valid: bool) -> None:
    assert blobs.is_digest(value) is valid
