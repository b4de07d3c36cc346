"""A project's spend per UTC day over HTTP, for members (the console's projects and credits pages; ADR 0054).

``GET /apis/nodus.dev/v1/namespaces/{project}/ledger/spend?days=N`` (N from 1 to 366, default 30) answers::

    {"kind": "ProjectSpend", "apiVersion": "nodus.dev/v1", "project": "demo",
     "days": [{"date": "2026-11-04", "chargedUSD": "0.00"}, ..., {"date": "2026-12-03", "chargedUSD": "1.25"}],
     "monthToDateUSD": "3.50"}

``days`` lists the N UTC days ending today, oldest first, each with what the project was charged that day
(:mod:`nodus.billing.spending`: captures, post-paid charges, refunds negative; covered time is not spend);
``monthToDateUSD`` is the sum since the first of the current UTC month, whatever N is.

Authorization: whoever may ``get`` the project (a Viewer or more, administrators), asked of the server's
authorizer for the Project itself, as a project's credits are: spend is a figure about the project, not about
any one Job. Members read only these aggregates; the ledger's entries and statement stay with administrators.
A ``days`` that is not an integer from 1 to 366 is a 422 ``Invalid`` Status naming the parameter.
"""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from nodus.api.errors import APIError, method_not_allowed
from nodus.api.http.authentication import authenticate
from nodus.api.http.responses import respond
from nodus.api.registry import API_VERSION, GROUP
from nodus.api.server import APIServer
from nodus.billing import money, spending

KIND = "ProjectSpend"
DEFAULT_DAYS = 30
_RESOURCE = "ledger/spend"


def days_param(raw: str | None) -> int:
    """The ``days`` query parameter: :data:`DEFAULT_DAYS` when absent; a 422 Status unless 1 to 366."""
    if raw is None:
        return DEFAULT_DAYS
    text = raw.strip()
    value = int(text) if text.isascii() and text.isdigit() and len(text) <= 4 else 0
    if 1 <= value <= spending.MAX_DAYS:
        return value
    message = f'days must be a whole number of days from 1 to {spending.MAX_DAYS}, got "{raw[:40]}"'
    raise APIError(
        "Invalid",
        f"the query parameter days is invalid: {message}",
        fix=f"Pass days=N with N from 1 to {spending.MAX_DAYS} (the UTC days ending today), or leave it out for "
        f"{DEFAULT_DAYS}.",
        details={
            "group": GROUP,
            "kind": KIND,
            "causes": [{"reason": "FieldValueInvalid", "message": message, "field": "days"}],
        },
    )


async def project_spend(request: Request) -> Response:
    """``GET /apis/nodus.dev/v1/namespaces/{namespace}/ledger/spend?days=N``."""
    server: APIServer = request.app.state.server
    principal = await authenticate(server, request)
    if request.method != "GET":
        raise method_not_allowed(request.method.lower(), _RESOURCE)
    request.scope["state"]["metrics"] = ("get", _RESOURCE)
    project = request.path_params["namespace"]
    projects = server.registry.by_plural("projects")
    assert projects is not None
    await server.authorizer.authorize(principal, "get", projects, None, project)
    days = days_param(request.query_params.get("days"))
    await server.stores[projects.plural].get(None, project)  # a 404 Status for a project that does not exist
    spent = await spending.project_spend(server.storage, project, days, datetime.now(UTC))
    return respond(
        {
            "kind": KIND,
            "apiVersion": API_VERSION,
            "project": project,
            "days": [{"date": day.isoformat(), "chargedUSD": money.text(amount)} for day, amount in spent.days],
            "monthToDateUSD": money.text(spent.month_to_date),
        }
    )
