"""Blob bytes as the API keeps them: stored, opened and read per project, within the server's limits (ADR 0034).

A blob is content-addressed (``sha256:<hex>``) within its project; its row lives in the database and its bytes
in the object store (``--blob-store``; without one every blob endpoint answers 503). :meth:`Blobs.put` streams
an upload into the store and registers it, refusing what the limits forbid:

* ``--max-blob-size`` (default 64Gi): a larger blob is a 413 ``BlobTooLarge``.
* ``--project-storage-quota`` (default 1Ti): an upload that would take the project's stored bytes (its
  blobs, each digest once) past the quota is a 403 ``StorageQuotaExceeded``, naming the quota, what the
  project stores and what would be added.

Both are checked against the declared size before the body is read, then while it streams (reading stops at
the first byte over, and the partial object is deleted), and the quota once more when the blob is registered
(``nodus.storage.blobs``). Those two refusals carry ``Connection: close``: the HTTP layer cuts the connection
once they are written, so that the rest of the body is never read.

A checkpoint manifest (the agent's media type) is checked once stored: every chunk it names must be a blob of
the project, and each is marked referenced now, so that the collector cannot take a chunk the agent skipped
because the project had it (``nodus.api.blobcollection``). A manifest naming a chunk the project does not hold
is a 422.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from nodus.api.errors import APIError
from nodus.api.registry import GROUP
from nodus.api.settings import ServerSettings
from nodus.storage import blobcollection, blobs
from nodus.storage.blobcollection import CHECKPOINT_MANIFEST_MEDIA_TYPE
from nodus.storage.blobs import DEFAULT_MEDIA_TYPE, DIGEST_PREFIX, BlobInfo, BlobTooLarge, DigestMismatch, QuotaExceeded
from nodus.storage.objects import Storage
from nodus.storage.objectstore import ObjectStore

# What the HTTP layer names of a blob: its description, the digests' shape and the media types that mean more.
__all__ = [
    "CHECKPOINT_MANIFEST_MEDIA_TYPE",
    "DEFAULT_MEDIA_TYPE",
    "DIGEST_PREFIX",
    "BlobInfo",
    "Blobs",
    "is_digest",
    "quantity",
]

_CLOSE = {"Connection": "close"}
_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_MISSING_SHOWN = 5


def is_digest(value: str) -> bool:
    """Whether ``value`` is ``sha256:`` and 64 lower-case hex digits."""
    return blobs.is_digest(value)


class Blobs:
    """The blobs of every project on one API server."""

    def __init__(self, storage: Storage, store: ObjectStore | None, settings: ServerSettings) -> None:
        self._storage = storage
        self._store = store
        self._limits = blobs.Limits(settings.max_blob_size, settings.project_storage_quota)
        # A chunk a manifest names is marked referenced at most this often (as the collector refreshes rows).
        self._fresh_for = settings.blob_grace_period / 10

    def objects(self) -> ObjectStore:
        """The object store for blob bytes; a 503 Status when the server was started without one."""
        if self._store is None:
            raise APIError(
                "ServiceUnavailable",
                "this API server was started without a blob store, so it cannot store or serve blobs, outputs or "
                "Volume revisions",
                fix="An administrator: start nodus apiserver with --blob-store file:///a/directory or "
                "--blob-store s3://bucket/prefix (nodus dev uses <data dir>/blobs).",
            )
        return self._store

    async def put(
        self,
        namespace: str,
        chunks: AsyncIterator[bytes],
        media_type: str,
        expected: str | None,
        declared_size: int | None,
        kind: str,
    ) -> BlobInfo:
        """Stream ``chunks`` into a blob of ``namespace`` (see the module docstring); ``kind`` (``blobs``,
        ``volumes``) is the resource the Statuses name. A 422 Status when the bytes do not hash to ``expected``
        or a checkpoint manifest names chunks the project lacks, a 413 or 403 past the limits."""
        objects = self.objects()
        try:
            info = await blobs.put(
                self._storage, objects, namespace, chunks, media_type, expected, self._limits, declared_size
            )
        except BlobTooLarge as exc:
            raise _too_large(exc, kind) from None
        except QuotaExceeded as exc:
            raise _over_quota(exc, kind) from None
        except DigestMismatch as exc:
            raise _mismatch(exc, kind) from None
        if media_type == CHECKPOINT_MANIFEST_MEDIA_TYPE:
            await self._check_manifest(objects, namespace, info)
        return info

    async def open(self, namespace: str, digest: str) -> BlobInfo | None:
        """Blob ``digest`` of ``namespace`` (None: the project holds no such blob)."""
        return await blobs.open(self._storage, namespace, digest)

    def read(self, info: BlobInfo) -> AsyncIterator[bytes]:
        """The bytes of ``info``, chunk by chunk, from the object store."""
        return blobs.read(self.objects(), info)

    async def _check_manifest(self, objects: ObjectStore, namespace: str, info: BlobInfo) -> None:
        """Refuse (422) a stored checkpoint manifest naming chunks ``namespace`` does not hold; mark the others
        referenced now. A blob of that media type that is not a manifest names nothing."""
        chunks = await blobcollection.read_manifest(objects, info)
        if not chunks:
            return
        present = await blobs.refresh(self._storage, namespace, chunks, self._fresh_for)
        missing = sorted(chunks - present)
        if not missing:
            return
        more = len(missing) - _MISSING_SHOWN
        shown = ", ".join(missing[:_MISSING_SHOWN]) + (f" and {more} more" if more > 0 else "")
        raise APIError(
            "Invalid",
            f"the checkpoint manifest {info.digest} names {len(missing)} chunks project {namespace} does not hold: "
            f"{shown}; a manifest is committed only once every chunk it names is stored",
            fix="Upload the missing chunks (they were never uploaded, or were deleted once nothing named them for "
            "the grace period), then the manifest again.",
            details={
                "group": GROUP,
                "kind": "blobs",
                "causes": [
                    {"reason": "FieldValueNotFound", "message": f"chunk {d} is not stored", "field": "entries"}
                    for d in missing[:_MISSING_SHOWN]
                ],
            },
        )


def quantity(size: int) -> str:
    """``size`` bytes as people read it: ``64Gi (68719476736 bytes)``, or ``123 bytes``."""
    for suffix, unit in _UNITS:
        if size >= unit and size % unit == 0:
            return f"{size // unit}{suffix} ({size} bytes)"
    return f"{size} bytes"


def _too_large(exc: BlobTooLarge, kind: str) -> APIError:
    sent = f"declares {quantity(exc.size)}" if exc.declared else f"sent more than {quantity(exc.limit)}"
    return APIError(
        "BlobTooLarge",
        f"the upload {sent}; the largest blob this server stores is {quantity(exc.limit)}; nothing was stored",
        fix="Split the data into several blobs (a Volume revision or output per part), or ask an administrator to "
        "raise nodus apiserver --max-blob-size.",
        details={"group": GROUP, "kind": kind},
        headers=_CLOSE,
    )


def _over_quota(exc: QuotaExceeded, kind: str) -> APIError:
    adding = quantity(exc.size) if exc.complete else f"more than {quantity(exc.quota - exc.used)}"
    return APIError(
        "StorageQuotaExceeded",
        f"project {exc.namespace} stores {quantity(exc.used)} of its storage quota of {quantity(exc.quota)}; "
        f"this upload ({adding}) would pass it; nothing was stored",
        fix=f"Free space in project {exc.namespace}: delete the Jobs and Volumes whose outputs, checkpoints and "
        "revisions it no longer needs (blobs nothing names are deleted after the grace period, "
        "nodus apiserver --blob-grace-period), or ask an administrator to raise --project-storage-quota.",
        details={"name": exc.namespace, "group": GROUP, "kind": kind},
        headers=_CLOSE,
    )


def _mismatch(exc: DigestMismatch, kind: str) -> APIError:
    return APIError(
        "Invalid",
        f"the uploaded body ({exc.size} bytes) has digest {exc.actual}, not the expected {exc.expected}; "
        "nothing was stored",
        fix="Upload the bytes again (they changed or were cut in transit), or pass the digest of what you "
        f"send: sha256sum FILE gives the hex to put after {DIGEST_PREFIX}.",
        details={
            "group": GROUP,
            "kind": kind,
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": f"expected {exc.expected}, the body has {exc.actual}",
                    "field": "digest",
                }
            ],
        },
    )
