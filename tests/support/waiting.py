"""Waiting for an outcome in async tests: poll until true, with a generous timeout (not a timing assertion)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(predicate: Callable[[], object], timeout: float = 30.0, message: str = "") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(message or f"condition not met within {timeout}s")
        await asyncio.sleep(0.02)
