"""Workspace revisions over HTTP: record a pushed tree or a Job's output as a revision, and read one back.

* ``POST .../namespaces/{p}/workspaces/{name}/revisions`` (an Editor of the Workspace) records the next
  revision. Two bodies:

  - ``Content-Type: application/vnd.nodus.checkpoint.manifest+json``: a workspace manifest (the checkpoint
    manifest format with the single root ``/workspace``), stored as a blob of the project. Every chunk it
    names must already be a blob of the project (uploaded first through ``.../blobs``, only those the
    project lacked): otherwise a 422 names the missing ones (``nodus.api.blobservice``). The revision's
    size and file count are read from the manifest.
  - ``Content-Type: application/json`` with ``{"output": "JOB/OUTPUT"}``: the Job's committed output
    (index 0) becomes the revision by digest, with no bytes copied; a 404 names the Job's committed
    outputs when there is no such output.

  The revision is appended, numbered ``latestRevision + 1``, in one read-modify-write of ``/status`` with
  the resourceVersion precondition (retried on a conflict, as Volume revisions are), keeping the
  :data:`~nodus.apis.v1.workspace.RECENT_REVISIONS` newest. 201 with ``{"kind": "WorkspaceRevision", ...}``.
* ``GET``/``HEAD .../namespaces/{p}/workspaces/{name}/revisions/{n}`` (a Viewer) streams revision ``n``'s
  blob (``nodus workspaces pull``) with its media type and ``X-Nodus-Revision``; 404 when the Workspace
  does not list it.

The server checks a manifest's shape (its root, its entries' paths: normalised, below ``/workspace``);
clients that write files from one (``nodus workspaces pull``, the agent) check it in full again before
writing anything, as they do a checkpoint's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from nodus.api.auth.nodes import Attributes
from nodus.api.blobservice import DIGEST_PREFIX, BlobInfo
from nodus.api.context import RequestContext
from nodus.api.errors import APIError, bad_request, method_not_allowed
from nodus.api.http import blobs as blob_http
from nodus.api.http import outputs as output_http
from nodus.api.http.authentication import authenticate
from nodus.api.http.responses import request_id
from nodus.api.registry import API_VERSION, GROUP
from nodus.api.server import APIServer
from nodus.apimachinery.units import format_time, now
from nodus.apis.v1.workspace import MANIFEST, RECENT_REVISIONS, ROOT

FIELD_MANAGER = "nodus-workspace-revisions"
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
MAX_OUTPUT_REFERENCE = 512


def _invalid(message: str, field: str, fix: str) -> APIError:
    return APIError(
        "Invalid",
        message,
        fix=fix,
        details={
            "group": GROUP,
            "kind": "workspaces",
            "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}],
        },
    )


async def _read_all(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    data = bytearray()
    async for piece in chunks:
        data += piece
        if len(data) > limit:
            break
    return bytes(data)


def _summary(body: bytes) -> tuple[int, int]:
    """(bytes of files, regular files) of a workspace manifest; a 422 when it is not one."""
    fix = f"Push a tree with nodus workspaces push NAME DIR: its manifest has the single path {ROOT}."
    try:
        manifest = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _invalid(f"the manifest is not JSON: {exc}", "body", fix) from None
    if not isinstance(manifest, dict) or manifest.get("kind") != "CheckpointManifest":
        raise _invalid("the body is not a manifest (kind CheckpointManifest)", "kind", fix)
    if manifest.get("paths") != [ROOT]:
        raise _invalid(f"paths must be [{ROOT!r}], got {manifest.get('paths')!r}", "paths", fix)
    entries = manifest.get("entries")
    if not isinstance(entries, list):
        raise _invalid("entries must be a list", "entries", fix)
    size = files = 0
    for n, entry in enumerate(entries):
        path = entry.get("path") if isinstance(entry, dict) else None
        parts = path.split("/")[2:] if isinstance(path, str) else []
        if (
            not isinstance(path, str)
            or not (path == ROOT or path.startswith(ROOT + "/"))
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise _invalid(
                f"entries[{n}].path must be {ROOT} or a normalised path below it, got {path!r}",
                f"entries[{n}].path",
                fix,
            )
        if entry.get("type") == "file":
            value = entry.get("size")
            if not isinstance(value, int) or value < 0:
                raise _invalid(f"entries[{n}].size must be a byte count", f"entries[{n}].size", fix)
            size += value
            files += 1
    return size, files


async def _from_output(server: APIServer, request: Request, namespace: str) -> tuple[BlobInfo, dict[str, Any]]:
    """The committed output the JSON body names, and the revision fields it gives."""
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        body = None
    reference = body.get("output") if isinstance(body, dict) else None
    job, _, output = reference.partition("/") if isinstance(reference, str) else ("", "", "")
    if not job or not output or len(reference or "") > MAX_OUTPUT_REFERENCE:
        raise bad_request(
            f'the body must be {{"output": "JOB/OUTPUT"}}, got {body!r}',
            fix="Name a Job of the project and one of its outputs (nodus workspaces push NAME --from-output JOB/OUT).",
        )
    stored = await server.stores["jobs"].get(namespace, job)
    committed = [e for e in (stored.get("status") or {}).get("outputs") or [] if isinstance(e, dict)]
    entry = output_http.find(committed, output, 0, None)
    info = await server.blobs.open(namespace, DIGEST_PREFIX + str(entry["sha256"])) if entry else None
    if entry is None or info is None:
        names = sorted({str(e.get("name")) for e in committed if e.get("sha256")})
        raise APIError(
            "NotFound",
            f'job "{job}" has no committed output "{output}"'
            + (f"; its committed outputs are {', '.join(names)}" if names else "; it has no committed outputs yet"),
            fix="Wait until the Job succeeded (an output is committed when its index finishes), or name another.",
            details={"name": reference, "group": GROUP, "kind": "jobs"},
        )
    return info, {"size": info.size, "source": "Output", "output": f"{job}/{output}"}


async def revisions(request: Request) -> Response:
    """``POST /apis/nodus.dev/v1/namespaces/{namespace}/workspaces/{name}/revisions``."""
    server, principal, namespace, name, store_ = await blob_http.revision_request(request, "workspaces")
    media = blob_http.media_type(request).split(";")[0].strip()
    if media == MANIFEST:
        info = await blob_http.store(server, request, namespace, "workspaces", media, None)
        size, files = _summary(await _read_all(server.blobs.read(info), MAX_MANIFEST_BYTES))
        fields: dict[str, Any] = {"size": size, "files": files, "source": "Push"}
    elif media == "application/json":
        info, fields = await _from_output(server, request, namespace)
    else:
        raise APIError(
            "UnsupportedMediaType",
            f"a workspace revision is a manifest ({MANIFEST}) or a JSON reference to a Job output, not {media}",
            fix="Use nodus workspaces push, which uploads the files and then their manifest.",
        )
    recorded: dict[str, Any] = {}

    def append(workspace: dict[str, Any]) -> dict[str, Any]:
        status = dict(workspace.get("status") or {})
        kept = list(status.get("revisions") or [])
        revision: dict[str, Any] = {
            "revision": int(status.get("latestRevision") or 0) + 1,
            "digest": info.digest,
            "mediaType": info.media_type,
            "createdTime": format_time(now()),
            **fields,
        }
        recorded.clear()
        recorded.update(revision)
        status["revisions"] = [*kept, revision][-RECENT_REVISIONS:]
        status["latestRevision"] = revision["revision"]
        status["size"] = revision["size"]
        status["lastChangeTime"] = revision["createdTime"]
        if revision.get("files") is None:
            status.pop("files", None)
        else:
            status["files"] = revision["files"]
        workspace["status"] = status
        return workspace

    ctx = RequestContext(principal=principal, request_id=request_id(request), field_manager=FIELD_MANAGER)
    await store_.patch(namespace, name, append, ctx, subresource="status")
    body = {
        "kind": "WorkspaceRevision",
        "apiVersion": API_VERSION,
        "metadata": {"name": name, "namespace": namespace},
        "revision": recorded,
    }
    return Response(orjson.dumps(body), status_code=201, media_type="application/json")


async def revision(request: Request) -> Response:
    """``GET``/``HEAD /apis/nodus.dev/v1/namespaces/{namespace}/workspaces/{name}/revisions/{number}``."""
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    workspaces = server.registry.by_plural("workspaces")
    assert workspaces is not None
    if request.method not in ("GET", "HEAD"):
        raise method_not_allowed(request.method.lower(), "workspaces/revisions")
    request.scope["state"]["metrics"] = ("get", "workspaces/revisions")
    if not await server.authorizer.system(Attributes(principal, "get", "workspaces", namespace, name, "revisions")):
        await server.authorizer.authorize(principal, "get", workspaces, namespace, name)
    workspace = await server.stores[workspaces.plural].get(namespace, name)
    number = request.path_params["number"]
    listed = [r for r in (workspace.get("status") or {}).get("revisions") or [] if isinstance(r, dict)]
    found = next((r for r in listed if str(r.get("revision")) == number), None)
    info = await server.blobs.open(namespace, str(found["digest"])) if found else None
    if found is None or info is None:
        kept = f"revisions {listed[0]['revision']} to {listed[-1]['revision']}" if listed else "no revisions yet"
        raise APIError(
            "NotFound",
            f'workspace "{name}" has no revision "{number}"; it keeps {kept}',
            fix=f"kubectl get workspace {name} -n {namespace} -o yaml lists the revisions it keeps.",
            details={"name": name, "group": GROUP, "kind": "workspaces"},
        )
    return blob_http.serve(server, request, info, {"X-Nodus-Revision": str(found["revision"])})
