"""Long-lived HTTP responses (watches, followed logs): the body runs until it ends or the client leaves.

The body and a listener for ``http.disconnect`` race; whichever ends first cancels the other, so a
client that goes away stops the work behind its stream at once. A body that fails is logged (the
status line has gone out, so there is no error response to give); the stream is then closed
cleanly if the client is still there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("nodus.api.http")


async def stream(
    receive: Any,
    send: Any,
    headers: list[tuple[bytes, bytes]],
    body: Callable[[], Awaitable[None]],
    what: str,
) -> None:
    """Send a 200 with ``headers``, run ``body()`` (which sends the chunks) until it ends or the client leaves."""
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    producing = asyncio.ensure_future(body())
    disconnect = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({producing, disconnect}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        client_left = disconnect.done()
        for task in (producing, disconnect):
            task.cancel()
        for task in (producing, disconnect):
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await task
                except Exception:
                    log.exception("streaming %s failed", what)
    if not client_left:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
