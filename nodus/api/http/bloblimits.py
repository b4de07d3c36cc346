"""What an upload may store, and the answers when it may not (ADR 0034).

* ``--max-blob-size`` (default 64Gi): a larger blob is a 413 ``BlobTooLarge``.
* ``--project-storage-quota`` (default 1Ti): an upload that would take the project's stored bytes (its
  blobs, each digest once) past the quota is a 403 ``StorageQuotaExceeded``, naming the quota, what the
  project stores and what would be added.

Both are checked against ``Content-Length`` before the body is read, then while it streams (reading
stops at the first byte over, and the partial object is deleted), and the quota once more when the
blob is registered (``nodus.storage.blobs``). The answer closes the connection, and a moment later the
connection is cut (:func:`stop_reading`): a TLS close waits for the client's own, reading whatever the
client still sends until then, and a client that is not listening would go on sending its whole body.

A checkpoint manifest (the agent's media type) is checked once stored: every chunk it names must be a
blob of the project, and each is marked referenced now, so that the collector cannot take a chunk the
agent skipped because the project had it (``nodus.api.blobcollection``). A manifest naming a chunk the
project does not hold is a 422.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from nodus.api.errors import APIError, bad_request
from nodus.api.registry import GROUP
from nodus.api.server import APIServer
from nodus.storage import blobcollection, blobs
from nodus.storage.blobs import BlobInfo, BlobTooLarge, QuotaExceeded
from nodus.storage.objectstore import ObjectStore

_CLOSE = {"Connection": "close"}
_UNITS = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_MISSING_SHOWN = 5
_CUT_CHECKS = 100
_CUT_EVERY = 0.01


def limits(server: APIServer) -> blobs.Limits:
    return blobs.Limits(server.settings.max_blob_size, server.settings.project_storage_quota)


def declared_size(request: Request) -> int | None:
    """The request's ``Content-Length`` (None: not declared, a chunked body)."""
    value = request.headers.get("content-length")
    if value is None:
        return None
    if not value.strip().isdigit():
        raise bad_request(f'Content-Length must be a whole number of bytes, got "{value}"')
    return int(value)


def stop_reading(request: Request) -> None:
    """Cut the request's connection once its refusal has been written, so that the rest of the body is never
    read (see the module docstring). uvicorn starts closing a ``Connection: close`` connection as soon as the
    answer is written; that is the moment to cut it. The transport is the connection's, recorded per
    connection by ``nodus.cli.serving``; without one (an in-process client) nothing happens."""
    transport = request.scope.get("state", {}).get("transport")
    if transport is None:
        return
    loop = asyncio.get_running_loop()

    def cut(checks: int) -> None:
        if transport.is_closing() or checks >= _CUT_CHECKS:
            transport.abort()
        else:
            loop.call_later(_CUT_EVERY, cut, checks + 1)

    loop.call_soon(cut, 0)


def quantity(size: int) -> str:
    """``size`` bytes as people read it: ``64Gi (68719476736 bytes)``, or ``123 bytes``."""
    for suffix, unit in _UNITS:
        if size >= unit and size % unit == 0:
            return f"{size // unit}{suffix} ({size} bytes)"
    return f"{size} bytes"


def too_large(exc: BlobTooLarge, kind: str) -> APIError:
    sent = f"declares {quantity(exc.size)}" if exc.declared else f"sent more than {quantity(exc.limit)}"
    return APIError(
        "BlobTooLarge",
        f"the upload {sent}; the largest blob this server stores is {quantity(exc.limit)}; nothing was stored",
        fix="Split the data into several blobs (a Volume revision or output per part), or ask an administrator to "
        "raise nodus apiserver --max-blob-size.",
        details={"group": GROUP, "kind": kind},
        headers=_CLOSE,
    )


def over_quota(exc: QuotaExceeded, kind: str) -> APIError:
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


async def check_manifest(server: APIServer, store: ObjectStore, namespace: str, info: BlobInfo) -> None:
    """Refuse (422) a stored checkpoint manifest naming chunks ``namespace`` does not hold; mark the others
    referenced now. A blob of that media type that is not a manifest names nothing."""
    chunks = await blobcollection.read_manifest(store, info)
    if not chunks:
        return
    present = await blobs.refresh(server.storage, namespace, chunks, server.settings.blob_grace_period / 10)
    missing = sorted(chunks - present)
    if not missing:
        return
    more = len(missing) - _MISSING_SHOWN
    shown = ", ".join(missing[:_MISSING_SHOWN]) + (f" and {more} more" if more > 0 else "")
    raise APIError(
        "Invalid",
        f"the checkpoint manifest {info.digest} names {len(missing)} chunks project {namespace} does not hold: "
        f"{shown}; a manifest is committed only once every chunk it names is stored",
        fix="Upload the missing chunks (they were never uploaded, or were deleted once nothing named them for the "
        "grace period), then the manifest again.",
        details={
            "group": GROUP,
            "kind": "blobs",
            "causes": [
                {"reason": "FieldValueNotFound", "message": f"chunk {d} is not stored", "field": "entries"}
                for d in missing[:_MISSING_SHOWN]
            ],
        },
    )
