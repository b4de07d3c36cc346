"""A TCP proxy in front of the test API server that can cut connections, to test dropped streams.

TLS passes through untouched (the serving certificate is for 127.0.0.1, where the proxy listens).
While paused, new connections are accepted and closed at once, like a server that is down.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import urlsplit


class Proxy:
    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 443)
        self._scheme = parts.scheme
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.paused = False
        self.connections = 0

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"{self._scheme}://127.0.0.1:{port}"

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cut(self) -> None:
        """Drop every open connection."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Tracked from its first step, so that stop() also ends a connection still being opened upstream: one it
        # missed would connect after the test and leave its sockets to the garbage collector (a ResourceWarning).
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream_writer: asyncio.StreamWriter | None = None
        pipes: list[asyncio.Future[None]] = []
        try:
            if self.paused:
                return
            self.connections += 1
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
            except OSError:
                return
            self._writers.update((writer, upstream_writer))
            pipes = [
                asyncio.ensure_future(self._pipe(reader, upstream_writer)),
                asyncio.ensure_future(self._pipe(upstream_reader, writer)),
            ]
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # stop(): the connection is closed below. The task ends normally, because asyncio's server (Python
            # 3.11) asks a finished connection task for its exception and logs the CancelledError that raises.
            pass
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            for w in (writer, upstream_writer):
                if w is not None:
                    self._writers.discard(w)
                    w.transport.abort()
            self._tasks.discard(task)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
