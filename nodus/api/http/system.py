"""Health, version, metrics and the reason docs pages.

``/livez``, ``/healthz``, ``/readyz`` and ``/version`` answer anyone: load balancers and probes call
them without credentials, and they say no more than "ok". ``/metrics`` and ``/readyz?verbose`` tell
what the server is doing (request rates by resource, watchers, which check fails), so they need an
authenticated caller in the group ``system:monitoring`` or an administrator, as kube-apiserver's
default RBAC grants ``/metrics`` to ``system:monitoring`` only (401 without credentials, 403 for
anyone else).
"""

from __future__ import annotations

from html import escape

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from nodus.api import reasons
from nodus.api.auth.principal import MONITORING_GROUP
from nodus.api.errors import APIError
from nodus.api.http.authentication import authenticate
from nodus.api.http.discovery import version
from nodus.api.http.responses import respond
from nodus.api.server import APIServer


def get_version(_: Request) -> Response:
    return respond(version())


def livez(_: Request) -> Response:
    return PlainTextResponse("ok")


async def _monitoring(request: Request) -> None:
    """401 without credentials, 403 unless the caller is in ``system:monitoring`` or an administrator."""
    principal = await authenticate(request.app.state.server, request)
    if principal.is_admin or MONITORING_GROUP in principal.groups:
        return
    raise APIError(
        "Forbidden",
        f'forbidden: User "{principal.user}" cannot get path "{request.url.path}"',
        fix=f"Reading {request.url.path} needs the group {MONITORING_GROUP} (or system:masters): give the caller "
        "that group in the token file (or from the front proxy).",
    )


async def readyz(request: Request) -> Response:
    server: APIServer = request.app.state.server
    verbose = request.query_params.get("verbose") is not None
    if verbose:
        await _monitoring(request)
    checks = {"storage": await server.storage_reachable(), "watch-cache": server.ready}
    ok = all(checks.values())
    if verbose or not ok:
        lines = [f"[{'+' if good else '-'}]{name} {'ok' if good else 'failed'}" for name, good in checks.items()]
        text = "\n".join(lines) + ("\nreadyz check passed\n" if ok else "\nreadyz check failed\n")
        return PlainTextResponse(text, status_code=200 if ok else 503)
    return PlainTextResponse("ok")


async def metrics(request: Request) -> Response:
    await _monitoring(request)
    server: APIServer = request.app.state.server
    server.observe_storage()
    return Response(generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST)


_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:46rem;margin:2rem auto;line-height:1.5}}
code{{background:#f3f3f3;padding:0 .2rem}}</style></head><body>{body}</body></html>"""


def reason_page(request: Request) -> Response:
    code = request.path_params["code"]
    try:
        entry = reasons.reason(code)
    except KeyError:
        raise APIError(
            "NotFound", f'no reason code "{code}" is registered', fix="See /docs/reasons for every code."
        ) from None
    body = (
        f"<h1>{escape(entry.code)}</h1><p><strong>{_kind(entry.http_status)}.</strong> {escape(entry.summary)}</p>"
        f"<h2>What happened</h2><p>{escape(entry.explanation)}</p><h2>How to fix it</h2><p>{escape(entry.fix)}</p>"
        '<p><a href="/docs/reasons">All reason codes</a></p>'
    )
    return HTMLResponse(_PAGE.format(title=f"{entry.code} - Nodus", body=body))


def _kind(http_status: int) -> str:
    """How a code reaches the user: an HTTP error, or a ``status.reason`` a controller writes."""
    return f"HTTP {http_status}" if http_status else "status.reason"


def reasons_index(_: Request) -> Response:
    items = "".join(
        f'<li><a href="/docs/reasons/{escape(r.code)}">{escape(r.code)}</a> ({_kind(r.http_status)}): '
        f"{escape(r.summary)}</li>"
        for r in reasons.all_reasons()
    )
    return HTMLResponse(_PAGE.format(title="Nodus reason codes", body=f"<h1>Reason codes</h1><ul>{items}</ul>"))
