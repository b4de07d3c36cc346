"""Decoding a watch stream: one JSON event per line, ``ERROR`` events raised as :class:`APIError`.

A watch ends normally when the server's ``timeoutSeconds`` passes; the caller then watches again
from the last resourceVersion it saw (a BOOKMARK carries one even when nothing changed). An
``ERROR`` event with code 410 (``Expired``) raises :class:`Gone`: the caller must list again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from nodus.client import errors

EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


@dataclass(frozen=True)
class WatchEvent:
    """One change: ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK (the object then carries only
    ``metadata.resourceVersion``)."""

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


def decode(line: bytes) -> WatchEvent:
    """The event on one line of a watch; raises the error an ``ERROR`` event carries."""
    value = orjson.loads(line)
    if not isinstance(value, dict) or not isinstance(value.get("object"), dict):
        raise ValueError(f"not a watch event: {line[:200]!r}")
    kind = value.get("type")
    if kind == "ERROR":
        raise errors.from_status(value["object"])
    if kind not in EVENT_TYPES:
        raise ValueError(f"unknown watch event type {kind!r}")
    return WatchEvent(str(kind), value["object"])


async def events(response: httpx.Response) -> AsyncIterator[WatchEvent]:
    """The events of a streaming watch response, until the server ends the stream."""
    async for line in lines(response):
        if line.strip():
            yield decode(line)


async def lines(response: httpx.Response) -> AsyncIterator[bytes]:
    """Newline-separated byte lines of a streaming response (without the newline)."""
    pending = b""
    async for chunk in response.aiter_bytes():
        pending += chunk
        if b"\n" not in pending:
            continue
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line
    if pending:
        yield pending
