"""A Pool's join tokens: ``.../namespaces/{project}/pools/{name}/jointokens`` (the project's Owners, ADR 0047).

``POST`` mints one; the body is optional::

    {"apiVersion": "nodus.dev/v1", "kind": "PoolJoinTokenRequest",
     "spec": {"expirationSeconds": 3600, "description": "rack 4"}}

and the answer (201, ``Cache-Control: no-store``) carries the token, once::

    {"kind": "PoolJoinToken", "apiVersion": "nodus.dev/v1", "metadata": {"name": "<id>"},
     "spec": {"pool": {...}, "expirationSeconds": 3600, "description": "rack 4"},
     "status": {"token": "<id>.<secret>", "id": "<id>", "expirationTimestamp": "...",
                "command": "nodus agent --server URL --certificate-authority ca.crt --join-token <id>.<secret>"}}

``expirationSeconds`` is 60 to 2592000 (30 days); 3600 when absent. ``GET`` lists the pool's tokens
(``PoolJoinTokenList``: id, expiration, expired, lastUsedTime, nodes, description; never a secret) and
``DELETE .../jointokens/{id}`` revokes one (404 when it is not this pool's). A token is a
BootstrapToken, and BootstrapTokens themselves stay for administrators and the controllers: this is the
one way users make them, bound to a Pool they own.
"""

from __future__ import annotations

import shlex
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from nodus.api import decoding
from nodus.api.auth.authorization import Role
from nodus.api.auth.nodes import Attributes, refuse
from nodus.api.auth.principal import Principal
from nodus.api.context import RequestContext
from nodus.api.errors import bad_request, invalid, method_not_allowed
from nodus.api.http.authentication import authenticate
from nodus.api.http.responses import request_id, respond
from nodus.api.pools import PoolRef, token_entry, ttl_of
from nodus.api.registry import API_VERSION, GROUP
from nodus.api.server import APIServer
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path

KIND = "PoolJoinTokenRequest"
RESOURCE = "pools/jointokens"
FIELD_MANAGER = "nodus-pools"
MAX_DESCRIPTION = 256


async def join_tokens(request: Request) -> Response:
    """``GET`` and ``POST .../pools/{name}/jointokens``."""
    server: APIServer = request.app.state.server
    pool = PoolRef(request.path_params["namespace"], request.path_params["name"])
    if request.method == "GET":
        await _owner(server, request, "list", pool)
        await _exists(server, pool)
        items = [token_entry(t) for t in await server.pools.tokens(pool)]
        return respond({"apiVersion": API_VERSION, "kind": "PoolJoinTokenList", "metadata": {}, "items": items})
    if request.method != "POST":
        raise method_not_allowed(request.method.lower(), RESOURCE)
    principal = await _owner(server, request, "create", pool)
    spec = _spec(await request.body(), pool)
    ttl = ttl_of(spec.get("expirationSeconds"))
    ctx = RequestContext(principal=principal, request_id=request_id(request), field_manager=FIELD_MANAGER)
    minted = await server.pools.mint(pool, ttl, str(spec.get("description") or ""), ctx)
    command = ["nodus", "agent", "--server", _server_url(request)]
    command += ["--certificate-authority", "ca.crt", "--join-token", minted.token]
    body = {
        "apiVersion": API_VERSION,
        "kind": "PoolJoinToken",
        "metadata": {"name": minted.id, "namespace": pool.project},
        "spec": {"pool": {"project": pool.project, "name": pool.name}, **spec},
        "status": {
            "token": minted.token,
            "id": minted.id,
            "expirationTimestamp": minted.expiration,
            "command": " ".join(shlex.quote(part) for part in command),
        },
    }
    return respond(body, 201, headers={"Cache-Control": "no-store"})


async def join_token(request: Request) -> Response:
    """``DELETE .../pools/{name}/jointokens/{id}``: revoke one."""
    server: APIServer = request.app.state.server
    pool = PoolRef(request.path_params["namespace"], request.path_params["name"])
    token_id = request.path_params["id"]
    if request.method != "DELETE":
        raise method_not_allowed(request.method.lower(), f"{RESOURCE}/{token_id}")
    principal = await _owner(server, request, "delete", pool)
    ctx = RequestContext(principal=principal, request_id=request_id(request), field_manager=FIELD_MANAGER)
    token = await server.pools.revoke(pool, token_id, ctx)
    return respond(
        {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Success",
            "details": {"name": token_id, "group": GROUP, "kind": "jointokens", "uid": token["metadata"]["uid"]},
        }
    )


async def _owner(server: APIServer, request: Request, verb: str, pool: PoolRef) -> Principal:
    """The caller, when it is an administrator or an Owner of the pool's project; a 403 otherwise."""
    principal = await authenticate(server, request)
    request.scope["state"]["metrics"] = (verb, RESOURCE)
    attrs = Attributes(principal, verb, "pools", pool.project, pool.name, "jointokens")
    if await server.authorizer.system(attrs):
        return principal
    if await server.authorizer.role(principal, pool.project) >= Role.OWNER:
        return principal
    raise refuse(
        attrs,
        f'Only Owners of project "{pool.project}" mint, list and revoke its pools\' join tokens (a token lets a '
        f"machine into the project): ask an Owner to run nodus pools join-token {pool.name} --project {pool.project}, "
        f'or to make "{principal.user}" an Owner (kubectl edit project {pool.project}).',
        why="join tokens are for the project's Owners",
    )


async def _exists(server: APIServer, pool: PoolRef) -> None:
    """A 404 naming the pool when there is none (a pool being deleted still lists its tokens)."""
    if await server.stores["pools"].find(pool.project, pool.name) is None:
        await server.pools.usable_pool(pool)


def _spec(raw: bytes, pool: PoolRef) -> dict[str, Any]:
    if not raw.strip():
        return {}
    value, _ = decoding.decode(raw, yaml_allowed=False)
    if not isinstance(value, dict) or value.get("kind") not in (None, KIND):
        raise bad_request(
            f"the body must be a {KIND}",
            fix=f'Send {{"kind": "{KIND}", "spec": {{"expirationSeconds": 3600, "description": "..."}}}}, or no body.',
        )
    spec = value.get("spec") if value.get("spec") is not None else {}
    errors: list[FieldError] = []
    if not isinstance(spec, dict):
        raise invalid(KIND, GROUP, pool.name, [fieldpath.invalid(Path("spec"), spec, "must be an object")])
    for key in spec:
        if key not in ("expirationSeconds", "description"):
            errors.append(fieldpath.not_supported(Path("spec", str(key)), key, ("expirationSeconds", "description")))
    try:
        ttl_of(spec.get("expirationSeconds"))
    except ValueError as exc:
        errors.append(fieldpath.invalid(Path("spec", "expirationSeconds"), spec.get("expirationSeconds"), str(exc)))
    description = spec.get("description")
    if description is not None and (not isinstance(description, str) or len(description) > MAX_DESCRIPTION):
        errors.append(
            fieldpath.invalid(Path("spec", "description"), description, f"must be text of at most {MAX_DESCRIPTION}")
        )
    if errors:
        raise invalid(KIND, GROUP, pool.name, errors)
    return spec


def _server_url(request: Request) -> str:
    """The API server's address as the caller reached it (what a host on the same network reaches too)."""
    return str(request.base_url).rstrip("/")
