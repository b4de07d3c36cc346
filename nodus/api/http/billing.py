"""The ledger's door for Nodus's controllers: hold, extend, capture, cover and release, by key.

Controllers are API clients (they never touch the database), so money moves through here:

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

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from nodus.api import credits
from nodus.api.auth.nodes import Attributes
from nodus.api.auth.principal import Principal
from nodus.api.context import RequestContext
from nodus.api.errors import APIError, bad_request, method_not_allowed, not_found
from nodus.api.http.authentication import authenticate
from nodus.api.http.lists import ClosingStreamingResponse
from nodus.api.http.responses import request_id, respond
from nodus.api.registry import API_VERSION, GROUP
from nodus.api.server import APIServer
from nodus.apimachinery import units
from nodus.billing import budgets, checking, ledger, money
from nodus.storage import ledger as tables
from nodus.storage.budgets import BudgetExceeded, BudgetLimit
from nodus.storage.errors import Key
from nodus.storage.ledger import CapExceeded, Charge, HoldSettled, KeyReused, Overdrawn

log = logging.getLogger(__name__)

SEGMENTS = ("Boot", "Running", "Restore", "Teardown")
# Post-paid segments, charged without a hold (operation Charge), and the key prefix of each.
POST_PAID = {"Storage": "storage"}
FIELD_MANAGER = "nodus-billing"
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
    return respond(await _state(server, request.path_params["namespace"], request.path_params["hold"]))


async def budget_state(request: Request) -> Response:
    """``GET .../namespaces/{namespace}/ledger/budgets/{budget}``."""
    server = await _admin_get(request, "budgets")
    project, name = request.path_params["namespace"], request.path_params["budget"]
    budget = await server.storage.get(Key(budgets.KIND, project, name))
    if budget is None:
        raise not_found("budgets", GROUP, name)
    limit, figures = await budgets.standing(server.storage, budget, units.now())
    room = budgets.room(limit, figures)
    out: dict[str, Any] = {
        "kind": "LedgerBudget",
        "apiVersion": API_VERSION,
        "project": project,
        "budget": name,
        "uid": limit.uid,
        "period": str((budget.get("spec") or {}).get("period") or budgets.DEFAULT_PERIOD),
        "limitUSD": money.text(limit.limit),
        "spentUSD": money.text(figures.spent),
        "heldUSD": money.text(figures.held),
        "committedUSD": money.text(figures.committed),
        "remainingUSD": money.text(room.remaining),
    }
    if limit.start is not None and limit.end is not None:
        out.update(periodStart=units.format_time(limit.start), periodEnd=units.format_time(limit.end))
    return respond(out)


async def storage_state(request: Request) -> Response:
    """``GET .../namespaces/{namespace}/ledger/storage/{subject}``."""
    server = await _admin_get(request, "storage")
    return respond(await _storage(server, request.path_params["namespace"], request.path_params["subject"]))


async def verification(request: Request) -> Response:
    """``GET /apis/nodus.dev/v1/ledger/verify``: administrators only."""
    server = await _administrators_read(request, "verify")
    found = await checking.breaches(server.storage)
    return respond(
        {
            "kind": "LedgerVerification",
            "apiVersion": API_VERSION,
            "sound": not found,
            "breaches": [{"invariant": breach.invariant, "message": breach.detail} for breach in found],
        }
    )


_BEGINNING = datetime(1970, 1, 1, tzinfo=UTC)
# Lines per write to the connection: a statement of a busy month is many thousands.
_LINES_PER_CHUNK = 200


async def statement(request: Request) -> Response:
    """``GET .../namespaces/{namespace}/ledger/statement``: administrators only."""
    server = await _administrators_read(request, "statement")
    project = request.path_params["namespace"]
    start = _time_parameter(request, "start") or _BEGINNING
    end = _time_parameter(request, "end") or units.now()
    lines = tables.statement(server.storage, project, start, end)
    resources = contextlib.AsyncExitStack()
    resources.push_async_callback(lines.aclose)  # the cursor's connection, however the stream ends
    try:
        # The first line is read before the answer starts, so that a database that cannot be reached is a 503
        # Status, not a 200 cut short.
        first = await anext(lines, None)
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
            chunk = [orjson.dumps(checking.wire(first)) + b"\n"]
            async for line in lines:
                chunk.append(b"," + orjson.dumps(checking.wire(line)) + b"\n")
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
    """``POST .../namespaces/{namespace}/ledger/postings``."""
    server: APIServer = request.app.state.server
    if request.method != "POST":
        raise method_not_allowed(request.method.lower(), "ledger/postings")
    request.scope["state"]["metrics"] = ("create", "ledger/postings")
    principal = await _nodus_only(server, request, "create", "postings")
    project = request.path_params["namespace"]
    body = _object(await request.body())
    operation, key = str(body.get("operation") or ""), _text(body, "key")
    hold_id = _text(body, "hold") if operation != "Charge" else ""
    subject = _text(body, "subject") if operation == "Charge" else ""
    try:
        if operation in ("Hold", "Extend"):
            amount = _amount(body, "amountUSD")
            cap = _amount(body, "capUSD") if body.get("capUSD") is not None else None
            # The hold's Attempt by name, kept with the Hold: statements name it after it is gone (ADR 0038).
            named = await tables.subject_name(server.storage, hold_id) if operation == "Hold" else ""
            await ledger.hold(
                server.storage,
                project,
                hold_id,
                amount,
                key,
                subject=str(body.get("subject") or ""),
                extend=operation == "Extend",
                cap=cap,
                budgets=await _budgets(server, project, body),
                memo=named,
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
        elif operation == "Charge":
            memo = body.get("memo")
            if memo is not None and (not isinstance(memo, str) or len(memo) > 300):
                raise bad_request("memo must be a string of at most 300 characters")
            await ledger.charge(server.storage, project, subject, _post_paid(body), key, memo or "")
        else:
            raise bad_request(
                f'operation must be Hold, Extend, Capture, Cover, Refund, Release or Charge, not "{operation}"',
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
    except BudgetExceeded as exc:
        raise _over_budget(exc) from None
    except KeyReused as exc:
        raise APIError("Conflict", str(exc), fix="Use a new key for a new movement.") from None
    except HoldSettled as exc:
        raise APIError("Conflict", str(exc), fix="Open a new hold; a settled hold takes no more movements.") from None
    except money.InvalidAmount as exc:
        raise bad_request(str(exc)) from None
    # The Project's status.credits is a display copy of the ledger, brought up to date after each movement:
    # once the answer is sent, so that the copy's write is not on the critical path of a Job's start.
    ctx = RequestContext(principal=principal, request_id=request_id(request), field_manager=FIELD_MANAGER)
    state = await (_storage(server, project, subject) if operation == "Charge" else _state(server, project, hold_id))
    response = respond(state, status=201)
    response.background = BackgroundTask(_show_credits, server, project, ctx)
    return response


_COPY_TRIES = 20


async def _show_credits(server: APIServer, project: str, ctx: RequestContext) -> None:
    # Movements of one project at once race to write its copy, and the write that lands last may carry
    # figures read before another movement (or be refused: too many concurrent writes). So each writer
    # reads the ledger again after its write and writes again if it moved: whichever lands last, the
    # copy ends equal to the ledger.
    for _ in range(_COPY_TRIES):
        try:
            shown = await credits.show(server.stores["projects"], server.storage, project, ctx)
            if await ledger.credits(server.storage, project) == shown:
                return
        except APIError as exc:
            if exc.reason != "Conflict":
                log.warning("project %s: status.credits could not be brought up to date", project, exc_info=True)
                return
            # Another movement's writer landed first; a jittered pause lets a burst of them drain (many Jobs of
            # one project losing hosts at once) instead of every writer giving up together.
            await asyncio.sleep(random.uniform(0.01, 0.05))
        except Exception:  # the next movement writes it again; verify reports a copy that lags
            log.warning("project %s: status.credits could not be brought up to date", project, exc_info=True)
            return
    log.warning("project %s: status.credits could not be brought up to date: too many concurrent writes", project)


def _insufficient(project: str, exc: Overdrawn) -> APIError:
    need = -exc.change
    return APIError(
        "InsufficientCredits",
        f"project {project} has {money.text(exc.balance)} USD {exc.account} credit; this needs {money.text(need)} USD",
        fix=f"An administrator: nodus credits grant {project} AMOUNT (at least {money.text(need - exc.balance)} "
        "more), or lower what runs at once.",
        details={"name": project, "group": GROUP, "kind": "projects"},
    )


async def _budgets(server: APIServer, project: str, body: dict[str, Any]) -> tuple[BudgetLimit, ...] | None:
    """The Budgets the posting's Job (``job``) matches now; None without ``job`` or when the Job is gone
    (or is another Job of that name than the hold's ``subject``): then no Budget is checked."""
    name = body.get("job")
    if name is None:
        return None
    if not isinstance(name, str) or not name or len(name) > 253:
        raise bad_request("job must be the name of the hold's Job, a non-empty string of at most 253 characters")
    job = await server.storage.get(Key("Job", project, name))
    subject = body.get("subject")
    if job is None or (subject and job["metadata"].get("uid") != subject):
        return None
    labels = job["metadata"].get("labels") or {}
    return budgets.matching(await budgets.of_project(server.storage, project), labels, units.now())


def _over_budget(exc: BudgetExceeded) -> APIError:
    budget, committed, change = exc.budget, exc.committed, exc.change
    if budget.start is not None and budget.end is not None:
        span = f"from {units.format_time(budget.start)} to {units.format_time(budget.end)}"
        wait = f", wait for its period to end at {units.format_time(budget.end)}"
    else:
        span, wait = "in total", ""
    needed = money.text(committed + change)
    patch = f'{{"spec":{{"limitUSD":"{needed}"}}}}'
    return APIError(
        "BudgetExceeded",
        f"Budget {budget.name} allows {money.text(budget.limit)} USD {span}; its Jobs have {money.text(committed)} "
        f"USD charged and held, and this hold needs {money.text(change)} USD more",
        fix=f"Raise spec.limitUSD of Budget {budget.name} to at least {needed} (kubectl patch budget {budget.name} "
        f"--type merge -p '{patch}'){wait}, or lower the Job's parallelism; the Job resumes by itself.",
        details={"name": budget.name, "group": GROUP, "kind": "budgets"},
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


async def _storage(server: APIServer, project: str, subject: str) -> dict[str, Any]:
    charged = await tables.numbered_charges(server.storage, subject, "Storage")
    figures = await ledger.credits(server.storage, project)
    out: dict[str, Any] = {
        "kind": "LedgerStorage",
        "apiVersion": API_VERSION,
        "project": project,
        "subject": subject,
        "price": server.price_book.storage.wire(server.price_book.version),
        "chargedUSD": money.text(charged.amount),
        "hours": charged.count,
        "credits": {
            "balanceUSD": money.text(figures["balance"]),
            "heldUSD": money.text(figures["held"]),
            "availableUSD": money.text(figures["available"]),
        },
    }
    if charged.last is not None:
        out["lastHour"] = charged.last
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


def _post_paid(body: dict[str, Any]) -> Charge:
    """A Charge's charge: a post-paid segment, keyed ``<prefix>:<subject>:<n>``, its amount exactly its
    rate for its seconds (rounded half-up once, as every charge)."""
    segment = str(body.get("segment") or "")
    if segment not in POST_PAID:
        raise bad_request(f"segment of a Charge must be one of {', '.join(POST_PAID)}, not {segment!r}")
    prefix = f"{POST_PAID[segment]}:{body['subject']}:"
    number = str(body["key"]).removeprefix(prefix)
    if not str(body["key"]).startswith(prefix) or not (number.isascii() and number.isdigit()) or len(number) > 18:
        raise bad_request(f"the key of a {segment} Charge must be {prefix}<n>, n a whole number, not {body['key']!r}")
    seconds, rate, amount = _seconds(body.get("seconds")), _amount(body, "rateUSDPerHour"), _amount(body, "amountUSD")
    if amount != money.charge(rate, seconds):
        exact = money.text(money.charge(rate, seconds))
        raise bad_request(f"amountUSD {money.text(amount)} is not rateUSDPerHour x seconds / 3600 = {exact}")
    return Charge(segment=segment, seconds=seconds, rate_per_hour=rate, amount=amount)


def _seconds(value: Any) -> Decimal:
    try:
        seconds = Decimal(str(value))
    except ArithmeticError:
        raise bad_request("seconds must be a decimal number of seconds") from None
    if not seconds.is_finite() or seconds < 0:
        raise bad_request("seconds must be a decimal number of seconds of at least 0")
    return seconds.quantize(Decimal("0.001"))
