"""Long-lived HTTP responses (watches, followed logs): the body runs until it ends or the client leaves.

The body and a listener for ``http.disconnect`` race; whichever ends first cancels the other, so a
client that goes away stops the work behind its stream at once. A body that fails is logged (the
status line has gone out, so there is no error response to give); the stream is then closed
cleanly if the client is still there.

Each stream holds memory, a connection and a task for as long as it lasts, so one user may hold only
so many at once on one API server process (:class:`StreamLimits`, ADR 0033): the next one is a 429
``TooManyRequests`` with ``Retry-After``, as kube-apiserver answers a client over its share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from nodus.api.auth.principal import Principal
from nodus.api.errors import APIError

log = logging.getLogger("nodus.api.http")

StreamKind = Literal["watch", "follow"]
# What a client told to wait is told: a slot frees only when one of its streams ends.
RETRY_AFTER_SECONDS = 5
_FLAGS = {"watch": "--max-watches-per-user", "follow": "--max-log-follows-per-user"}
_NAMES = {"watch": "watches", "follow": "followed logs"}
_FIXES = {
    "watch": "Close watches you no longer need (each `kubectl get -w` and each informer holds one) and retry after "
    "Retry-After seconds, or ask the operator to raise --max-watches-per-user.",
    "follow": "Stop following logs you no longer read (`nodus logs -f`, `kubectl logs -f`) and retry after "
    "Retry-After seconds, or ask the operator to raise --max-log-follows-per-user.",
}


def limits(request: Any) -> StreamLimits:
    """The process's stream limits (``app.state.streams``, set by ``create_app``)."""
    return request.app.state.streams  # type: ignore[no-any-return]


@dataclass
class Slot:
    """One stream's place under its user's cap; :meth:`release` when the stream ends (idempotent)."""

    limits: StreamLimits | None
    key: tuple[StreamKind, str]
    released: bool = False

    def release(self) -> None:
        if not self.released and self.limits is not None:
            self.limits.open[self.key] -= 1
            if self.limits.open[self.key] <= 0:
                del self.limits.open[self.key]
        self.released = True


@dataclass
class StreamLimits:
    """Per-user caps on concurrent watches and followed logs in one API server process (0: no cap).

    Counted per user name, in memory: a user's streams on another API server process count there. Administrators
    (system:masters) are not counted: the controllers' and agents' watches must never be refused, and
    kube-apiserver's priority and fairness exempts the same group."""

    watches: int
    follows: int
    open: Counter[tuple[StreamKind, str]] = field(default_factory=Counter)

    def acquire(self, principal: Principal, kind: StreamKind) -> Slot:
        """A slot for one more stream of ``kind``, or a 429 Status naming the cap and the fix."""
        cap = self.watches if kind == "watch" else self.follows
        if principal.is_admin or cap <= 0:
            return Slot(None, (kind, principal.user))
        key = (kind, principal.user)
        if self.open[key] >= cap:
            raise APIError(
                "TooManyRequests",
                f'user "{principal.user}" has {self.open[key]} {_NAMES[kind]} open on this API server, the most '
                f"one user may have ({_FLAGS[kind]}={cap})",
                fix=_FIXES[kind],
                details={"retryAfterSeconds": RETRY_AFTER_SECONDS},
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
        self.open[key] += 1
        return Slot(self, key)


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
