"""``/apis/nodus.dev/v1/nodes/{name}/drain``: cordon a host and move its work elsewhere, or end that.

* ``POST`` with ``{"kind": "NodeDrain", "spec": {"gracePeriodSeconds": 300}}`` (body optional) cordons the host and
  asks each attempt on it to checkpoint and stop; the Job controller replaces them elsewhere (202).
* ``GET`` says how far it got: ``status.phase`` ``Draining`` (attempts left, listed), ``Drained`` or ``NotDraining``.
* ``DELETE`` uncordons the host: new work may land on it again.

Administrators drain any host, a project's Owners the hosts of its Pools (:mod:`nodus.api.draining`).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from nodus.api import decoding
from nodus.api.auth.principal import ADMIN_GROUP, Principal
from nodus.api.context import RequestContext
from nodus.api.draining import Draining, parse_grace
from nodus.api.errors import bad_request, method_not_allowed
from nodus.api.http.authentication import authenticate
from nodus.api.http.responses import request_id, respond
from nodus.api.server import APIServer

RESOURCE = "nodes/drain"
FIELD_MANAGER = "nodus-drain"
# The cordon is written by the API server on the caller's behalf, once the caller is authorized here.
_SERVER = Principal(user="system:nodus:apiserver", groups=(ADMIN_GROUP,))


async def drain(request: Request) -> Response:
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    name = request.path_params["name"]
    verbs = {"GET": "get", "POST": "create", "DELETE": "delete"}
    verb = verbs.get(request.method)
    if verb is None:
        raise method_not_allowed(request.method.lower(), RESOURCE)
    request.scope["state"]["metrics"] = (verb, RESOURCE)
    draining = Draining(server.stores["nodes"], server.stores["attempts"], server.stores["projects"], server.storage)
    node = await draining.node(name)
    await draining.authorize(principal, node, verb)
    ctx = RequestContext(principal=_SERVER, request_id=request_id(request), field_manager=FIELD_MANAGER)
    if verb == "create":
        grace = parse_grace(_spec(await request.body()).get("gracePeriodSeconds"))
        node = await draining.drain(name, grace, ctx)
        return respond((await draining.state(node)).body(), 202)
    if verb == "delete":
        node = await draining.uncordon(name, ctx)
    return respond((await draining.state(node)).body())


def _spec(raw: bytes) -> dict[str, object]:
    if not raw.strip():
        return {}
    value, _ = decoding.decode(raw, yaml_allowed=False)
    if not isinstance(value, dict) or value.get("kind") not in (None, "NodeDrain"):
        raise bad_request("the body must be a NodeDrain", fix='Send {"kind": "NodeDrain", "spec": {...}} or no body.')
    spec = value.get("spec") or {}
    if not isinstance(spec, dict):
        raise bad_request("spec must be an object", fix='Send {"spec": {"gracePeriodSeconds": 300}}.')
    return spec
