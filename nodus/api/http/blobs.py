"""Blobs over HTTP: upload raw bytes to a project, download them by digest.

* ``POST .../namespaces/{p}/blobs[?digest=sha256:<hex>]`` streams the raw request body into a blob
  (:class:`~nodus.api.blobservice.Blobs`, never buffered whole); ``Content-Type`` is recorded as the media type
  (default ``application/octet-stream``). 201 with
  ``{"kind": "Blob", "apiVersion": "nodus.dev/v1", "digest", "size", "mediaType"}`` and a
  ``Location``. With ``digest`` the bytes must hash to it: otherwise nothing is kept and the answer
  is a 422 Status naming both digests. Uploading bytes the project has already is a no-op (201).
* ``GET``/``HEAD .../namespaces/{p}/blobs/sha256:<hex>`` streams the bytes with ``Content-Length``,
  ``Content-Type`` (the recorded media type) and ``ETag`` (the quoted digest); ``If-None-Match`` with
  that ETag answers 304. 404 Status when the project has no such blob.

* ``POST .../namespaces/{p}/volumes/{name}/revisions[?filename=F]`` (an Editor of the Volume) stores
  the body as a blob, then appends the next revision to the Volume's ``status.revisions`` in one
  read-modify-write with the resourceVersion precondition, retried when another write lands in
  between (the generic store's patch loop), so concurrent uploads get distinct, consecutive numbers.
  ``Content-Type`` ``application/x-tar`` or ``application/vnd.nodus.tar+zstd`` is a tree; anything
  else is one file, named by ``filename``. 201 with ``{"kind": "VolumeRevision", ...}``: the
  Volume's name and the revision recorded. The body is checked only against ``digest`` when given.

Both uploads are bounded (``nodus.api.blobservice``, ADR 0034): a blob larger than ``--max-blob-size`` is a 413
``BlobTooLarge`` and one that would take the project past ``--project-storage-quota`` a 403
``StorageQuotaExceeded``, refused from ``Content-Length`` before reading or the moment the body passes
the limit, with nothing stored.

Authorization reuses the project roles through the Job kind: writing a blob needs what creating a
Job needs (Editor), reading one what getting a Job needs (Viewer); the Forbidden message names
``blobs``. Blob bytes are not objects: there is no list, watch or delete; blobs nothing names are
deleted by the collector after a grace period (``nodus.api.blobcollection``).
These endpoints are not in the OpenAPI documents (they carry raw bytes, not objects); ``docs/blobs.md``
describes them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from nodus.api.auth.nodes import Attributes
from nodus.api.auth.principal import Principal
from nodus.api.blobservice import DEFAULT_MEDIA_TYPE, BlobInfo, is_digest
from nodus.api.context import RequestContext
from nodus.api.errors import APIError, bad_request, method_not_allowed
from nodus.api.http import bloblimits, streaming
from nodus.api.http.authentication import authenticate
from nodus.api.http.responses import request_id
from nodus.api.registry import API_VERSION, GROUP
from nodus.api.server import APIServer
from nodus.api.store import GenericStore
from nodus.apimachinery.units import format_time, now

API_PREFIX = f"/apis/{API_VERSION}"
MAX_MEDIA_TYPE = 255
_DIGEST_SHAPE = "sha256:<64 lower-case hex digits>"


def blob_path(namespace: str, digest: str) -> str:
    return f"{API_PREFIX}/namespaces/{namespace}/blobs/{digest}"


def blob_body(info: BlobInfo) -> dict[str, Any]:
    """The JSON answer of an upload."""
    return {
        "kind": "Blob",
        "apiVersion": API_VERSION,
        "digest": info.digest,
        "size": info.size,
        "mediaType": info.media_type,
    }


async def authorize(server: APIServer, principal: Principal, verb: str, namespace: str) -> None:
    """Blobs follow the project's Job permissions: ``create`` as creating Jobs, ``get`` as getting them."""
    jobs = server.registry.by_plural("jobs")
    assert jobs is not None
    try:
        await server.authorizer.authorize(principal, verb, jobs, namespace, None)
    except APIError as exc:
        if exc.reason != "Forbidden":
            raise
        needed = "Editor" if verb == "create" else "Viewer"
        raise APIError(
            "Forbidden",
            f'blobs.{GROUP} is forbidden: User "{principal.user}" cannot {verb} resource "blobs" in API group '
            f'"{GROUP}" in project "{namespace}"',
            fix=f'Blobs take the project\'s Job permissions: ask an Owner of project "{namespace}" to add '
            f'"{principal.user}" to spec.members with role {needed} or higher.',
            details={"group": GROUP, "kind": "blobs"},
        ) from None


async def require_project(server: APIServer, namespace: str) -> None:
    """A write into a project needs the project (administrators pass authorization without one): a 404 Status."""
    await server.stores["projects"].get(None, namespace)


def check_digest(value: str, what: str) -> str:
    if not is_digest(value):
        raise bad_request(f'{what} must be {_DIGEST_SHAPE}, got "{value}"', fix=f"Pass {what} as {_DIGEST_SHAPE}.")
    return value


def media_type(request: Request) -> str:
    value = request.headers.get("content-type", "").strip() or DEFAULT_MEDIA_TYPE
    if len(value) > MAX_MEDIA_TYPE:
        raise bad_request(f"the Content-Type is longer than {MAX_MEDIA_TYPE} characters")
    return value


async def body_chunks(request: Request) -> AsyncIterator[bytes]:
    """The raw request body as it arrives; a client gone before the end is a 400 (nothing is stored), not a
    server error: an agent killed mid-upload (a host lost while it checkpoints) is an expected event."""
    try:
        async for chunk in request.stream():
            if chunk:
                yield chunk
    except ClientDisconnect:
        raise bad_request(
            "the client disconnected before the body was complete; nothing was stored",
            fix="Upload the blob again.",
        ) from None


async def store(
    server: APIServer, request: Request, namespace: str, kind: str, media: str, expected: str | None
) -> BlobInfo:
    """Stream the request body into a blob of ``namespace``; a 422 Status on a digest mismatch, a 413 or 403
    past the limits, a 422 for a checkpoint manifest naming chunks the project lacks."""
    try:
        return await server.blobs.put(
            namespace, body_chunks(request), media, expected, bloblimits.declared_size(request), kind
        )
    except APIError as exc:
        if exc.headers.get("Connection") == "close":  # refused for its size: the rest of the body is never read
            bloblimits.stop_reading(request)
        raise


class BlobResponse(Response):
    """A blob's bytes, streamed chunk by chunk until the end or until the client leaves."""

    def __init__(self, server: APIServer, info: BlobInfo, headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=200, media_type=info.media_type)
        self._server = server
        self._info = info
        self._extra = headers or {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in blob_headers(self._info, self._extra)]
        await streaming.stream(receive, send, headers, lambda: self._pump(send), f"blob {self._info.digest}")

    async def _pump(self, send: Any) -> None:
        async for data in self._server.blobs.read(self._info):
            await send({"type": "http.response.body", "body": data, "more_body": True})


def blob_headers(info: BlobInfo, extra: dict[str, str]) -> list[tuple[str, str]]:
    return [
        ("content-type", info.media_type),
        ("content-length", str(info.size)),
        ("etag", f'"{info.digest}"'),
        ("cache-control", "private, immutable"),
        ("x-content-type-options", "nosniff"),
        *extra.items(),
    ]


def serve(server: APIServer, request: Request, info: BlobInfo, headers: dict[str, str] | None = None) -> Response:
    """The response for a GET or HEAD of ``info``: 304 on a matching If-None-Match, headers only on HEAD."""
    extra = headers or {}
    etag = f'"{info.digest}"'
    if etag in [tag.strip() for tag in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers={"etag": etag})
    if request.method == "HEAD":
        return Response(status_code=200, headers=dict(blob_headers(info, extra)))
    return BlobResponse(server, info, extra)


def not_found(namespace: str, digest: str) -> APIError:
    return APIError(
        "NotFound",
        f'blobs.{GROUP} "{digest}" not found in project "{namespace}"',
        fix=f"Upload it first (POST {API_PREFIX}/namespaces/{namespace}/blobs); a project sees only the blobs "
        "uploaded to it.",
        details={"name": digest, "group": GROUP, "kind": "blobs"},
    )


async def upload(request: Request) -> Response:
    """``POST /apis/nodus.dev/v1/namespaces/{namespace}/blobs[?digest=sha256:<hex>]``."""
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    namespace = request.path_params["namespace"]
    if request.method != "POST":
        raise method_not_allowed(request.method.lower(), "blobs")
    request.scope["state"]["metrics"] = ("create", "blobs")
    if not await server.authorizer.system(Attributes(principal, "create", "blobs", namespace)):
        await authorize(server, principal, "create", namespace)
    expected = request.query_params.get("digest")
    if expected is not None:
        check_digest(expected, "digest")
    media = media_type(request)
    await require_project(server, namespace)
    info = await store(server, request, namespace, "blobs", media, expected)
    body = orjson.dumps(blob_body(info))
    location = blob_path(namespace, info.digest)
    return Response(body, status_code=201, media_type="application/json", headers={"Location": location})


async def download(request: Request) -> Response:
    """``GET``/``HEAD /apis/nodus.dev/v1/namespaces/{namespace}/blobs/{digest}``."""
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    namespace, digest = request.path_params["namespace"], request.path_params["digest"]
    if request.method not in ("GET", "HEAD"):
        raise method_not_allowed(request.method.lower(), "blobs")
    request.scope["state"]["metrics"] = ("get", "blobs")
    check_digest(digest, "the blob name")
    params = {"digest": digest, "method": request.method}
    if not await server.authorizer.system(Attributes(principal, "get", "blobs", namespace, params=params)):
        await authorize(server, principal, "get", namespace)
    info = await server.blobs.open(namespace, digest)
    if info is None:
        raise not_found(namespace, digest)
    return serve(server, request, info)


# --- volume revisions ------------------------------------------------------------------------------

MAX_FILENAME = 255
TAR = "application/x-tar"
TAR_ZSTD = "application/vnd.nodus.tar+zstd"
FIELD_MANAGER = "nodus-volume-revisions"


def _filename(request: Request, media: str) -> str | None:
    value = request.query_params.get("filename")
    if value is None:
        return None
    if not value or len(value) > MAX_FILENAME or "/" in value or "\x00" in value or value in (".", ".."):
        raise bad_request(
            f'filename must be a file name of at most {MAX_FILENAME} characters without "/", got "{value}"',
            fix="Pass the base name of the file (for example filename=weights.bin).",
        )
    if media in (TAR, TAR_ZSTD):
        raise bad_request(
            f"filename names a single file, but the body is an archive ({media})",
            fix="Leave filename out for an archive, or send the file with its own Content-Type.",
        )
    return value


async def revision_request(request: Request, plural: str) -> tuple[APIServer, Principal, str, str, GenericStore]:
    """The start of ``POST .../namespaces/{namespace}/{plural}/{name}/revisions`` (Volumes, Workspaces): the caller
    authenticated and allowed to update the object, which exists (a 404 before the body is read). Returns the
    server, the caller, the namespace, the name and the kind's store."""
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    info = server.registry.by_plural(plural)
    assert info is not None
    if request.method != "POST":
        raise method_not_allowed(request.method.lower(), f"{plural}/revisions")
    request.scope["state"]["metrics"] = ("create", f"{plural}/revisions")
    if not await server.authorizer.system(Attributes(principal, "create", plural, namespace, name, "revisions")):
        await server.authorizer.authorize(principal, "update", info, namespace, name)
    store_ = server.stores[info.plural]
    await store_.get(namespace, name)
    return server, principal, namespace, name, store_


async def volume_revision(request: Request) -> Response:
    """``POST /apis/nodus.dev/v1/namespaces/{namespace}/volumes/{name}/revisions[?filename=&digest=]``."""
    server, principal, namespace, name, store_ = await revision_request(request, "volumes")
    expected = request.query_params.get("digest")
    if expected is not None:
        check_digest(expected, "digest")
    media = media_type(request)
    filename = _filename(request, media)
    info = await store(server, request, namespace, "volumes", media, expected)
    recorded: dict[str, Any] = {}

    def append(volume: dict[str, Any]) -> dict[str, Any]:
        status = dict(volume.get("status") or {})
        revisions = list(status.get("revisions") or [])
        revision: dict[str, Any] = {
            "revision": len(revisions) + 1,
            "sha256": info.hex,
            "size": info.size,
            "mediaType": media,
            "createdTime": format_time(now()),
            "source": "upload",
        }
        if filename is not None:
            revision["filename"] = filename
        recorded.clear()
        recorded.update(revision)
        status["revisions"] = [*revisions, revision]
        status["latestRevision"] = revision["revision"]
        volume["status"] = status
        return volume

    ctx = RequestContext(principal=principal, request_id=request_id(request), field_manager=FIELD_MANAGER)
    await store_.patch(namespace, name, append, ctx, subresource="status")
    body = {
        "kind": "VolumeRevision",
        "apiVersion": API_VERSION,
        "metadata": {"name": name, "namespace": namespace},
        "revision": recorded,
    }
    return Response(orjson.dumps(body), status_code=201, media_type="application/json")
