"""The ledger's door for Nodus's controllers: hold, extend, capture, cover and release, by key.

Controllers are API clients (they never touch the database), so money moves through here. Each route
checks who calls, parses the request, asks :class:`~nodus.api.ledgerdoor.LedgerDoor` once and renders its
answer:

* ``GET /apis/nodus.dev/v1/namespaces/{project}/ledger/holds/{hold}``: the hold (``amountUSD``
  held now, ``capturedUSD``, ``releasedUSD``, ``settled``), what was charged on it per segment
  (``chargedUSD``; covered time under ``coveredUSD``), and the project's credits.
* ``GET /apis/nodus.dev/v1/namespaces/{project}/ledger/budgets/{budget}``: the Budget's figures from the
  ledger for its current period (``limitUSD``, ``periodStart``/``periodEnd``, ``spentUSD``,
  ``heldUSD``, ``committedUSD``, ``remainingUSD``); the Budget controller copies them into its status.
* ``GET /apis/nodus.dev/v1/namespaces/{project}/ledger/storage/{job uid}``: the storage price of this
  server's price book (``price``: ``rateUSDPerGiBMonth``, ``freeBytes``, ``hoursPerMonth``,
  ``pricebookVersion``), what the Job was charged for storage (``chargedUSD``, ``hours``, and
  ``lastHour``, the highest hour charged, from the keys ``storage:<job uid>:<hour>``) and the
  project's credits: all the storage billing controller needs (ADR 0023). With the project's own uid it
  reads the project's storage hours, which the API server's blob collector charges itself (ADR 0034).
* ``POST /apis/nodus.dev/v1/namespaces/{project}/ledger/postings`` with one operation::

    {"operation": "Hold", "key": "...", "hold": "<id>", "subject": "<job uid>", "job": "<job name>",
     "amountUSD": "1.5", "capUSD": "20"}
    {"operation": "Extend", "key": "...", "hold": "<id>", "job": "<job name>", "amountUSD": "1.5", "capUSD": "20"}
    {"operation": "Capture", "key": "...", "hold": "<id>", "segment": "Running", "seconds": "61.5",
     "rateUSDPerHour": "2.5", "amountUSD": "0.042708"}
    {"operation": "Cover", ...the same fields as Capture...}
    {"operation": "Refund", ...the same fields as Capture: a charge given back...}
    {"operation": "Release", "key": "...", "hold": "<id>"}
    {"operation": "Charge", "key": "storage:<job uid>:<hour>", "subject": "<job uid>", "segment": "Storage",
     "seconds": "3600", "rateUSDPerHour": "0.009766", "amountUSD": "0.009766", "memo": "..."}

  answers as the GET of the hold does (a Charge: as the GET of the subject's storage does). A Charge is
  post-paid, without a hold: straight from the project's available credit to revenue, never below zero
  (``amountUSD`` must be ``rateUSDPerHour x seconds / 3600`` rounded half-up to the micro-dollar).

  A replayed key changes nothing (200 with the state); a key reused with other amounts is a 409; a
  hold or a Charge that would overdraw the project's available credit, or a capture beyond what the
  hold holds, is a 402-style ``InsufficientCredits`` Status with the amounts; a hold
  that would take its subject (a Job) past ``capUSD`` (its ``maxCostUSD``) is a 402 ``MaxCostReached``.
  With ``job``, the door reads the Job's labels and the project's Budgets: the hold is tagged with the
  Budgets the Job matches and must fit each (a 402 ``BudgetExceeded`` naming the Budget otherwise).
  Without it (an extension for time already billed) no Budget is checked and the tags stay.
  A posting leaves the Project's ``status.credits`` to the credits reconciler of ``nodus controllers``,
  which copies the ledger there once the movement shows on the Attempt or Job it was for (ADR 0044).

Only administrators and the controllers (ADR 0035) may call either.

Administrators also read the whole ledger here (ADR 0038), which the controllers may not (their rights,
``nodus/api/auth/controllers.py``, do not include it):

* ``GET /apis/nodus.dev/v1/ledger/verify``: every invariant of the ledger and every display copy checked now
  (``nodus.billing.checking``)::

    {"kind": "LedgerVerification", "apiVersion": "nodus.dev/v1", "sound": false,
     "breaches": [{"invariant": "DisplayCopyEqualsLedger", "message": "project demo: status.credits..."}]}

  A breach is a finding, not a failed request: the answer is a 200 either way.
* ``GET /apis/nodus.dev/v1/namespaces/{project}/ledger/statement?start=RFC3339&end=RFC3339``: every movement
  and charge of the project from ``start`` (default: the beginning) to ``end`` (exclusive; default: now),
  oldest first, streamed from one database snapshot as a ``LedgerStatement`` list with one item per line,
  so that a client may read it whole as JSON or line by line::

    {"kind":"LedgerStatement","apiVersion":"nodus.dev/v1","project":"demo","start":"...","end":"...","items":[
    {"time":"2026-12-01T10:00:00.123456Z","movement":"Charge","key":"...","subject":"<attempt uid>",
     "subjectName":"attempt/train-0-1","segment":"Running","seconds":"61.5","rateUSDPerHour":"2.50",
     "amountUSD":"0.042708","covered":false,"memo":""}
    ,{...}
    ]}

  ``subjectName`` says what the subject uid is (``attempt/NAME``, ``job/NAME``, ``project/NAME``) while it
  exists, and for an Attempt after it is gone (the name is kept with its hold). A stream cut short lacks its
  closing ``]}``. The ledger outlives projects: a deleted project's statement is served too.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from nodus.api import postings as operations
from nodus.api.auth.nodes import Attributes
from nodus.api.auth.principal import Principal
from nodus.api.errors import APIError, bad_request, method_not_allowed
from nodus.api.http.authentication import authenticate
from nodus.api.http.lists import ClosingStreamingResponse
from nodus.api.http.responses import respond
from nodus.api.registry import API_VERSION, GROUP
from nodus.api.server import APIServer
from nodus.apimachinery import units

_RESOURCE = "ledger"


async def _nodus_only(server: APIServer, request: Request, verb: str, resource: str) -> Principal:
    """Administrators and the controllers (for the parts of the door they use) move money; nobody else."""
    principal = await authenticate(server, request)
    attrs = Attributes(principal, verb, _RESOURCE, request.path_params.get("namespace"), None, resource)
    if not await server.authorizer.system(attrs):
        raise APIError(
            "Forbidden",
            f'User "{principal.user}" cannot use the ledger of API group "{GROUP}": only Nodus moves money',
            fix="Read a Job's status.cost and a Project's status.credits, or nodus credits show PROJECT.",
            details={"group": GROUP, "kind": _RESOURCE},
        )
    return principal


async def _admin_get(request: Request, resource: str) -> APIServer:
    """The preamble of the door's reads: GET only, counted as ``get ledger/<resource>``, Nodus only."""
    server: APIServer = request.app.state.server
    if request.method != "GET":
        raise method_not_allowed(request.method.lower(), f"ledger/{resource}")
    request.scope["state"]["metrics"] = ("get", f"ledger/{resource}")
    await _nodus_only(server, request, "get", resource)
    return server


async def hold_state(request: Request) -> Response:
    """``GET .../namespaces/{namespace}/ledger/holds/{hold}``."""
    server = await _admin_get(request, "holds")
    return respond(await server.ledger.hold(request.path_params["namespace"], request.path_params["hold"]))


async def budget_state(request: Request) -> Response:
    """``GET .../namespaces/{namespace}/ledger/budgets/{budget}``."""
    server = await _admin_get(request, "budgets")
    return respond(await server.ledger.budget(request.path_params["namespace"], request.path_params["budget"]))


async def storage_state(request: Request) -> Response:
    """``GET .../namespaces/{namespace}/ledger/storage/{subject}``."""
    server = await _admin_get(request, "storage")
    project, subject = request.path_params["namespace"], request.path_params["subject"]
    return respond(await server.ledger.storage_charges(project, subject))


async def verification(request: Request) -> Response:
    """``GET /apis/nodus.dev/v1/ledger/verify``: administrators only."""
    server = await _administrators_read(request, "verify")
    return respond(await server.ledger.verification())


_BEGINNING = datetime(1970, 1, 1, tzinfo=UTC)
# Lines per write to the connection: a statement of a busy month is many thousands.
_LINES_PER_CHUNK = 200


async def statement(request: Request) -> Response:
    """``GET .../namespaces/{namespace}/ledger/statement``: administrators only."""
    server = await _administrators_read(request, "statement")
    project = request.path_params["namespace"]
    start = _time_parameter(request, "start") or _BEGINNING
    end = _time_parameter(request, "end") or units.now()
    items = server.ledger.statement(project, start, end)
    resources = contextlib.AsyncExitStack()
    resources.push_async_callback(items.aclose)  # the cursor's connection, however the stream ends
    try:
        # The first line is read before the answer starts, so that a database that cannot be reached is a 503
        # Status, not a 200 cut short.
        first = await anext(items, None)
    except BaseException:
        await resources.aclose()
        raise
    head = {
        "kind": "LedgerStatement",
        "apiVersion": API_VERSION,
        "project": project,
        "start": units.format_micro_time(start),
        "end": units.format_micro_time(end),
    }

    async def body() -> AsyncIterator[bytes]:
        yield orjson.dumps(head)[:-1] + b',"items":[\n'
        if first is not None:
            chunk = [orjson.dumps(first) + b"\n"]
            async for item in items:
                chunk.append(b"," + orjson.dumps(item) + b"\n")
                if len(chunk) >= _LINES_PER_CHUNK:
                    yield b"".join(chunk)
                    chunk = []
            yield b"".join(chunk)
        yield b"]}\n"

    return ClosingStreamingResponse(body(), resources, media_type="application/json")


async def _administrators_read(request: Request, resource: str) -> APIServer:
    """The preamble of the administrators' reads: GET only, counted as ``get ledger/<resource>``, and refused
    (403) to everyone else, the controllers included."""
    server: APIServer = request.app.state.server
    if request.method != "GET":
        raise method_not_allowed(request.method.lower(), f"ledger/{resource}")
    request.scope["state"]["metrics"] = ("get", f"ledger/{resource}")
    principal = await authenticate(server, request)
    attrs = Attributes(principal, "get", _RESOURCE, request.path_params.get("namespace"), None, resource)
    # Nodus's own identities are decided there (the controllers and nodes are refused: neither has this right);
    # a user who is not an administrator gets False.
    if not await server.authorizer.system(attrs):
        raise APIError(
            "Forbidden",
            f'User "{principal.user}" cannot get the ledger\'s {resource} in API group "{GROUP}": administrators only',
            fix="Use an administrator's kubeconfig (group system:masters; nodus dev writes DATA_DIR/kubeconfig). "
            "A project's members read its credits (nodus credits show PROJECT) and each Job's status.cost.",
            details={"group": GROUP, "kind": _RESOURCE},
        )
    return server


def _time_parameter(request: Request, name: str) -> datetime | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    try:
        return units.parse_time(text)
    except ValueError as exc:
        raise bad_request(
            f"{name}: {exc}", fix=f"Send {name} as an RFC 3339 time with a zone, such as {name}=2026-11-01T00:00:00Z."
        ) from None


async def postings(request: Request) -> Response:
    """``POST .../namespaces/{namespace}/ledger/postings``: one operation, answered with the state it leaves."""
    server: APIServer = request.app.state.server
    if request.method != "POST":
        raise method_not_allowed(request.method.lower(), "ledger/postings")
    request.scope["state"]["metrics"] = ("create", "ledger/postings")
    await _nodus_only(server, request, "create", "postings")
    operation = operations.parse(_object(await request.body()))
    return respond(await server.ledger.post(request.path_params["namespace"], operation), status=201)


def _object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        raise bad_request("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return body
