"""Blobs: content-addressed bytes, ``sha256:<64 hex>``, kept per project in PostgreSQL.

A blob is named by its digest *within a project* (``namespace``): a project sees only the blobs
uploaded to it, even when another project holds the same bytes. Uploads (job outputs, volume
revisions, anything posted to ``.../blobs``) stream through :func:`put`; downloads stream through
:func:`read`. Neither ever holds a whole blob in memory: at most two batches of ``BATCH_CHUNKS``.

Layout (migration 0003):

* ``blob_chunks(upload_id, seq, data)``: the bytes of one upload in ``CHUNK_BYTES`` (1 MiB) pieces,
  ``seq`` from 0. Every chunk but the last is exactly ``CHUNK_BYTES`` long, so byte offset ``n``
  lives in chunk ``n // CHUNK_BYTES``; changing ``CHUNK_BYTES`` needs a migration of old uploads.
  ``data`` is stored EXTERNAL (out of line, uncompressed: uploads are mostly compressed already).
* ``blobs(namespace, digest, size, media_type, upload_id, created_at)``: a project's name for an
  upload. Rows of several projects may point at one upload: that is the deduplication.

Writing: :func:`put` stores the chunks as they arrive, under a fresh ``upload_id``, ``BATCH_CHUNKS``
per short transaction (one WAL flush per batch; a slow client never holds a pooled connection while
it sends), one batch committing while the next is received, hashing as it goes.
At the end it checks the expected digest (a mismatch deletes the staged chunks and raises
:class:`DigestMismatch`) and registers the blob in one transaction, serialised per digest by an
advisory lock: if the project has the digest already, or another project does, the new chunks are
deleted and the existing upload is used. A failed or cancelled upload deletes what it staged.

Not yet (documented, for later): deleting blobs. A delete must drop the project's ``blobs`` row and
then the upload's chunks only when no other row points at that ``upload_id`` (reference counting by
query, under the same per-digest lock). Chunks left by a process that died mid-upload belong to no
``blobs`` row; a sweep can remove chunks whose ``upload_id`` no row names once they are older than
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

CHUNK_BYTES = 1024 * 1024
# Chunks written in one transaction, and read in one query: a batch is in flight while the next one
# is received (or sent), so at most two batches (8 MiB) of a blob are in memory.
BATCH_CHUNKS = 4
DIGEST_PREFIX = "sha256:"
DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
DEFAULT_MEDIA_TYPE = "application/octet-stream"

# Two-key advisory locks (class, hash of the digest): never meets the one-key locks, nor the logs' class.
_LOCK_CLASS = 7262024

_INSERT_CHUNK = "INSERT INTO blob_chunks (upload_id, seq, data) VALUES ($1, $2, $3)"
_DELETE_CHUNKS = "DELETE FROM blob_chunks WHERE upload_id = $1"
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


async def _rechunked(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``pieces`` regrouped into ``CHUNK_BYTES`` chunks (the last may be shorter; none is empty)."""
    buffer = bytearray()
    async for piece in pieces:
        if not piece:
            continue
        buffer += piece
        while len(buffer) >= CHUNK_BYTES:
            yield bytes(buffer[:CHUNK_BYTES])
            del buffer[:CHUNK_BYTES]
    if buffer:
        yield bytes(buffer)


async def put(
    storage: Storage,
    namespace: str,
    chunks: AsyncIterator[bytes],
    media_type: str = DEFAULT_MEDIA_TYPE,
    expected_digest: str | None = None,
) -> BlobInfo:
    """Store the bytes of ``chunks`` as a blob of ``namespace``; returns the blob as registered.

    Pieces of any size are accepted and stored as they arrive. When ``expected_digest`` is given
    and the bytes hash otherwise, nothing is kept and :class:`DigestMismatch` is raised. When the
    project already has the digest, the existing blob is returned (with the media type it was
    first stored with). Whatever fails (the database, the source of ``chunks``, cancellation),
    the staged chunks are removed before the exception propagates."""
    connection = _connection(storage)
    upload_id = uuid.uuid4()
    hasher = hashlib.sha256()
    size = 0
    seq = 0
    registered = False
    batch: list[tuple[uuid.UUID, int, bytes]] = []
    writing: asyncio.Task[None] | None = None
    try:
        async for chunk in _rechunked(chunks):
            hasher.update(chunk)
            size += len(chunk)
            batch.append((upload_id, seq, chunk))
            seq += 1
            if len(batch) == BATCH_CHUNKS:
                # One batch in flight while the next arrives: the body keeps flowing during the
                # commit, and memory stays at two batches.
                if writing is not None:
                    await writing
                writing = asyncio.create_task(_write(connection, batch))
                batch = []
        if writing is not None:
            await writing
            writing = None
        if batch:
            await _write(connection, batch)
        digest = DIGEST_PREFIX + hasher.hexdigest()
        if expected_digest is not None and expected_digest != digest:
            raise DigestMismatch(expected_digest, digest, size)
        info = await _register(connection, namespace, BlobInfo(digest, size, media_type, upload_id))
        registered = True
        return info
    finally:
        if writing is not None and not writing.done():
            writing.cancel()
            with contextlib.suppress(BaseException):
                await writing
        if not registered and seq:
            # Shielded: a cancelled upload still removes what it staged.
            await asyncio.shield(_discard(connection, upload_id))


async def _write(
    connection: Callable[[], contextlib.AbstractAsyncContextManager[Any]], rows: list[tuple[uuid.UUID, int, bytes]]
) -> None:
    """Insert ``rows`` of ``blob_chunks`` in one transaction (one WAL flush for the batch)."""
    async with connection() as conn, conn.transaction():
        await conn.executemany(_INSERT_CHUNK, rows)


async def _discard(connection: Callable[[], contextlib.AbstractAsyncContextManager[Any]], upload_id: uuid.UUID) -> None:
    async with connection() as conn:
        await conn.execute(_DELETE_CHUNKS, upload_id)


async def _register(
    connection: Callable[[], contextlib.AbstractAsyncContextManager[Any]], namespace: str, staged: BlobInfo
) -> BlobInfo:
    """Name ``staged`` in ``namespace``, reusing an upload of the same digest when there is one."""
    async with connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1::int, hashtext($2))", _LOCK_CLASS, staged.digest)
        mine = await conn.fetchrow(_OPEN, namespace, staged.digest)
        if mine is not None:
            await conn.execute(_DELETE_CHUNKS, staged.upload_id)
            return _info(mine)
        upload_id = await conn.fetchval(
            "SELECT upload_id FROM blobs WHERE digest = $1 AND size = $2 LIMIT 1", staged.digest, staged.size
        )
        if upload_id is None:
            upload_id = staged.upload_id
        else:
            await conn.execute(_DELETE_CHUNKS, staged.upload_id)
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


async def read(storage: Storage, info: BlobInfo, start: int = 0) -> AsyncIterator[bytes]:
    """The bytes of ``info`` from byte offset ``start``, one stored chunk at a time.

    Chunks are fetched ``BATCH_CHUNKS`` per indexed query on a pooled connection taken for that query
    only, the next batch while this one is sent: a slow reader holds no connection and at most two
    batches in memory. A blob whose chunks are missing (a bug or a manual deletion) ends with
    StorageError rather than a short stream."""
    if start < 0:
        raise ValueError("start must be >= 0")
    if info.upload_id is None:
        raise ValueError("read needs a BlobInfo from open() or put()")
    connection = _connection(storage)
    first, skip = divmod(start, CHUNK_BYTES)
    last = (info.size - 1) // CHUNK_BYTES if info.size else -1
    batches = [(low, min(low + BATCH_CHUNKS, last + 1)) for low in range(first, last + 1, BATCH_CHUNKS)]
    if not batches:
        return
    # The next batch is fetched while this one is sent: at most two batches in memory.
    fetching = asyncio.create_task(_fetch(connection, info, *batches[0]))
    try:
        for number, _ in enumerate(batches):
            chunks = await fetching
            if number + 1 < len(batches):
                fetching = asyncio.create_task(_fetch(connection, info, *batches[number + 1]))
            for data in chunks:
                piece = data[skip:] if skip else data
                skip = 0
                if piece:
                    yield piece
    finally:
        if not fetching.done():
            fetching.cancel()
            with contextlib.suppress(BaseException):
                await fetching


async def _fetch(
    connection: Callable[[], contextlib.AbstractAsyncContextManager[Any]], info: BlobInfo, low: int, high: int
) -> list[bytes]:
    """Chunks ``low`` to ``high - 1`` of ``info``, in order; StorageError when any is missing."""
    async with connection() as conn:
        rows = await conn.fetch(
            "SELECT seq, data FROM blob_chunks WHERE upload_id = $1 AND seq >= $2 AND seq < $3 ORDER BY seq",
            info.upload_id,
            low,
            high,
        )
    if [row["seq"] for row in rows] != list(range(low, high)):
        raise StorageError(f"blob {info.digest}: chunks {low}-{high - 1} of upload {info.upload_id} are incomplete")
    return [bytes(row["data"]) for row in rows]
