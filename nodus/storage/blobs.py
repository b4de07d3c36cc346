"""Blobs: content-addressed bytes, ``sha256:<64 hex>``, kept per project.

A blob is named by its digest *within a project* (``namespace``): a project sees only the blobs
uploaded to it, even when another project holds the same bytes. Uploads (job outputs, volume
revisions, anything posted to ``.../blobs``) stream through :func:`put`; downloads stream through
:func:`read`. Neither ever holds a whole blob in memory.

Two places (DESIGN: "Bytes ... an object-store interface"):

* the bytes, in an :class:`~nodus.storage.objectstore.ObjectStore` (the filesystem by default, S3 in
  production) under ``uploads/<upload id>``;
* what names them, in PostgreSQL (migration 0003): ``blobs(namespace, digest, size, media_type,
  upload_id, created_at)``, a project's name for an upload. Rows of several projects may point at
  one upload: that is the deduplication.

Writing: :func:`put` streams the body into a fresh object (it appears whole or not at all), hashing
as it goes; at the end it checks the expected digest (a mismatch deletes the object and raises
:class:`DigestMismatch`) and registers the blob in one transaction, serialised per digest by an
advisory lock: if the project has the digest already, or another project does, the new object is
deleted and the existing upload is used. A failed or cancelled upload deletes what it wrote.

Not yet (documented, for later): deleting blobs. A delete must drop the project's ``blobs`` row and
then the object only when no other row points at that ``upload_id`` (reference counting by query,
under the same per-digest lock). Objects left by a process that died between writing an object and
registering it belong to no row; a sweep can remove objects no row names once they are older than
any upload in flight. Nor is there a size limit per blob or a quota per project yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from nodus.storage.errors import StorageError
from nodus.storage.objects import Storage
from nodus.storage.objectstore import ObjectStore

DIGEST_PREFIX = "sha256:"
DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
DEFAULT_MEDIA_TYPE = "application/octet-stream"

# Two-key advisory locks (class, hash of the digest): never meets the one-key locks, nor the logs' class.
_LOCK_CLASS = 7262024

_OPEN = "SELECT digest, size, media_type, upload_id FROM blobs WHERE namespace = $1 AND digest = $2"


class DigestMismatch(StorageError):
    """The uploaded bytes hash to ``actual``, not to the ``expected`` digest the caller named."""

    def __init__(self, expected: str, actual: str, size: int) -> None:
        super().__init__(f"the uploaded {size} bytes have digest {actual}, not the expected {expected}")
        self.expected = expected
        self.actual = actual
        self.size = size


@dataclass(frozen=True)
class BlobInfo:
    """A stored blob: its digest (``sha256:<hex>``), size in bytes and media type, and (for
    :func:`read`) the upload that holds its bytes."""

    digest: str
    size: int
    media_type: str
    upload_id: uuid.UUID | None = field(default=None, compare=False, repr=False)

    @property
    def hex(self) -> str:
        """The digest without its ``sha256:`` prefix (as Job ``status.outputs[].sha256`` holds it)."""
        return self.digest.removeprefix(DIGEST_PREFIX)


def is_digest(value: str) -> bool:
    """Whether ``value`` is ``sha256:`` and 64 lower-case hex digits."""
    return DIGEST_PATTERN.fullmatch(value) is not None


def _connection(storage: Storage) -> Callable[[], contextlib.AbstractAsyncContextManager[Any]]:
    # The object store's pool: blobs share its connections and its start/stop, as logs do.
    return storage._connection


def object_key(upload_id: uuid.UUID) -> str:
    """The object store key of an upload's bytes."""
    return f"uploads/{upload_id}"


async def put(
    storage: Storage,
    store: ObjectStore,
    namespace: str,
    chunks: AsyncIterator[bytes],
    media_type: str = DEFAULT_MEDIA_TYPE,
    expected_digest: str | None = None,
) -> BlobInfo:
    """Store the bytes of ``chunks`` as a blob of ``namespace``; returns the blob as registered.

    Pieces of any size are accepted and streamed to ``store`` as they arrive. When
    ``expected_digest`` is given and the bytes hash otherwise, nothing is kept and
    :class:`DigestMismatch` is raised. When the project already has the digest, the existing blob is
    returned (with the media type it was first stored with). Whatever fails (the database, the
    store, the source of ``chunks``, cancellation), the new object is removed before the exception
    propagates."""
    connection = _connection(storage)
    upload_id = uuid.uuid4()
    key = object_key(upload_id)
    hasher = hashlib.sha256()

    async def hashed() -> AsyncIterator[bytes]:
        async for piece in chunks:
            if piece:
                hasher.update(piece)
                yield piece

    registered = False
    try:
        size = await store.put(key, hashed())
        digest = DIGEST_PREFIX + hasher.hexdigest()
        if expected_digest is not None and expected_digest != digest:
            raise DigestMismatch(expected_digest, digest, size)
        info = await _register(connection, store, namespace, BlobInfo(digest, size, media_type, upload_id))
        registered = True
        return info
    finally:
        if not registered:
            # Shielded: a cancelled upload still removes what it wrote.
            await asyncio.shield(store.delete(key))


async def _register(
    connection: Callable[[], contextlib.AbstractAsyncContextManager[Any]],
    store: ObjectStore,
    namespace: str,
    staged: BlobInfo,
) -> BlobInfo:
    """Name ``staged`` in ``namespace``, reusing an upload of the same digest when there is one."""
    assert staged.upload_id is not None
    async with connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1::int, hashtext($2))", _LOCK_CLASS, staged.digest)
        mine = await conn.fetchrow(_OPEN, namespace, staged.digest)
        if mine is not None:
            await store.delete(object_key(staged.upload_id))
            return _info(mine)
        upload_id = await conn.fetchval(
            "SELECT upload_id FROM blobs WHERE digest = $1 AND size = $2 LIMIT 1", staged.digest, staged.size
        )
        if upload_id is None:
            upload_id = staged.upload_id
        else:
            await store.delete(object_key(staged.upload_id))
        await conn.execute(
            "INSERT INTO blobs (namespace, digest, size, media_type, upload_id) VALUES ($1, $2, $3, $4, $5)",
            namespace,
            staged.digest,
            staged.size,
            staged.media_type,
            upload_id,
        )
    return BlobInfo(staged.digest, staged.size, staged.media_type, upload_id)


def _info(record: Any) -> BlobInfo:
    return BlobInfo(record["digest"], record["size"], record["media_type"], record["upload_id"])


async def open(storage: Storage, namespace: str, digest: str) -> BlobInfo | None:
    """The blob ``digest`` of ``namespace``; None when that project never stored it."""
    async with _connection(storage)() as conn:
        record = await conn.fetchrow(_OPEN, namespace, digest)
    return _info(record) if record is not None else None


async def read(store: ObjectStore, info: BlobInfo, start: int = 0) -> AsyncIterator[bytes]:
    """The bytes of ``info`` from byte offset ``start``, streamed from the object store.

    A blob whose object is missing (a bug, or a store emptied by hand) ends with StorageError rather
    than a short stream; so does one whose object is shorter than its recorded size."""
    if start < 0:
        raise ValueError("start must be >= 0")
    if info.upload_id is None:
        raise ValueError("read needs a BlobInfo from open() or put()")
    remaining = info.size - start
    if remaining <= 0:
        return
    try:
        async for chunk in store.get(object_key(info.upload_id), start):
            remaining -= len(chunk)
            yield chunk
    except FileNotFoundError:
        raise StorageError(f"blob {info.digest}: its object {object_key(info.upload_id)} is missing") from None
    if remaining > 0:
        raise StorageError(f"blob {info.digest}: its object ended {remaining} bytes short")
