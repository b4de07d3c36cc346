"""Reading watch streams over HTTP in tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx


async def events(client: httpx.AsyncClient, path: str, **params: Any) -> AsyncIterator[dict[str, Any]]:
    """Yield decoded watch events until the server ends the stream."""
    query = {"watch": "true", **{k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items()}}
    async with client.stream("GET", path, params=query, timeout=httpx.Timeout(30, read=30)) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.strip():
                yield json.loads(line)


async def collect(client: httpx.AsyncClient, path: str, count: int, **params: Any) -> list[dict[str, Any]]:
    """The first ``count`` non-bookmark events of a watch."""
    out: list[dict[str, Any]] = []
    async for event in events(client, path, **params):
        if event["type"] != "BOOKMARK":
            out.append(event)
        if len(out) >= count:
            break
    return out


def summary(event: dict[str, Any]) -> tuple[str, str, str]:
    obj = event["object"]
    return event["type"], obj["metadata"].get("name", ""), obj["metadata"].get("resourceVersion", "")
