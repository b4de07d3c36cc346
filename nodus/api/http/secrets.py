"""The values of a Secret, for controllers and agents: the one place a Secret's values leave the server.

``GET /apis/nodus.dev/v1/namespaces/{project}/secrets/{name}/values?version=N&uid=UID`` returns
``{"kind": "SecretValues", "apiVersion": "nodus.dev/v1", "name", "uid", "version", "data": {key: base64}}``
(``Cache-Control: no-store``). Only administrators and node agents may call it, a node only for the
versions its active Attempts pin (ADR 0035); users, even a project's Owner, read keys and versions
from the Secret itself and never its values (ADR-0013). The controllers never read values.

``version`` defaults to the current one and ``uid`` to any; a Job passes both, as it pinned them at
admission. A 404 Status says which is gone: the Secret, its uid (deleted and recreated under the same
name) or the version (pruned). Values are never logged, and no error carries one.
"""

from __future__ import annotations

import base64
import logging

from starlette.requests import Request
from starlette.responses import Response

from nodus.api.auth.nodes import Attributes
from nodus.api.auth.principal import Principal
from nodus.api.errors import APIError, bad_request, method_not_allowed
from nodus.api.http.authentication import authenticate
from nodus.api.http.responses import respond
from nodus.api.kinds import secret
from nodus.api.registry import API_VERSION, GROUP
from nodus.api.server import APIServer
from nodus.apimachinery.sealing import OpenError

log = logging.getLogger(__name__)

_RESOURCE = "secrets/values"


def _forbidden(principal: Principal, namespace: str) -> APIError:
    return APIError(
        "Forbidden",
        f'secrets.{GROUP} is forbidden: User "{principal.user}" cannot get resource "{_RESOURCE}" in API group '
        f'"{GROUP}" in project "{namespace}"',
        fix="Secret values are read only by the node agents that run Jobs pinning them. Users see the "
        "keys and versions: kubectl get secrets.nodus.dev NAME -o yaml.",
        details={"group": GROUP, "kind": "secrets"},
    )


def _gone(name: str, message: str, fix: str) -> APIError:
    return APIError("NotFound", message, fix=fix, details={"name": name, "group": GROUP, "kind": "secrets"})


def _version(request: Request) -> int | None:
    raw = request.query_params.get("version")
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise bad_request(f'version must be a positive integer, got "{raw}"', fix="Pass ?version=1 or higher.")
    return int(raw)


async def secret_values(request: Request) -> Response:
    """``GET .../namespaces/{namespace}/secrets/{name}/values``."""
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    if request.method != "GET":
        raise method_not_allowed(request.method.lower(), _RESOURCE)
    request.scope["state"]["metrics"] = ("get", _RESOURCE)
    wanted_version = _version(request)
    wanted_uid = request.query_params.get("uid") or None
    # Only Nodus reads values: administrators, and a node for the versions its active Attempts pin.
    params = {"uid": wanted_uid or "", "version": str(wanted_version or "")}
    attrs = Attributes(principal, "get", "secrets", namespace, name, "values", params=params)
    if not await server.authorizer.system(attrs):
        raise _forbidden(principal, namespace)
    obj = await server.stores[secret.SECRET.plural].get(namespace, name)
    uid = str(obj["metadata"]["uid"])
    if wanted_uid is not None and wanted_uid != uid:
        raise _gone(
            name,
            f'secrets.{GROUP} "{name}" was deleted and recreated (uid {uid}); the Job pinned uid {wanted_uid}',
            "The values that Job pinned are gone: create the Job again so that it pins the new Secret.",
        )
    kept = [int(v["version"]) for v in secret.versions(obj)]
    version = wanted_version if wanted_version is not None else (kept[-1] if kept else 0)
    try:
        values = secret.open_version(secret.require(server.secret_keys), obj, version)
    except OpenError as exc:
        log.error("secret %s/%s version %d does not open: %s", namespace, name, version, exc)
        raise APIError(
            "InternalError",
            f'secrets.{GROUP} "{name}" version {version} cannot be opened with this server\'s secret key file',
            fix="An administrator: check that --secret-key-file holds every key that sealed stored values.",
        ) from None
    if values is None:
        shown = ", ".join(str(v) for v in kept) or "none"
        raise _gone(
            name,
            f'secrets.{GROUP} "{name}" has no version {version} (kept: {shown})',
            "Old versions no unfinished Job pins are dropped; create the Job again so that it pins a kept version.",
        )
    body = {
        "kind": "SecretValues",
        "apiVersion": API_VERSION,
        "name": name,
        "uid": uid,
        "version": version,
        "data": {key: base64.b64encode(value).decode() for key, value in sorted(values.items())},
    }
    return respond(body, headers={"Cache-Control": "no-store"})
