"""Rendering objects and errors as HTTP responses."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import yaml
from starlette.requests import Request
from starlette.responses import Response

from nodus.api.errors import APIError
from nodus.api.negotiation import Representation

log = logging.getLogger("nodus.api")


def request_id(request: Request) -> str:
    return str(request.scope.get("state", {}).get("request_id", ""))


def docs_base(request: Request) -> str:
    external = request.app.state.server.settings.external_url
    return external.rstrip("/") if external else str(request.base_url).rstrip("/")


def warning_headers(warnings: list[str]) -> list[tuple[str, str]]:
    out = []
    for message in warnings:
        escaped = message.replace("\\", "\\\\").replace('"', '\\"')
        out.append(("warning", f'299 - "{escaped}"'))
    return out


def respond(
    body: Any,
    status: int = 200,
    representation: Representation = "json",
    warnings: list[str] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    if representation == "yaml":
        content = yaml.safe_dump(body, sort_keys=False).encode()
        media = "application/yaml"
    else:
        content = orjson.dumps(body)
        media = "application/json"
    response = Response(content, status_code=status, media_type=media, headers=headers)
    for key, value in warning_headers(warnings or []):
        response.headers.append(key, value)
    return response


def error_response(request: Request, error: APIError) -> Response:
    rid = request_id(request)
    body = error.status_body(rid, docs_base(request))
    if error.code >= 500:
        log.error("request %s failed: %s %s", rid, error.reason, error.message)
    response = Response(
        orjson.dumps(body), status_code=error.code, media_type="application/json", headers=error.headers
    )
    return response
