"""Blobs: content-addressed bytes, ``sha256:<64 hex>``, kept per project.

A blob is named by its digest *within a project* (``namespace``): a project sees only the blobs
uploaded to it, even when another project holds the same bytes. Uploads (job outputs, volume
revisions, checkpoint chunks, anything posted to ``.../blobs``) stream through :func:`put`; downloads
stream through :func:`read`. Neither ever holds a whole blob in memory.

Two places (DESIGN: "Bytes ... an object-store interface"):

* the bytes, in an :class:`~nodus.storage.objectstore.ObjectStore` (the filesystem by default, S3 in
  production) under ``uploads/<upload id>``;
* what names them, in PostgreSQL (migrations 0003, 0009): ``blobs(namespace, digest, size, media_type,
  upload_id, created_at, referenced_at, attributed_until)``, a project's name for an upload. Rows of
  several projects may point at one upload: that is the deduplication.

Writing: :func:`put` streams the body into a fresh object (it appears whole or not at all), hashing
as it goes; at the end it checks the expected digest (a mismatch deletes the object and raises
:class:`DigestMismatch`) and registers the blob in one transaction, serialised per digest by an
advisory lock: if the project has the digest already (its row is then refreshed: ``referenced_at``),
or another project does, the new object is deleted and the existing upload is used. A failed or
cancelled upload deletes what it wrote.

Limits (:class:`Limits`, ADR 0034): a blob larger than ``max_size`` raises :class:`BlobTooLarge`, one
that would take the project's stored bytes (the sum of its rows' sizes) past ``quota`` raises
:class:`QuotaExceeded`. Both are checked against a declared size before anything is read, then while
the body streams (reading stops at the first byte over, and the partial object is deleted), and the
quota once more at registration. A project's stored bytes are kept in ``blob_usage`` (migration 0009),
moved in the transaction that inserts or deletes a row; registration locks the project's usage row
before the digest's lock, so two uploads racing for the last bytes of a quota are serialised there and
registered bytes never pass the quota; while uploads stream, the object store may hold at most their
in-flight bytes beyond it.

Deleting: blobs are deleted only by the collector (``nodus.storage.blobcollection``), which drops a
project's row (and its bytes from ``blob_usage``) and then the object when no other row points at that
upload, under the same locks in the same order. :func:`refresh` marks rows as referenced now (the
collector's stamp, and the check of an uploaded checkpoint manifest's chunks): a row refreshed is never
collected within the grace period, and a row collected is never reported present.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
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


class BlobTooLarge(StorageError):
    """The blob is larger than ``limit`` bytes: ``size`` were declared, or received when reading stopped."""

    def __init__(self, limit: int, size: int, *, declared: bool) -> None:
        said = "declares" if declared else "sent at least"
        super().__init__(f"the upload {said} {size} bytes; the largest blob is {limit} bytes")
        self.limit, self.size, self.declared = limit, size, declared


class QuotaExceeded(StorageError):
    """Storing ``size`` more bytes would take ``namespace`` past its ``quota``: it stores ``used`` now.
    ``complete`` is False when ``size`` is only what arrived before reading stopped."""

    def __init__(self, namespace: str, quota: int, used: int, size: int, *, complete: bool) -> None:
        amount = f"{size}" if complete else f"at least {size}"
        super().__init__(f"project {namespace} stores {used} of its {quota} bytes; {amount} more would pass it")
        self.namespace, self.quota, self.used, self.size, self.complete = namespace, quota, used, size, complete


@dataclass(frozen=True)
class Limits:
    """What one upload may store: a blob of at most ``max_size`` bytes, and only while the project's
    stored bytes stay within ``quota`` (None: no limit)."""

    max_size: int | None = None
    quota: int | None = None


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
    limits: Limits = Limits(),
    declared_size: int | None = None,
) -> BlobInfo:
    """Store the bytes of ``chunks`` as a blob of ``namespace``; returns the blob as registered.

    Pieces of any size are accepted and streamed to ``store`` as they arrive. When
    ``expected_digest`` is given and the bytes hash otherwise, nothing is kept and
    :class:`DigestMismatch` is raised. When the project already has the digest, the existing blob is
    returned (with the media type it was first stored with). ``limits`` are checked against
    ``declared_size`` (a Content-Length) before ``chunks`` is touched, then while it is read, and the
    quota again at registration (:class:`BlobTooLarge`, :class:`QuotaExceeded`); bytes the project
    holds already under ``expected_digest`` take no quota. Whatever fails (a limit, the database, the
    store, the source of ``chunks``, cancellation), reading stops and the new object is removed before
    the exception propagates."""
    connection = _connection(storage)
    if limits.max_size is not None and declared_size is not None and declared_size > limits.max_size:
        raise BlobTooLarge(limits.max_size, declared_size, declared=True)
    quota = limits.quota
    if quota is not None and expected_digest is not None and await open(storage, namespace, expected_digest):
        quota = None  # a second upload of what the project has stores nothing new
    used = await usage(storage, namespace) if quota is not None else 0
    if quota is not None and declared_size is not None and used + declared_size > quota:
        raise QuotaExceeded(namespace, quota, used, declared_size, complete=True)
    upload_id = uuid.uuid4()
    key = object_key(upload_id)
    hasher = hashlib.sha256()

    async def hashed() -> AsyncIterator[bytes]:
        received = 0
        async for piece in chunks:
            if piece:
                received += len(piece)
                if limits.max_size is not None and received > limits.max_size:
                    raise BlobTooLarge(limits.max_size, received, declared=False)
                if quota is not None and used + received > quota:
                    raise QuotaExceeded(namespace, quota, used, received, complete=False)
                hasher.update(piece)
                yield piece

    registered = False
    try:
        size = await store.put(key, hashed())
        digest = DIGEST_PREFIX + hasher.hexdigest()
        if expected_digest is not None and expected_digest != digest:
            raise DigestMismatch(expected_digest, digest, size)
        staged = BlobInfo(digest, size, media_type, upload_id)
        info = await _register(connection, store, namespace, staged, limits.quota)
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
    quota: int | None,
) -> BlobInfo:
    """Name ``staged`` in ``namespace``, reusing an upload of the same digest when there is one; with a
    ``quota``, refuse (:class:`QuotaExceeded`) a new row that would take the project past it. The staged
    object is deleted after the commit when an existing upload is used."""
    assert staged.upload_id is not None
    discard: str | None = object_key(staged.upload_id)
    async with connection() as conn, conn.transaction():
        # The project's usage row first (every registration and collection of the project takes it before
        # a digest's lock): the quota check and the move of the usage below are one step per project.
        used = int(await conn.fetchval(_LOCK_USAGE, namespace))
        await conn.execute("SELECT pg_advisory_xact_lock($1::int, hashtext($2))", _LOCK_CLASS, staged.digest)
        mine = await conn.fetchrow(_OPEN, namespace, staged.digest)
        if mine is not None:
            # Uploaded again: a use of the blob, which the collector must not take from under it (ADR 0034).
            await conn.execute(_REFRESH_ONE, namespace, staged.digest)
            info = _info(mine)
        else:
            if quota is not None and used + staged.size > quota:
                raise QuotaExceeded(namespace, quota, used, staged.size, complete=True)
            upload_id = await conn.fetchval(
                "SELECT upload_id FROM blobs WHERE digest = $1 AND size = $2 LIMIT 1", staged.digest, staged.size
            )
            if upload_id is None:
                upload_id, discard = staged.upload_id, None
            await conn.execute(
                "INSERT INTO blobs (namespace, digest, size, media_type, upload_id) VALUES ($1, $2, $3, $4, $5)",
                namespace,
                staged.digest,
                staged.size,
                staged.media_type,
                upload_id,
            )
            await conn.execute("UPDATE blob_usage SET bytes = bytes + $2 WHERE namespace = $1", namespace, staged.size)
            info = BlobInfo(staged.digest, staged.size, staged.media_type, upload_id)
    if discard is not None:
        await store.delete(discard)  # a copy of bytes stored already: no row names it
    return info


# The project's usage row, created at 0 if missing, locked, and its bytes.
_LOCK_USAGE = (
    "INSERT INTO blob_usage (namespace, bytes) VALUES ($1, 0) "
    "ON CONFLICT (namespace) DO UPDATE SET bytes = blob_usage.bytes RETURNING bytes"
)
_USAGE = "SELECT coalesce((SELECT bytes FROM blob_usage WHERE namespace = $1), 0)"
_REFRESH_ONE = "UPDATE blobs SET referenced_at = now() WHERE namespace = $1 AND digest = $2"
# Rows of the given digests locked in digest order (two refreshes never wait on each other in a cycle),
# then marked referenced now; the digests of the rows refreshed.
_REFRESH = """
    WITH locked AS (
        SELECT digest FROM blobs WHERE namespace = $1 AND digest = ANY($2::text[]) ORDER BY digest FOR UPDATE
    )
    UPDATE blobs b SET referenced_at = now() FROM locked WHERE b.namespace = $1 AND b.digest = locked.digest
    RETURNING b.digest
"""


async def usage(storage: Storage, namespace: str) -> int:
    """The bytes ``namespace`` stores: the sizes of its blobs, each digest once (what its quota counts), as
    ``blob_usage`` keeps them."""
    async with _connection(storage)() as conn:
        return int(await conn.fetchval(_USAGE, namespace))


async def refresh(storage: Storage, namespace: str, digests: Iterable[str], fresh_for: timedelta) -> set[str]:
    """Mark the blobs ``digests`` of ``namespace`` as referenced now; returns those the project holds.

    A row refreshed at most ``fresh_for`` ago is left as it is (the collector takes only rows older than
    its grace period, which is longer). Either this wins and the row is kept for another grace period, or
    the collector deleted it first and the digest is not returned: a digest returned is stored."""
    wanted = sorted(set(digests))
    if not wanted:
        return set()
    async with _connection(storage)() as conn, conn.transaction():
        rows = await conn.fetch(
            "SELECT digest, referenced_at > now() - $3::interval AS fresh FROM blobs "
            "WHERE namespace = $1 AND digest = ANY($2::text[])",
            namespace,
            wanted,
            fresh_for,
        )
        # A fresh row cannot be collected now; a stale one may be at this moment, so it is locked and
        # refreshed, and counted only if it was still there.
        present = {r["digest"] for r in rows if r["fresh"]}
        stale = sorted(r["digest"] for r in rows if not r["fresh"])
        if stale:
            present.update(r["digest"] for r in await conn.fetch(_REFRESH, namespace, stale))
    return present


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


async def usage_disagreements(storage: Storage) -> list[tuple[str, int, int]]:
    """Projects whose ``blob_usage`` is not the sum of their blobs' sizes: (project, kept, sum)."""
    async with _connection(storage)() as conn:
        rows = await conn.fetch(
            "SELECT coalesce(u.namespace, b.namespace) AS namespace, coalesce(u.bytes, 0) AS kept, "
            "coalesce(b.total, 0) AS total FROM blob_usage u FULL JOIN "
            "(SELECT namespace, sum(size) AS total FROM blobs GROUP BY namespace) b ON b.namespace = u.namespace "
            "WHERE coalesce(u.bytes, 0) <> coalesce(b.total, 0)"
        )
    return [(r["namespace"], int(r["kept"]), int(r["total"])) for r in rows]
