"""A customer's database for sink tests: the tests' PostgreSQL server seen at an address of its own.

Agents refuse the control plane's database (ADR 0032), and in tests the control plane's database and
a "customer's" live on one PostgreSQL server. :class:`Forwarder` gives that server a second address,
a TCP port on 127.0.0.1 that relays every connection byte for byte to the server (over TCP, or its
unix socket when the server is the embedded one), as a customer's database has an address of its own
in production. Threads and real sockets; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


class Forwarder:
    """Relays ``127.0.0.1:port`` to the server of ``server_url`` until :meth:`close`; a context manager."""

    def __init__(self, server_url: str) -> None:
        parts = urlsplit(server_url)
        socket_dir = dict(parse_qsl(parts.query)).get("host")
        self._target: tuple[int, str | tuple[str, int]]
        if parts.hostname:
            self._target = (socket.AF_INET, (parts.hostname, parts.port or 5432))
        else:
            self._target = (socket.AF_UNIX, f"{socket_dir}/.s.PGSQL.{parts.port or 5432}")
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="forwarder").start()

    def url(self, database_url: str) -> str:
        """``database_url`` (a database on the forwarded server) as reached through this forwarder."""
        parts = urlsplit(database_url)
        userinfo = parts.netloc.rpartition("@")[0]
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k != "host"])
        netloc = f"{userinfo}@127.0.0.1:{self.port}" if userinfo else f"127.0.0.1:{self.port}"
        return urlunsplit(("postgresql", netloc, parts.path, query, ""))

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()

    def __enter__(self) -> Forwarder:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            family, address = self._target
            upstream = socket.socket(family, socket.SOCK_STREAM)
            try:
                upstream.connect(address)
            except OSError:
                client.close()
                upstream.close()
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
    with contextlib.suppress(OSError):
        source.close()
