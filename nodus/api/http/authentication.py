"""Authenticating a request: the front-proxy headers on a verified connection, else a bearer token, else the
web console's session cookie.

A bearer token is tried as a static token (``--token-auth-file``), then as a node credential, then as
a bootstrap token (ADR 0035); the formats do not overlap, so at most one can match.

The ``nodus-session`` cookie (ADR 0053) authenticates as the principal its session was created for. A
browser sends it on every request to this origin, so a request it authenticates whose method may change
something must also carry the session's CSRF token in ``X-CSRF-Token`` (403 otherwise, before anything
is read or written); a request authenticated by a bearer token or the front proxy needs none.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from nodus.api.auth import requestheader
from nodus.api.auth.principal import Principal
from nodus.api.consolesessions import COOKIE, CSRF_HEADER, ConsoleSessions, Session
from nodus.api.errors import APIError
from nodus.api.server import APIServer


@dataclass(frozen=True)
class Authenticated:
    """Who made a request, and the console session that vouched for them (None: another credential)."""

    principal: Principal
    session: Session | None = None


async def authenticate(server: APIServer, request: Request) -> Principal:
    """The caller, or a 401 Status; a cookie-authenticated unsafe request without its CSRF token is 403."""
    return (await authenticated(server, request)).principal


async def authenticated(server: APIServer, request: Request) -> Authenticated:
    """As :func:`authenticate`, also telling whether the console's session cookie authenticated the caller."""
    config = server.settings.requestheader
    if config is not None:
        peer = request.scope.get("state", {}).get("peer_certificate")
        principal = requestheader.authenticate(config, peer, request.scope["headers"])
        if principal is not None:
            return Authenticated(principal)
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        principal = await principal_for_token(server, token)
        if principal is not None:
            return Authenticated(principal)
    cookie = request.cookies.get(COOKIE)
    if cookie:
        session = await server.console_sessions.authenticate(cookie)
        if session is not None:
            ConsoleSessions.check_csrf(session, request.method, request.headers.get(CSRF_HEADER))
            return Authenticated(session.principal, session)
        raise APIError(
            "Unauthorized",
            "Unauthorized: the console session has ended (logged out or expired)",
            fix="Log in again at /console/login, or run `nodus console` for a one-time login link.",
        )
    raise APIError("Unauthorized", "Unauthorized")


async def principal_for_token(server: APIServer, token: str) -> Principal | None:
    """The principal a bearer token authenticates (static token, node credential, bootstrap token), or None."""
    principal = server.tokens.authenticate(token)
    if principal is None:
        principal = await server.node_credentials.authenticate(token)
    if principal is None:
        principal = await server.bootstrap_tokens.authenticate(token)
    return principal
