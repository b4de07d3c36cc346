"""The allow-listing HTTP proxy behind ``Egress(policy="AllowList")``, and the host rule it applies.

An AllowList sandbox has a network namespace of its own with only loopback, so the program cannot
reach anything by itself. The agent runs one :class:`EgressProxy` per attempt on the host, listening
on a unix socket in the attempt's directory; the socket is bound into the sandbox, where the
supervisor forwards ``127.0.0.1:3128`` to it byte for byte (see ``nodus.agent.bubblewrap``) and the
program finds it through ``HTTP_PROXY``/``HTTPS_PROXY`` (:data:`PROXY_ENV`).

The proxy speaks the two forms of HTTP/1.1 proxying that clients use:

- ``CONNECT host:port``: a tunnel (HTTPS, or anything else the client wraps in it), relayed as is.
- ``GET http://host/path HTTP/1.1`` (any method, absolute URI): the request is sent to the host in
  origin form with ``Connection: close``, then both directions are relayed. One request per client
  connection: a client that keeps the connection alive sees it closed and opens another.

A host is let through when :func:`allowed` says so, by name: the program never resolves names itself
(it has no DNS), so the name it asks for is the name that is checked. The name is then resolved on
the agent's host and every address checked against the agent's destination policy (ADR 0032): an
allowed name that resolves to loopback, link-local (the metadata service) or the control plane is
refused too, and the connection goes to the checked address (``nodus.agent.dialing``), never to a
second resolution. A refusal is ``403 Forbidden`` with a one-line body that names the host, why and
the fix, and the agent logs it at INFO.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from nodus.agent import dialing
from nodus.apimachinery import allowlists, destinations

logger = logging.getLogger(__name__)

# The host rule is shared with the API server, which checks a Job's URL inputs and git source with it.
PRESETS = allowlists.PRESETS
PRESET_NAMES = allowlists.PRESET_NAMES
allowed = allowlists.allowed
is_valid_pattern = allowlists.is_valid_pattern
expand = allowlists.expand

# Where the program finds the proxy: the supervisor's forwarder inside the sandbox.
PROXY_PORT = 3128
_PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
PROXY_ENV = {
    "HTTP_PROXY": _PROXY_URL,
    "HTTPS_PROXY": _PROXY_URL,
    "http_proxy": _PROXY_URL,
    "https_proxy": _PROXY_URL,
    "NO_PROXY": "localhost,127.0.0.1,::1",
    "no_proxy": "localhost,127.0.0.1,::1",
}

_MAX_HEAD_BYTES = 64 * 1024
_CHUNK_BYTES = 64 * 1024
# A unix socket address is at most 108 bytes; longer paths are bound through the directory's fd.
_MAX_SOCKET_PATH_BYTES = 100
# Request headers that concern the hop to the proxy, not the request itself.
_HOP_HEADERS = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"te"})


class EgressProxy:
    """One attempt's proxy. Build it with :meth:`start`; :meth:`close` it when the attempt has ended."""

    def __init__(self, socket_path: Path, allow: tuple[str, ...], policy: destinations.Policy) -> None:
        self.socket_path = socket_path
        self.allow = allow
        self.policy = policy
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @classmethod
    async def start(
        cls,
        socket_path: Path,
        allow: Iterable[str],
        presets: Iterable[str] = (),
        *,
        policy: destinations.Policy,
    ) -> EgressProxy:
        """Listen on ``socket_path`` (replacing a stale socket there) and serve until closed.

        ``policy`` is the agent's destination policy, applied to the addresses of allowed names.
        Raises ValueError for an unknown preset, OSError when the socket cannot be created.
        """
        proxy = cls(socket_path, expand(allow, presets), policy)
        listener = _bound_unix_socket(socket_path)
        try:
            proxy._server = await asyncio.start_unix_server(proxy._serve, sock=listener, limit=_MAX_HEAD_BYTES)
        except BaseException:
            listener.close()
            raise
        return proxy

    def close(self) -> None:
        """Stop listening, end every open connection and remove the socket. Idempotent, never blocks."""
        if self._server is not None:
            self._server.close()
        for task in self._connections:
            task.cancel()
        with contextlib.suppress(OSError):
            self.socket_path.unlink()

    async def wait_closed(self) -> None:
        """Wait until every connection handler has finished (after :meth:`close`)."""
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client or the host went away mid-request: nobody left to tell
        finally:
            self._connections.discard(task)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *headers = head[:-4].split(b"\r\n")
        parts = request_line.decode("latin-1").split(" ")
        if len(parts) != 3:
            return await _respond(writer, 400, "Bad Request", "nodus egress: not an HTTP/1.x request line")
        method, target, version = parts
        tunnel = method.upper() == "CONNECT"
        if tunnel:
            host, port = _host_port(target)
            forwarded = b""
        else:
            host, port, forwarded = _origin_request(method, target, version, headers)
        if host is None or port is None:
            return await _respond(
                writer, 400, "Bad Request", "nodus egress: send CONNECT host:port or an absolute http:// URI"
            )
        if not allowed(host, self.allow):
            logger.info("egress to %s refused for %s (not in its allow list)", host, self.socket_path.parent.name)
            return await _respond(
                writer, 403, "Forbidden", f"nodus egress: {host} is not allowed; add it to spec.network.egress.allow"
            )
        try:
            up_reader, up_writer = await dialing.open_connection(host, port, self.policy, limit=_CHUNK_BYTES)
        except destinations.Refused as refused:
            logger.info("egress to %s refused for %s: %s", host, self.socket_path.parent.name, refused)
            return await _respond(writer, 403, "Forbidden", f"nodus egress: {refused}; {refused.fix}")
        except OSError as error:
            return await _respond(
                writer, 502, "Bad Gateway", f"nodus egress: cannot connect to {host}:{port}: {error.strerror or error}"
            )
        try:
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(forwarded)
            await _relay(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()


def _origin_request(
    method: str, target: str, version: str, headers: list[bytes]
) -> tuple[str | None, int | None, bytes]:
    """Host, port and the request head to send there, for an absolute-URI request; Nones if it is not one."""
    try:
        url = urlsplit(target)
        host, port = url.hostname, url.port or 80
    except ValueError:  # a bad port or IPv6 literal
        return None, None, b""
    if url.scheme != "http" or not host:
        return None, None, b""
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    kept = [line for line in headers if _header_name(line) not in _HOP_HEADERS]
    if not any(_header_name(line) == b"host" for line in kept):
        kept.append(b"Host: " + url.netloc.encode("latin-1"))
    lines = [f"{method} {path} {version}".encode("latin-1"), *kept, b"Connection: close"]
    return host, port, b"\r\n".join(lines) + b"\r\n\r\n"


def _header_name(line: bytes) -> bytes:
    return line.split(b":", 1)[0].strip().lower()


def _host_port(target: str) -> tuple[str | None, int | None]:
    """``host:port`` or ``[v6]:port`` split; Nones when it is neither."""
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None, None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


async def _respond(writer: asyncio.StreamWriter, status: int, reason: str, message: str) -> None:
    body = (message + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until the host's side ends; the client's end only half-closes toward the host."""
    upload = asyncio.create_task(_copy(reader, up_writer))
    try:
        await _copy(up_reader, writer)
    finally:
        upload.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await upload


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while chunk := await source.read(_CHUNK_BYTES):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()


def _bound_unix_socket(path: Path) -> socket.socket:
    """A listening unix socket at ``path``, however long the path (attempt directories can be deep)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) <= _MAX_SOCKET_PATH_BYTES:
            listener.bind(str(path))
        else:
            directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
            try:
                listener.bind(f"/proc/self/fd/{directory}/{path.name}")
            finally:
                os.close(directory)
        # Only the agent's user (who the sandboxed program runs as) may connect.
        path.chmod(0o600)
        listener.listen(128)
    except BaseException:
        listener.close()
        raise
    return listener
