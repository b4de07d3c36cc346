"""How an upload refused for its size ends on the wire (ADR 0034).

The limits themselves (``--max-blob-size``, ``--project-storage-quota``) and their Statuses are
:class:`~nodus.api.blobservice.Blobs`'; here is what only HTTP has. The declared size is the request's
``Content-Length``, checked before the body is read. A refusal for size closes the connection, and a moment
later the connection is cut (:func:`stop_reading`): a TLS close waits for the client's own, reading whatever
the client still sends until then, and a client that is not listening would go on sending its whole body.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request

from nodus.api.errors import bad_request

_CUT_CHECKS = 100
_CUT_EVERY = 0.01


def declared_size(request: Request) -> int | None:
    """The request's ``Content-Length`` (None: not declared, a chunked body)."""
    value = request.headers.get("content-length")
    if value is None:
        return None
    if not value.strip().isdigit():
        raise bad_request(f'Content-Length must be a whole number of bytes, got "{value}"')
    return int(value)


def stop_reading(request: Request) -> None:
    """Cut the request's connection once its refusal has been written, so that the rest of the body is never
    read (see the module docstring). uvicorn starts closing a ``Connection: close`` connection as soon as the
    answer is written; that is the moment to cut it. The transport is the connection's, recorded per
    connection by ``nodus.cli.serving``; without one (an in-process client) nothing happens."""
    transport = request.scope.get("state", {}).get("transport")
    if transport is None:
        return
    loop = asyncio.get_running_loop()

    def cut(checks: int) -> None:
        if transport.is_closing() or checks >= _CUT_CHECKS:
            transport.abort()
        else:
            loop.call_later(_CUT_EVERY, cut, checks + 1)

    loop.call_soon(cut, 0)
