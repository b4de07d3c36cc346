"""The ledger's door for Nodus's controllers: hold, extend, capture, cover and release, by key.

Controllers are API clients (they never touch the database), so money moves through here:

* ``GET /apis/nodus.dev/v1/namespaces/{project}/ledger/holds/{hold}``: the hold (``amountUSD``
  held now, ``capturedUSD``, ``releasedUSD``, ``settled``), what was charged on it per segment
  (``chargedUSD``; covered time under ``coveredUSD``), and the project's credits.
* ``POST /apis/nodus.dev/v1/namespaces/{project}/ledger/postings`` with one operation::

    {"operation": "Hold", "key": "...", "hold": "<id>", "subject": "<job uid>", "amountUSD": "1.5",
     "capUSD": "20"}
    {"operation": "Extend", "key": "...", "hold": "<id>", "amountUSD": "1.5", "capUSD": "20"}
    {"operation": "Capture", "key": "...", "hold": "<id>", "segment": "Running", "seconds": "61.5",
     "rateUSDPerHour": "2.5", "amountUSD": "0.042708"}
    {"operation": "Cover", ...the same fields as Capture...}
    {"operation": "Refund", ...the same fields as Capture: a charge given back...}
    {"operation": "Release", "key": "...", "hold": "<id>"}

  answers as the GET does. A replayed key changes nothing (200 with the state); a key reused with
  other amounts is a 409; a hold that would overdraw the project's available credit, or a capture
  beyond what the hold holds, is a 402-style ``InsufficientCredits`` Status with the amounts; a hold
  that would take its subject (a Job) past ``capUSD`` (its ``maxCostUSD``) is a 402 ``MaxCostReached``.

Only administrators (group ``system:masters``: the controllers) may call either.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from nodus.api import credits
from nodus.api.auth.principal import Principal
from nodus.api.context import RequestContext
from nodus.api.errors import APIError, bad_request, method_not_allowed
from nodus.api.http.authentication import authenticate
from nodus.api.http.responses import request_id, respond
from nodus.api.registry import API_VERSION, GROUP
from nodus.api.server import APIServer
from nodus.billing import ledger, money
from nodus.storage import ledger as tables
from nodus.storage.ledger import CapExceeded, Charge, HoldSettled, KeyReused, Overdrawn

log = logging.getLogger(__name__)

SEGMENTS = ("Boot", "Running", "Restore", "Teardown")
FIELD_MANAGER = "nodus-billing"
_RESOURCE = "ledger"


def _admin_only(server: APIServer, request: Request) -> Principal:
    principal = authenticate(server, request)
    if not principal.is_admin:
        raise APIError(
            "Forbidden",
            f'User "{principal.user}" cannot use the ledger of API group "{GROUP}": only Nodus moves money',
            fix="Read a Job's status.cost and a Project's status.credits, or nodus credits show PROJECT.",
            details={"group": GROUP, "kind": _RESOURCE},
        )
    return principal


async def hold_state(request: Request) -> Response:
    """``GET .../namespaces/{namespace}/ledger/holds/{hold}``."""
    server: APIServer = request.app.state.server
    if request.method != "GET":
        raise method_not_allowed(request.method.lower(), "ledger/holds")
    request.scope["state"]["metrics"] = ("get", "ledger/holds")
    _admin_only(server, request)
    return respond(await _state(server, request.path_params["namespace"], request.path_params["hold"]))


async def postings(request: Request) -> Response:
    """``POST .../namespaces/{namespace}/ledger/postings``."""
    server: APIServer = request.app.state.server
    if request.method != "POST":
        raise method_not_allowed(request.method.lower(), "ledger/postings")
    request.scope["state"]["metrics"] = ("create", "ledger/postings")
    principal = _admin_only(server, request)
    project = request.path_params["namespace"]
    body = _object(await request.body())
    operation, key, hold_id = str(body.get("operation") or ""), _text(body, "key"), _text(body, "hold")
    try:
        if operation in ("Hold", "Extend"):
            amount = _amount(body, "amountUSD")
            cap = _amount(body, "capUSD") if body.get("capUSD") is not None else None
            await ledger.hold(
                server.storage,
                project,
                hold_id,
                amount,
                key,
                subject=str(body.get("subject") or ""),
                extend=operation == "Extend",
                cap=cap,
            )
        elif operation in ("Capture", "Cover", "Refund"):
            charge = _charge(body, covered=operation == "Cover")
            if operation == "Capture":
                await ledger.capture(server.storage, project, hold_id, charge, key)
            elif operation == "Cover":
                await ledger.cover(server.storage, project, hold_id, charge, key)
            else:
                await ledger.refund(server.storage, project, hold_id, charge, key)
        elif operation == "Release":
            await ledger.release(server.storage, project, hold_id, key)
        else:
            raise bad_request(
                f'operation must be Hold, Extend, Capture, Cover, Refund or Release, not "{operation}"',
                fix="Send one of the operations listed in nodus/api/http/billing.py.",
            )
    except Overdrawn as exc:
        raise _insufficient(project, exc) from None
    except CapExceeded as exc:
        raise APIError(
            "MaxCostReached",
            f"the Job has {money.text(exc.committed)} USD charged and held; {money.text(exc.change)} USD more "
            f"would pass its maxCostUSD of {money.text(exc.cap)}",
            fix='Raise spec.maxCostUSD (kubectl patch job NAME --type merge -p \'{"spec":{"maxCostUSD":"..."}}\'); '
            "the Job resumes by itself.",
            details={"name": project, "group": GROUP, "kind": "jobs"},
        ) from None
    except KeyReused as exc:
        raise APIError("Conflict", str(exc), fix="Use a new key for a new movement.") from None
    except HoldSettled as exc:
        raise APIError("Conflict", str(exc), fix="Open a new hold; a settled hold takes no more movements.") from None
    except money.InvalidAmount as exc:
        raise bad_request(str(exc)) from None
    # The Project's status.credits is a display copy of the ledger, brought up to date after each movement:
    # once the answer is sent, so that the copy's write is not on the critical path of a Job's start.
    ctx = RequestContext(principal=principal, request_id=request_id(request), field_manager=FIELD_MANAGER)
    response = respond(await _state(server, project, hold_id), status=201)
    response.background = BackgroundTask(_show_credits, server, project, ctx)
    return response


async def _show_credits(server: APIServer, project: str, ctx: RequestContext) -> None:
    try:
        await credits.show(server.stores["projects"], server.storage, project, ctx)
    except Exception:  # the next movement writes it again; verify reports a copy that lags
        log.warning("project %s: status.credits could not be brought up to date", project, exc_info=True)


def _insufficient(project: str, exc: Overdrawn) -> APIError:
    need = -exc.change
    return APIError(
        "InsufficientCredits",
        f"project {project} has {money.text(exc.balance)} USD {exc.account} credit; this needs {money.text(need)} USD",
        fix=f"An administrator: nodus credits grant {project} AMOUNT (at least {money.text(need - exc.balance)} "
        "more), or lower what runs at once.",
        details={"name": project, "group": GROUP, "kind": "projects"},
    )


async def _state(server: APIServer, project: str, hold_id: str) -> dict[str, Any]:
    hold = await tables.hold(server.storage, hold_id)
    charged = await tables.charged(server.storage, hold_id)
    figures = await ledger.credits(server.storage, project)
    out: dict[str, Any] = {
        "kind": "LedgerHold",
        "apiVersion": API_VERSION,
        "project": project,
        "hold": hold_id,
        "exists": hold is not None,
        "chargedUSD": {s: money.text(charged[s]) for s in SEGMENTS if s in charged},
        "coveredUSD": {s: money.text(charged[f"covered:{s}"]) for s in SEGMENTS if f"covered:{s}" in charged},
        "credits": {
            "balanceUSD": money.text(figures["balance"]),
            "heldUSD": money.text(figures["held"]),
            "availableUSD": money.text(figures["available"]),
        },
    }
    if hold is not None:
        out.update(
            amountUSD=money.text(hold.amount),
            capturedUSD=money.text(hold.captured),
            releasedUSD=money.text(hold.released),
            settled=hold.settled,
        )
    return out


def _object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw or b"{}")
    except orjson.JSONDecodeError:
        raise bad_request("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return body


def _text(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value or len(value) > 300:
        raise bad_request(f"{field} must be a non-empty string of at most 300 characters")
    return value


def _amount(body: dict[str, Any], field: str) -> Decimal:
    return money.parse(body.get(field), field)


def _charge(body: dict[str, Any], *, covered: bool) -> Charge:
    segment = str(body.get("segment") or "")
    if segment not in SEGMENTS:
        raise bad_request(f"segment must be one of {', '.join(SEGMENTS)}, not {segment!r}")
    return Charge(
        segment=segment,
        seconds=_seconds(body.get("seconds")),
        rate_per_hour=_amount(body, "rateUSDPerHour"),
        amount=_amount(body, "amountUSD"),
        covered=covered,
    )


def _seconds(value: Any) -> Decimal:
    try:
        seconds = Decimal(str(value))
    except ArithmeticError:
        raise bad_request("seconds must be a decimal number of seconds") from None
    if not seconds.is_finite() or seconds < 0:
        raise bad_request("seconds must be a decimal number of seconds of at least 0")
    return seconds.quantize(Decimal("0.001"))
