"""Authenticating a request: the front-proxy headers on a verified connection, else a bearer token.

A bearer token is tried as a static token (``--token-auth-file``), then as a node credential, then as
a bootstrap token (ADR 0035); the formats do not overlap, so at most one can match.
"""

from __future__ import annotations

from starlette.requests import Request

from nodus.api.auth import requestheader
from nodus.api.auth.principal import Principal
from nodus.api.errors import APIError
from nodus.api.server import APIServer


async def authenticate(server: APIServer, request: Request) -> Principal:
    config = server.settings.requestheader
    if config is not None:
        peer = request.scope.get("state", {}).get("peer_certificate")
        principal = requestheader.authenticate(config, peer, request.scope["headers"])
        if principal is not None:
            return principal
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        principal = server.tokens.authenticate(token)
        if principal is None:
            principal = await server.node_credentials.authenticate(token)
        if principal is None:
            principal = await server.bootstrap_tokens.authenticate(token)
        if principal is not None:
            return principal
    raise APIError("Unauthorized", "Unauthorized")
