"""Authenticating a request: the front-proxy headers on a verified connection, else a bearer token."""

from __future__ import annotations

from starlette.requests import Request

from nodus.api.auth import requestheader
from nodus.api.auth.principal import Principal
from nodus.api.errors import APIError
from nodus.api.server import APIServer


def authenticate(server: APIServer, request: Request) -> Principal:
    config = server.settings.requestheader
    if config is not None:
        peer = request.scope.get("state", {}).get("peer_certificate")
        principal = requestheader.authenticate(config, peer, request.scope["headers"])
        if principal is not None:
            return principal
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        principal = server.tokens.authenticate(token.strip())
        if principal is not None:
            return principal
    raise APIError("Unauthorized", "Unauthorized")
