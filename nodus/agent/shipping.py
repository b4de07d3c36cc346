"""Log shipping: an attempt's output lines go to the API server in batches, in order, none lost.

Lines are buffered and posted to ``.../attempts/NAME/log`` at most every ``interval`` or when a
batch is full. A failed post is retried with backoff, keeping order; if the server stays away long
enough for the buffer to pass ``max_buffered`` lines, the oldest are dropped and a marker line says
how many, so memory stays bounded and the gap is visible. ``close`` flushes everything, and the
agent reports an attempt's end only after it, so a failed attempt's last lines are always readable.
Each line names its container (omitted for the main program), so that init commands and sidecars
can be read apart (``?container=NAME``) or together (``?allContainers=true``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from datetime import datetime

import orjson

from nodus.apimachinery import units
from nodus.client import Client, errors

log = logging.getLogger("nodus.agent.logs")

BATCH = 500


class LogShipper:
    def __init__(
        self, client: Client, namespace: str, attempt: str, *, interval: float = 0.25, max_buffered: int = 50_000
    ) -> None:
        self._client = client
        self._path = f"/apis/nodus.dev/v1/namespaces/{namespace}/attempts/{attempt}/log"
        self._interval = interval
        self._max = max_buffered
        self._buffer: deque[dict[str, str]] = deque()
        self._dropped = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._task = asyncio.create_task(self._run(), name=f"logs {attempt}")

    def add(self, stream: str, line: str, container: str = "", *, at: datetime | None = None) -> None:
        """Buffer one line of ``stream`` (``stdout``/``stderr``) of ``container`` ('' is the main program;
        otherwise the init command or a sidecar, such as ``init``); never blocks."""
        entry = {"stream": stream, "time": units.format_micro_time(at or units.now()), "line": line}
        if container:
            entry["container"] = container
        self._buffer.append(entry)
        if len(self._buffer) > self._max:
            self._buffer.popleft()
            self._dropped += 1
        if len(self._buffer) >= BATCH:
            self._wake.set()

    async def close(self, timeout: float = 30.0) -> None:
        """Flush what is buffered (giving up after ``timeout``) and stop."""
        self._closing = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            log.error("gave up shipping %d log lines to %s", len(self._buffer), self._path)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        backoff = 0.2
        while True:
            if not self._buffer and self._closing:
                return
            if not self._buffer or (len(self._buffer) < BATCH and not self._closing):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._interval):
                        await self._wake.wait()
                self._wake.clear()
            if not self._buffer:
                continue
            if self._dropped:
                marker = f"[nodus: {self._dropped} log lines dropped while the API server was unreachable]"
                self._buffer.appendleft(
                    {"stream": "stderr", "time": units.format_micro_time(units.now()), "line": marker}
                )
                self._dropped = 0
            batch = [self._buffer[i] for i in range(min(BATCH, len(self._buffer)))]
            try:
                await self._client.request(
                    "POST",
                    self._path,
                    content=orjson.dumps({"entries": batch}),
                    headers={"Content-Type": "application/json"},
                )
            except (errors.NotFound, errors.Forbidden):  # the attempt is gone (or no longer this node's): nobody
                # can read these
                self._buffer.clear()
                continue
            except Exception as exc:  # the server may be restarting: keep the lines and retry
                log.warning("shipping logs to %s failed (%s); retrying in %.1fs", self._path, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.2
            for _ in batch:
                self._buffer.popleft()
