"""The web console's server-rendered pieces: the login page, its redirects, and the headers of every
``/console`` response (ADR 0053).

Everything a request supplies that reaches a page (a ``next`` path, a reason naming a user) is
HTML-escaped; a ``next`` path is kept only when it is a path under ``/console/`` (so a login link can
never send the browser to another site), and the login page's form posts only to this origin.
"""

from __future__ import annotations

import re
from html import escape
from urllib.parse import unquote, urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nodus.api.consoleassets import ConsoleAssets
from nodus.api.consolesessions import COOKIE, NewSession

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
CONSOLE_HOME = "/console/"
AFTER_CODE = "/console/#/projects/default/jobs"
_MAX_NEXT = 2048
# RFC 3986's unreserved and reserved characters, and "%" of percent-encoding.
_URL_CHARACTERS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?#\[\]%]+")


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every response under ``/console`` (errors and 404s included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != "/console" and not path.startswith("/console/"):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)


def safe_next(value: str | None) -> str | None:
    """``value`` when it is a path under ``/console/`` on this origin, else None.

    Refused: anything not starting with ``/console/``; a scheme or authority in any spelling (``//``,
    backslashes, which browsers read as slashes); ``..`` even percent-encoded; any character a URL does
    not carry as it is (control characters, spaces, quotes, angle brackets, non-ASCII)."""
    if not value or len(value) > _MAX_NEXT or not value.startswith(CONSOLE_HOME):
        return None
    if not _URL_CHARACTERS.fullmatch(value):
        return None
    decoded = unquote(value)
    if "\\" in decoded or ".." in decoded or "//" in decoded or any(ord(char) < 0x20 for char in decoded):
        return None
    return value


def same_origin(request: Request) -> bool:
    """Whether a browser sent this request from a page of this origin.

    ``Origin`` when the browser names one; a page served with ``Referrer-Policy: no-referrer`` makes the
    browser send ``Origin: null`` on its POSTs, so then the browser's own ``Sec-Fetch-Site: same-origin``
    (which no page can set) or a same-origin ``Referer`` is needed. Anything else (another site, a
    sandboxed frame, no header at all) is refused."""
    host = request.headers.get("host", "").lower()
    if not host:
        return False
    schemes = {"https", request.url.scheme}
    origin = request.headers.get("origin")
    if origin is not None and origin != "null":
        parts = urlsplit(origin)
        return parts.scheme in schemes and parts.netloc.lower() == host and not parts.path.strip("/")
    if request.headers.get("sec-fetch-site") == "same-origin":
        return True
    referer = request.headers.get("referer")
    if referer:
        parts = urlsplit(referer)
        return parts.scheme in schemes and parts.netloc.lower() == host
    return False


def login_page(
    assets: ConsoleAssets, *, status: int = 200, problem: str = "", fix: str = "", next_path: str | None = None
) -> HTMLResponse:
    """The login form; ``problem`` and ``fix`` (escaped here) say why a login failed and what to do."""
    alert = ""
    if problem:
        alert = (
            '<div class="problem" role="alert">'
            f"<p><strong>{escape(problem)}</strong></p>" + (f"<p>{escape(fix)}</p>" if fix else "") + "</div>"
        )
    hidden = f'<input type="hidden" name="next" value="{escape(next_path)}">' if next_path else ""
    icon = f'<link rel="icon" href="{escape(assets.url("favicon.svg"))}">' if assets.has("favicon.svg") else ""
    html = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>Log in · Nodus console</title>
<link rel="stylesheet" href="{escape(assets.url("login.css"))}">
{icon}
</head>
<body>
<main class="login">
<h1>Nodus console</h1>
{alert}
<form method="post" action="/console/login">
<label for="token">Access token</label>
<input id="token" name="token" type="password" autocomplete="off" required spellcheck="false">
{hidden}
<button type="submit">Log in</button>
</form>
<p class="hint">Run <code>nodus console</code> for a one-time login link, or paste the token of your
kubeconfig (<code>users[].user.token</code>).</p>
</main>
</body>
</html>
"""
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


def logged_in(new: NewSession, location: str, max_age: int, onward_page: bool = False) -> Response:
    """303 to ``location`` setting the session cookie (HttpOnly, Secure, SameSite=Strict) for ``max_age`` seconds;
    with ``onward_page``, instead a 200 page that goes on to ``location`` itself (a refresh, and a link)."""
    response: Response
    if onward_page:
        response = HTMLResponse(_onward(location), headers={"Cache-Control": "no-store"})
    else:
        response = RedirectResponse(location, status_code=303, headers={"Cache-Control": "no-store"})
    response.set_cookie(COOKIE, new.cookie, max_age=max_age, path="/", secure=True, httponly=True, samesite="strict")
    return response


def _onward(location: str) -> str:
    target = escape(location)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="0; url={target}">
<title>Logged in · Nodus console</title>
</head>
<body>
<main>
<p>You are logged in. <a href="{target}">Continue to the console</a>.</p>
</main>
</body>
</html>
"""


def clear_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/", secure=True, httponly=True, samesite="strict")
