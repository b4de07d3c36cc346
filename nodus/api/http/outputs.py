"""Job outputs over HTTP: download a committed output of a Job as a file.

``GET``/``HEAD .../namespaces/{p}/jobs/{name}/outputs/{output}?index=N[&rank=R]`` (a Viewer of the
project) reads the Job, finds the entry of ``status.outputs`` with that ``name`` and ``index``
(default 0) and, when given, ``rank`` (without one: the entry without a rank, else the lowest rank),
and streams the project's blob ``sha256:<entry.sha256>`` as :mod:`nodus.api.http.blobs` does, with
``Content-Disposition: attachment``. The file name is ``<output>.tar.zst`` when the blob is a
directory archive (media type ``application/vnd.nodus.tar+zstd``), else the base name of the entry's
``path`` (the output's name when it has none). A 404 Status names the Job's committed outputs.
"""

from __future__ import annotations

import posixpath
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from nodus.api.blobservice import DIGEST_PREFIX
from nodus.api.errors import APIError, method_not_allowed
from nodus.api.http import blobs as blob_http
from nodus.api.http.authentication import authenticate
from nodus.api.http.logs import int_param
from nodus.api.registry import GROUP
from nodus.api.server import APIServer

TAR_ZSTD = "application/vnd.nodus.tar+zstd"


def _describe(entry: dict[str, Any]) -> str:
    where = f"index {entry.get('index') or 0}"
    if entry.get("rank") is not None:
        where += f", rank {entry['rank']}"
    return f"{entry.get('name')} ({where})"


def find(outputs: list[dict[str, Any]], output: str, index: int, rank: int | None) -> dict[str, Any] | None:
    """The committed entry for ``output`` of ``index`` (and ``rank``); None when there is none."""
    matches = [
        entry
        for entry in outputs
        if entry.get("name") == output
        and (entry.get("index") or 0) == index
        and (rank is None or entry.get("rank") == rank)
        and entry.get("sha256")
    ]
    if not matches:
        return None
    return min(matches, key=lambda e: (e.get("rank") is not None, e.get("rank") or 0))


def filename(entry: dict[str, Any], output: str, media_type: str) -> str:
    if media_type == TAR_ZSTD:
        return f"{output}.tar.zst"
    path = str(entry.get("path") or "").rstrip("/")
    return posixpath.basename(path) or output


def content_disposition(name: str) -> str:
    """``attachment`` with an ASCII ``filename`` and, for other names, an RFC 5987 ``filename*``."""
    ascii_name = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in name)
    value = f'attachment; filename="{ascii_name}"'
    if ascii_name != name:
        value += f"; filename*=UTF-8''{quote(name, safe='')}"
    return value


async def job_output(request: Request) -> Response:
    """``GET /apis/nodus.dev/v1/namespaces/{namespace}/jobs/{name}/outputs/{output}?index=&rank=``."""
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    jobs = server.registry.by_plural("jobs")
    assert jobs is not None
    namespace, name, output = (request.path_params[k] for k in ("namespace", "name", "output"))
    if request.method not in ("GET", "HEAD"):
        raise method_not_allowed(request.method.lower(), f"{jobs.plural}/outputs")
    request.scope["state"]["metrics"] = ("get", f"{jobs.plural}/outputs")
    await server.authorizer.authorize(principal, "get", jobs, namespace, name, "outputs")
    params = request.query_params
    index = int_param(params, "index", 0) or 0
    rank = int_param(params, "rank", 0)
    job = await server.stores[jobs.plural].get(namespace, name)
    committed = [e for e in (job.get("status") or {}).get("outputs") or [] if isinstance(e, dict)]
    entry = find(committed, output, index, rank)
    details = {"name": name, "group": GROUP, "kind": "jobs"}
    if entry is None:
        wanted = f'output "{output}" for index {index}' + (f", rank {rank}" if rank is not None else "")
        stored = [e for e in committed if e.get("sha256")]
        have = "; its committed outputs are " + ", ".join(_describe(e) for e in stored) if stored else ""
        raise APIError(
            "NotFound",
            f'job "{name}" has no committed {wanted}' + (have or "; it has no committed outputs yet"),
            fix=f"`kubectl get job {name} -n {namespace} -o jsonpath='{{.status.outputs}}'` lists the committed "
            "outputs; an output is committed when its index finishes.",
            details=details,
        )
    digest = DIGEST_PREFIX + str(entry["sha256"])
    info = await server.blobs.open(namespace, digest)
    if info is None:
        raise APIError(
            "NotFound",
            f'job "{name}": output "{output}" names blob {digest}, which project "{namespace}" does not hold',
            fix="The output was committed without its bytes being uploaded; run the Job again to produce it.",
            details=details,
        )
    disposition = content_disposition(filename(entry, output, info.media_type))
    return blob_http.serve(server, request, info, {"content-disposition": disposition})
