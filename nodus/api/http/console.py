"""The web console's routes: its page and files, logging in and out, the session, login codes, access.

* ``GET /console/`` (and ``/console/index.html``): the console's page, for a logged-in caller; anyone
  else is sent (303) to ``/console/login``.
* ``GET /console/assets/<version>/<path>``: a file of the console's build, cached for a year (immutable);
  any other version, or a path that is not a file of the build, is 404 (``nodus.api.consoleassets``).
* ``GET /console/login``: the form; ``?code=CODE`` redeems a one-time code. ``POST /console/login`` takes
  the form's ``token``, only from a page of this origin. Both answer 303 with the session cookie, or the
  form again with the reason (401, 403). A code link followed from another site gets a page that moves on by
  itself instead of the 303 (the browser would keep the SameSite=Strict cookie off the redirect).
* ``POST /console/logout`` (CSRF header): ends the session server-side and clears the cookie; 204.
* ``GET /console/api/session``: the session's user, groups and CSRF token (the cookie only).
* ``POST /console/api/logincodes``: a one-time login link for the caller, who must authenticate with
  something other than the session cookie (``nodus console`` sends its kubeconfig's token).
* ``GET /console/api/access?project=P``: which writes the caller may make there, each decided by the
  server's authorizer (a refusal is false); 403 when the caller may not even read the project.

The sessions themselves are ``nodus.api.consolesessions`` (ADR 0053).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from nodus.api.consolesessions import COOKIE
from nodus.api.errors import APIError, bad_request
from nodus.api.http import bodies
from nodus.api.http.authentication import authenticate, authenticated, principal_for_token
from nodus.api.http.consolepages import (
    AFTER_CODE,
    CONSOLE_HOME,
    clear_cookie,
    logged_in,
    login_page,
    safe_next,
    same_origin,
)
from nodus.api.http.responses import respond
from nodus.api.server import APIServer
from nodus.apimachinery.units import format_time

FORM_LIMIT = 16 * 1024
_HOST = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")
NO_STORE = {"Cache-Control": "no-store"}


def _server(request: Request) -> APIServer:
    server: APIServer = request.app.state.server
    return server


async def index(request: Request) -> Response:
    server = _server(request)
    try:
        await authenticate(server, request)
    except APIError as exc:
        if exc.code != 401:
            raise
        response = RedirectResponse("/console/login", status_code=303, headers=NO_STORE)
        if COOKIE in request.cookies:
            clear_cookie(response)  # a session that ended: the browser need not send it again
        return response
    page = server.console_assets.index
    if page is None:
        raise APIError(
            "NotFound",
            "the web console's files are not installed on this server (nodus/console/index.html is missing)",
            fix="Install Nodus with its package data (pip install .), then restart the API server.",
        )
    return Response(page, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-cache"})


async def redirect_home(_: Request) -> Response:
    return RedirectResponse(CONSOLE_HOME, status_code=308)


async def asset(request: Request) -> Response:
    assets = _server(request).console_assets
    found = assets.get(str(request.path_params["version"]), str(request.path_params["path"]))
    if found is None:
        raise APIError(
            "NotFound",
            f"no such file in the web console's build (this server serves build {assets.version})",
            fix="Reload the console page: it names the files of the current build.",
        )
    return Response(
        found.content,
        media_type=found.content_type,
        headers={"Cache-Control": "public, max-age=31536000, immutable"},
    )


def _max_age(server: APIServer) -> int:
    return int(server.console_sessions.session_lifetime.total_seconds())


async def login(request: Request) -> Response:
    server = _server(request)
    if request.method == "POST":
        return await _login_with_token(request, server)
    assets = server.console_assets
    next_path = safe_next(request.query_params.get("next"))
    code = request.query_params.get("code")
    if code is None:
        return login_page(assets, next_path=next_path)
    try:
        new = await server.console_sessions.redeem(code)
    except APIError as exc:
        return login_page(assets, status=exc.code, problem=exc.message, fix=exc.fix, next_path=next_path)
    target = next_path or AFTER_CODE
    if request.headers.get("sec-fetch-site") == "cross-site":
        # A link followed from another site (a chat, a webmail): the browser keeps the SameSite=Strict cookie off
        # every request of this navigation, a redirect's included, so a 303 would land on the login page. A
        # page of this origin that moves on by itself starts a navigation of its own, which does carry it.
        return logged_in(new, target, _max_age(server), onward_page=True)
    return logged_in(new, target, _max_age(server))


async def _login_with_token(request: Request, server: APIServer) -> Response:
    assets = server.console_assets
    if not same_origin(request):
        return login_page(
            assets,
            status=403,
            problem="This login was not sent from this console's own login page, so it was refused.",
            fix="Open /console/login on this server and log in there.",
        )
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        return login_page(assets, status=400, problem="The login form was not sent as a form.", fix="Log in again.")
    raw = await bodies.read(request, FORM_LIMIT)
    try:
        fields = parse_qs(raw.decode(), max_num_fields=8)
    except (UnicodeDecodeError, ValueError):
        return login_page(assets, status=400, problem="The login form could not be read.", fix="Log in again.")
    next_path = safe_next((fields.get("next") or [""])[0])
    token = (fields.get("token") or [""])[0].strip()
    principal = await principal_for_token(server, token) if token else None
    if principal is None:
        return login_page(
            assets,
            status=401,
            problem="That token is not valid on this server." if token else "Enter a token to log in.",
            fix="Use the token of your kubeconfig (users[].user.token), or run `nodus console` for a login link.",
            next_path=next_path,
        )
    try:
        new = await server.console_sessions.log_in(principal)
    except APIError as exc:
        return login_page(assets, status=exc.code, problem=exc.message, fix=exc.fix, next_path=next_path)
    return logged_in(new, next_path or CONSOLE_HOME, _max_age(server))


async def logout(request: Request) -> Response:
    server = _server(request)
    caller = await authenticated(server, request)  # a POST: the CSRF token is checked here
    cookie = request.cookies.get(COOKIE)
    if caller.session is None or cookie is None:
        raise bad_request(
            "logging out ends a console session, and this request was not authenticated by one",
            fix="Send the nodus-session cookie (the console does); bearer tokens have no session to end.",
        )
    await server.console_sessions.log_out(cookie)
    response = Response(status_code=204, headers=NO_STORE)
    clear_cookie(response)
    return response


async def session(request: Request) -> Response:
    caller = await authenticated(_server(request), request)
    if caller.session is None:
        raise APIError(
            "Unauthorized",
            "Unauthorized: /console/api/session describes a console session, and none was sent",
            fix="Log in at /console/login (or run `nodus console` for a one-time link).",
        )
    body = {
        "user": caller.principal.user,
        "groups": list(caller.principal.groups),
        "csrfToken": caller.session.csrf_token,
        "expiresAt": format_time(caller.session.expires_at),
    }
    return respond(body, headers=NO_STORE)


def _base_url(request: Request, server: APIServer) -> str:
    """Where the caller reaches this server: ``--external-url``, else the ``Host`` it sent, over HTTPS (the
    server serves TLS itself or sits behind a TLS terminator)."""
    if server.settings.external_url:
        return server.settings.external_url.rstrip("/")
    host = request.headers.get("host", "")
    if not _HOST.fullmatch(host):
        raise bad_request("the Host header does not name a host", fix="Send Host: <host>[:<port>].")
    return f"https://{host}"


async def login_codes(request: Request) -> Response:
    server = _server(request)
    caller = await authenticated(server, request)
    if caller.session is not None:
        raise APIError(
            "Forbidden",
            "forbidden: login codes are issued to a bearer token, not to a console session",
            fix="Run `nodus console` (it authenticates with your kubeconfig).",
        )
    code = await server.console_sessions.issue_code(caller.principal)
    url = f"{_base_url(request, server)}/console/login?code={code.code}"
    body = {"url": url, "expiresAt": format_time(code.expires_at)}
    return respond(body, status=201, headers=NO_STORE)


async def access(request: Request) -> Response:
    server = _server(request)
    principal = await authenticate(server, request)
    project = request.query_params.get("project", "")
    if not project:
        raise bad_request("name a project: /console/api/access?project=NAME")
    projects, jobs = server.registry.by_plural("projects"), server.registry.by_plural("jobs")
    assert projects is not None and jobs is not None
    authorizer = server.authorizer
    seen: dict[str, dict[str, Any] | None] = {}
    await authorizer.authorize(principal, "get", projects, None, project, seen=seen)  # 403: may not read it
    await server.stores["projects"].get(None, project)  # 404 for those who may read every project
    checks = {
        "jobs/create": (jobs, "create", project, None),
        "jobs/update": (jobs, "update", project, None),
        "jobs/delete": (jobs, "delete", project, None),
        "projects/update": (projects, "update", None, project),
    }
    allowed: dict[str, bool] = {}
    for key, (info, verb, namespace, name) in checks.items():
        try:
            await authorizer.authorize(principal, verb, info, namespace, name, seen=seen)
        except APIError as exc:
            if exc.code != 403:
                raise
            allowed[key] = False
        else:
            allowed[key] = True
    return respond({"project": project, "user": principal.user, "allowed": allowed}, headers=NO_STORE)


ROUTES: list[tuple[str, Any, list[str]]] = [
    ("/console", redirect_home, ["GET"]),
    ("/console/", index, ["GET"]),
    ("/console/index.html", index, ["GET"]),
    ("/console/assets/{version}/{path:path}", asset, ["GET"]),
    ("/console/login", login, ["GET", "POST"]),
    ("/console/logout", logout, ["POST"]),
    ("/console/api/session", session, ["GET"]),
    ("/console/api/logincodes", login_codes, ["POST"]),
    ("/console/api/access", access, ["GET"]),
]
"""Every console route: (path, endpoint, methods), registered by ``nodus.api.app``."""
