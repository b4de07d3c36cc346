"""A project's credits: read them (its members), grant them (administrators).

``GET /apis/nodus.dev/v1/projects/{name}/credits`` answers the ledger's live figures::

    {"kind": "Credits", "apiVersion": "nodus.dev/v1", "project": "demo",
     "balanceUSD": "100.00", "heldUSD": "12.50", "availableUSD": "87.50"}

``POST`` the same path with ``{"amountUSD": "100", "memo": "...", "key": "..."}`` grants credit
(``nodus credits grant PROJECT AMOUNT``). ``key`` (or the ``Idempotency-Key`` header) names the
grant: sent again, it grants nothing more; sent with another amount, it is refused (409). Without a
key every POST is a new grant. After a grant the Project's ``status.credits`` (a display copy of
the ledger, like every ``status.cost``) is brought up to date before the answer. The route checks the
caller and the request; :class:`~nodus.api.credits.Credits` reads and grants.

A grant to a project being deleted is refused (403, cause ``ProjectTerminating``): its credit is closed once
its contents are gone, and a project created again under its name starts with none (ADR 0037); a key that
granted credit to such an earlier project is refused (409) rather than answered as granted.

The answer to a POST says which happened: ``201 Created`` and ``"grant": {"key": ..., "amountUSD": ...,
"replayed": false}`` for a new grant; ``200 OK`` and ``"replayed": true`` when the key had granted that
amount before and nothing more was granted now.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

import orjson
from starlette.requests import Request
from starlette.responses import Response

from nodus.api import credits as shown
from nodus.api.auth.nodes import Attributes
from nodus.api.context import RequestContext
from nodus.api.errors import APIError, bad_request, method_not_allowed
from nodus.api.http.authentication import authenticate
from nodus.api.http.responses import request_id, respond
from nodus.api.registry import GROUP
from nodus.api.server import APIServer
from nodus.billing import money

_RESOURCE = "projects/credits"
FIELD_MANAGER = "nodus-billing"
MAX_KEY_LENGTH = 200


async def credits(request: Request) -> Response:
    """``GET``/``POST /apis/nodus.dev/v1/projects/{name}/credits``."""
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    name = request.path_params["name"]
    projects = server.registry.by_plural("projects")
    assert projects is not None
    if request.method == "GET":
        request.scope["state"]["metrics"] = ("get", _RESOURCE)
        await server.authorizer.authorize(principal, "get", projects, None, name)
        return respond(await server.credits.read(name))
    if request.method != "POST":
        raise method_not_allowed(request.method.lower(), _RESOURCE)
    request.scope["state"]["metrics"] = ("create", _RESOURCE)
    attrs = Attributes(principal, "create", "credits", None, name)
    if not await server.authorizer.system(attrs):
        raise APIError(
            "Forbidden",
            f'projects.{GROUP} "{name}" is forbidden: User "{principal.user}" cannot create resource '
            f'"{_RESOURCE}" in API group "{GROUP}"',
            fix="Credits are granted by administrators (group system:masters): nodus credits grant PROJECT AMOUNT.",
            details={"name": name, "group": GROUP, "kind": "projects"},
        )
    await server.credits.grantable(name)
    amount, key, memo = _grant_request(await request.body(), request.headers.get("idempotency-key"))
    ctx = RequestContext(principal=principal, request_id=request_id(request), field_manager=FIELD_MANAGER)
    granted = await server.credits.grant(name, amount, key, memo, ctx)
    grant = {"key": granted.key, "amountUSD": money.text(granted.amount), "replayed": granted.replayed}
    return respond({**shown.body(name, granted.figures), "grant": grant}, status=200 if granted.replayed else 201)


def _grant_request(raw: bytes, header_key: str | None) -> tuple[Decimal, str, str]:
    try:
        body = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        raise bad_request('the body must be a JSON object such as {"amountUSD": "100"}') from None
    if not isinstance(body, dict):
        raise bad_request('the body must be a JSON object such as {"amountUSD": "100"}')
    try:
        amount = money.parse(body.get("amountUSD"), "amountUSD")
    except money.InvalidAmount as exc:
        raise bad_request(
            str(exc), fix='Send {"amountUSD": "100.00"}: a decimal string, up to six fractional digits.'
        ) from None
    if amount <= 0:
        raise bad_request("amountUSD must be more than 0", fix='Send {"amountUSD": "100.00"}.')
    key = str(body.get("key") or header_key or uuid.uuid4().hex)
    if len(key) > MAX_KEY_LENGTH:
        raise bad_request(f"key is longer than {MAX_KEY_LENGTH} characters")
    return amount, key, str(body.get("memo") or "")[:500]
