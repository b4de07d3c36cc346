"""``POST /apis/nodus.dev/v1/nodecredentials``: a host exchanges a bootstrap token for its node credential.

The request, authenticated by a bootstrap token (a host joining), by a node credential (an agent
rotating its own) or by an administrator::

    {"apiVersion": "nodus.dev/v1", "kind": "NodeCredentialRequest",
     "spec": {"nodeName": "gpu-7", "offering": "l4-x1-us", "expirationSeconds": 86400}}

The answer (201, ``Cache-Control: no-store``) repeats the spec and adds ``status``: ``token``,
``expirationTimestamp`` and the Node's ``name`` and ``uid``. Nothing is stored but the Node: a host
whose Node does not exist yet (an agent started by hand) gets it created here, in phase-less state,
with ``spec.provider: manual``; the credential names the Node's uid, so deleting the Node revokes it.

Refusals (each a Status naming the fix): a token bound to another node name, a node that is Lost,
Failed or being deleted, an offering other than the Node's or one that does not exist, a node
credential asking for another node, and a server without ``--secret-key-file`` (503).

A Pool's join token (``spec.pool``, ADR 0047) registers the host in that pool instead
(``nodus.api.pools.PoolHosts.join``): no offering (the host reports its own shape; one in the request
is refused), the Node created with ``spec.pool``, provider ``pool`` and the pool's labels; refused when
the pool is gone, being deleted or full, or the name belongs to another Node. A pool's Node is never
registered with a token that is not its pool's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from nodus.api import decoding, objectmeta
from nodus.api.auth.nodes import Attributes
from nodus.api.auth.principal import ADMIN_GROUP, Principal
from nodus.api.context import RequestContext
from nodus.api.errors import APIError, bad_request, invalid, method_not_allowed
from nodus.api.http.authentication import authenticate
from nodus.api.http.responses import request_id, respond
from nodus.api.pools import PoolRef
from nodus.api.registry import API_VERSION, GROUP
from nodus.api.server import APIServer
from nodus.apimachinery import fieldpath, units
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1 import labels

KIND = "NodeCredentialRequest"
RESOURCE = "nodecredentials"
FIELD_MANAGER = "nodus-node-bootstrap"
# Writes the exchange makes on the host's behalf (its Node, the token's status) are the API server's own.
_SERVER = Principal(user="system:nodus:apiserver", groups=(ADMIN_GROUP,))
_UNUSABLE_PHASES = ("Lost", "Failed", "Terminating")


async def create(request: Request) -> Response:
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    if request.method != "POST":
        raise method_not_allowed(request.method.lower(), RESOURCE)
    request.scope["state"]["metrics"] = ("create", RESOURCE)
    spec = _spec(await request.body())
    name, offering = str(spec["nodeName"]), spec.get("offering")
    if not await server.authorizer.system(Attributes(principal, "create", RESOURCE, None, name)):
        raise APIError(
            "Forbidden",
            f'{RESOURCE}.{GROUP} is forbidden: User "{principal.user}" cannot create resource "{RESOURCE}" in API '
            f'group "{GROUP}"',
            fix="Node credentials are issued to hosts that present a bootstrap token (nodus nodes join-token).",
            details={"group": GROUP, "kind": RESOURCE},
        )
    if not server.node_credentials.enabled:
        raise APIError(
            "ServiceUnavailable",
            "this API server issues no node credentials: it was started without --secret-key-file",
            fix="Start every API server with the same --secret-key-file (nodus dev does).",
        )
    token = await _token(server, principal, name)
    ctx = RequestContext(principal=_SERVER, request_id=request_id(request), field_manager=FIELD_MANAGER)
    pool = PoolRef.of(token)
    if pool is not None:
        if offering:
            raise invalid(
                KIND,
                GROUP,
                name,
                [
                    fieldpath.forbidden(
                        Path("spec", "offering"),
                        f"a host joining pool {pool} reports its own shape: start the agent without --offering",
                    )
                ],
            )
        node = await server.pools.join(pool, name, ctx)
    else:
        node = await _node(server, name, offering, ctx, joining=token is not None)
    ttl = timedelta(seconds=int(spec["expirationSeconds"])) if spec.get("expirationSeconds") else None
    issued = server.node_credentials.issue(node, ttl)
    server.node_credentials.forget(name)
    if token is not None:
        await _record_use(server, token, name, ctx)
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "spec": spec,
        "status": {
            "token": issued.token,
            "expirationTimestamp": units.format_time(datetime.fromtimestamp(issued.expires, UTC)),
            "node": {"name": name, "uid": node["metadata"]["uid"]},
        },
    }
    return respond(body, 201, headers={"Cache-Control": "no-store"})


def _spec(raw: bytes) -> dict[str, Any]:
    value, _ = decoding.decode(raw, yaml_allowed=False)
    if not isinstance(value, dict) or value.get("kind") not in (None, KIND):
        raise bad_request(f"the body must be a {KIND}", fix=f'Send {{"kind": "{KIND}", "spec": {{"nodeName": ...}}}}.')
    spec = value.get("spec")
    errors: list[FieldError] = []
    if not isinstance(spec, dict):
        raise invalid(KIND, GROUP, "", [fieldpath.required(Path("spec"), "nodeName and, for a new node, offering")])
    name = spec.get("nodeName")
    if not isinstance(name, str) or not name:
        errors.append(fieldpath.required(Path("spec", "nodeName"), "the name of the Node this host runs"))
    else:
        errors.extend(objectmeta.validate_name(name, Path("spec", "nodeName"), dns_label=False))
    offering = spec.get("offering")
    if offering is not None and (not isinstance(offering, str) or not offering):
        errors.append(fieldpath.invalid(Path("spec", "offering"), offering, "must be an offering id"))
    seconds = spec.get("expirationSeconds")
    if seconds is not None and (not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 10):
        errors.append(fieldpath.invalid(Path("spec", "expirationSeconds"), seconds, "must be an integer, at least 10"))
    if errors:
        raise invalid(KIND, GROUP, str(name or ""), errors)
    return spec


async def _token(server: APIServer, principal: Principal, name: str) -> dict[str, Any] | None:
    """The bootstrap token the caller authenticated with, checked against the node name it asks for."""
    token_id = principal.bootstrap_token
    if token_id is None:
        return None
    token = await server.stores["bootstraptokens"].find(None, token_id)
    if token is None:  # deleted between authentication and now
        raise APIError("Unauthorized", "Unauthorized")
    bound = (token.get("spec") or {}).get("nodeName")
    if bound and bound != name:
        raise APIError(
            "Forbidden",
            f'bootstrap token "{token_id}" registers node "{bound}" only, not "{name}"',
            fix=f"Start the agent with --node-name {bound}, or create a token for {name}: "
            f"nodus nodes join-token --node-name {name}.",
            details={"group": GROUP, "kind": RESOURCE},
        )
    return token


async def _node(server: APIServer, name: str, offering: Any, ctx: RequestContext, *, joining: bool) -> dict[str, Any]:
    """The Node of a host that is not joining a pool (``joining``: with a bootstrap token)."""
    nodes = server.stores["nodes"]
    node = await nodes.find(None, name)
    if node is None:
        if not offering:
            raise invalid(
                KIND,
                GROUP,
                name,
                [fieldpath.required(Path("spec", "offering"), f"node {name} does not exist yet; say what it provides")],
            )
        if await server.stores["offerings"].find(None, str(offering)) is None:
            raise invalid(
                KIND,
                GROUP,
                name,
                [fieldpath.invalid(Path("spec", "offering"), offering, "no such offering (kubectl get offerings)")],
            )
        body = {
            "apiVersion": API_VERSION,
            "kind": "Node",
            "metadata": {"name": name, "labels": {labels.OFFERING: str(offering)}},
            "spec": {"offering": str(offering), "provider": "manual"},
        }
        try:
            return await nodes.create(None, body, ctx)
        except APIError as error:
            if error.reason != "AlreadyExists":
                raise
            node = await nodes.get(None, name)
    assert node is not None
    phase = (node.get("status") or {}).get("phase")
    if node["metadata"].get("deletionTimestamp") or phase in _UNUSABLE_PHASES:
        raise APIError(
            "Conflict",
            f'node "{name}" is {"being deleted" if node["metadata"].get("deletionTimestamp") else phase}: '
            "it cannot get a credential",
            fix="Start the agent under a new node name.",
            details={"name": name, "group": GROUP, "kind": "nodes"},
        )
    owner = PoolRef.of(node)
    if joining and owner is not None:
        # A pool's hosts join with that pool's tokens only: another token must not take over one of them.
        raise APIError(
            "Conflict",
            f'node "{name}" is a host of pool {owner}: only a join token of that pool registers it',
            fix=f"Start the agent under another --node-name, or with a join token of pool {owner} "
            f"(nodus pools join-token {owner.name} --project {owner.project}).",
            details={"name": name, "group": GROUP, "kind": "nodes"},
        )
    have = (node.get("spec") or {}).get("offering")
    if offering and have != offering:
        raise APIError(
            "Conflict",
            f'node "{name}" provides offering {have}, not {offering}',
            fix=f"Start the agent with --offering {have}, or under a new node name.",
            details={"name": name, "group": GROUP, "kind": "nodes"},
        )
    return node


async def _record_use(server: APIServer, token: dict[str, Any], node: str, ctx: RequestContext) -> None:
    def used(current: dict[str, Any]) -> dict[str, Any]:
        status = dict(current.get("status") or {})
        nodes = [*[n for n in status.get("nodes") or [] if n != node][-31:], node]
        status.update(lastUsedTime=units.format_time(units.now()), nodes=nodes)
        return {**current, "status": status}

    try:
        await server.stores["bootstraptokens"].patch(None, token["metadata"]["name"], used, ctx, "status")
    except APIError as error:
        if error.reason != "NotFound":
            raise
