"""Rendering objects and errors as HTTP responses.

Warning headers carry text a client chose (an unknown field's name), so they are made safe to send
(ADR 0033): each is a quoted warn-text (RFC 7234 section 5.5) of printable ASCII only, with any
other character written as ``\\uXXXX`` (``\\UXXXXXXXX`` beyond the Basic Multilingual Plane), and
the whole set is bounded as kube-apiserver bounds it, so that no request can make a response's
headers unencodable (a 500 after a successful write) or unbounded.
"""

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


# kube-apiserver's bounds on a response's warnings: past 4096 characters in all, each is cut to 256 and no
# more are added once 4096 are written.
WARNINGS_TOTAL = 4096
WARNING_CUT = 256


def ascii_text(text: str) -> str:
    """``text`` with every character outside printable ASCII, and the backslash, written as an escape."""
    out = []
    for char in text:
        code = ord(char)
        if char == "\\":
            out.append("\\\\")
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def warning_headers(warnings: list[str]) -> list[tuple[str, str]]:
    """``Warning: 299 - "<text>"`` headers for ``warnings``: printable ASCII (:func:`ascii_text`), quoted
    with ``\\"`` and ``\\\\`` as clients unquote them, and bounded as kube-apiserver bounds them (a last
    warning counts those left out)."""
    texts = [ascii_text(message) for message in warnings]
    if sum(len(text) for text in texts) > WARNINGS_TOTAL:
        kept: list[str] = []
        written = 0
        for text in texts:
            if written >= WARNINGS_TOTAL:
                kept.append(f"{len(texts) - len(kept)} more warnings not shown")
                break
            kept.append(text[:WARNING_CUT])
            written += len(kept[-1])
        texts = kept
    out = []
    for text in texts:
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
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
    response_class = _CuttingResponse if error.headers.get("Connection") == "close" else Response
    return response_class(
        orjson.dumps(body), status_code=error.code, media_type="application/json", headers=error.headers
    )


class _CuttingResponse(Response):
    """An error response after which the connection is reset: the client is still sending a body the
    server will not read (``Connection: close``). A close alone would not stop it: a TLS connection that
    closes waits for the client's close_notify, reading and discarding whatever arrives until then (a
    client can push hundreds of megabytes a second through it). The response is written before the
    reset on the same stream, so the client reads it before it sees the reset."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await super().__call__(scope, receive, send)
        transport = scope.get("state", {}).get("transport")
        if transport is not None:
            transport.abort()
