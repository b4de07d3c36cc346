"""Reading request bodies with the size cap enforced while reading, then decoding them off the event loop.

``await request.body()`` buffers whatever the client sends. Here the cap is checked twice (ADR 0033):
a ``Content-Length`` above it is refused before a byte of the body is read, and a body without one
(chunked) is cut off as soon as the bytes read pass it. The 413 carries ``Connection: close``, so
the server stops reading the rest of the body instead of draining it to keep the connection alive.

Decoding a large body (YAML especially) is CPU work in proportion to its size; above
:data:`INLINE_BYTES` it runs in a worker thread, so that the event loop keeps answering other
requests (health probes included) while it runs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import ClientDisconnect, Request

from nodus.api import decoding
from nodus.api.errors import APIError, bad_request

# Bodies up to this size are decoded on the event loop: a small body decodes in well under a millisecond.
INLINE_BYTES = 64 * 1024


def too_large(size: int | None, limit: int) -> APIError:
    """413 for a body of ``size`` bytes (None: more than ``limit``, unknown how much more)."""
    told = f"is {size} bytes" if size is not None else f"is larger than {limit} bytes"
    return APIError(
        "RequestEntityTooLarge",
        f"the request body {told}; the limit is {limit} bytes",
        fix="Keep objects under 3 MiB: put large data in a Volume or an uploaded blob and name it in the object.",
        # Stop here: without it the server would go on reading (and discarding) the rest of the body.
        headers={"Connection": "close"},
    )


async def read(request: Request, limit: int = decoding.MAX_BODY_BYTES) -> bytes:
    """The whole body, or a 413 Status as soon as it is known to pass ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large(None, limit)
            chunks.append(chunk)
    except ClientDisconnect:  # nobody is left to answer: not a server error
        raise bad_request("the client went away before it sent the whole body") from None
    return b"".join(chunks)


async def decode(request: Request, yaml_allowed: bool) -> tuple[Any, list[str]]:
    """The body read with :func:`read` and decoded with :func:`nodus.api.decoding.decode`."""
    raw = await read(request)
    if len(raw) <= INLINE_BYTES:
        return decoding.decode(raw, yaml_allowed)
    return await asyncio.to_thread(decoding.decode, raw, yaml_allowed)
