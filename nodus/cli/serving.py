"""Serving the API over HTTPS with uvicorn, with the connection visible to the app.

uvicorn does not pass a TLS client certificate to the application, which requestheader
authentication needs; the protocol subclass here records the verified peer certificate of each
connection in the request state (``scope["state"]["peer_certificate"]``, DER bytes). It also records
the connection's transport (``scope["state"]["transport"]``), which caught-up watches write their
events to directly (``nodus.api.http.watches``): the fan-out of one event to many watchers is then
one loop of writes instead of a task woken per watcher.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from nodus.api.app import create_app
from nodus.api.server import APIServer

log = logging.getLogger(__name__)


class PeerCertificateProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    app_state: dict[str, Any]

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        peer = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        # uvicorn copies app_state into every request's scope["state"]: per connection here.
        self.app_state = {**self.app_state, "transport": transport}
        if peer:
            self.app_state["peer_certificate"] = peer


@dataclass(frozen=True)
class Listener:
    host: str
    port: int
    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None


def config(server: APIServer, listener: Listener) -> uvicorn.Config:
    kwargs: dict[str, Any] = {}
    if listener.cert_file and listener.key_file:
        kwargs.update(ssl_certfile=str(listener.cert_file), ssl_keyfile=str(listener.key_file))
        if listener.client_ca_file:
            kwargs.update(ssl_ca_certs=str(listener.client_ca_file), ssl_cert_reqs=ssl.CERT_OPTIONAL)
    return uvicorn.Config(
        create_app(server),
        host=listener.host,
        port=listener.port,
        http=PeerCertificateProtocol,
        loop="uvloop",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=3,
        timeout_keep_alive=30,
        **kwargs,
    )


class _Server(uvicorn.Server):
    """uvicorn's server; on the first stop signal it first awaits ``before_exit``, then drains."""

    def __init__(self, config: uvicorn.Config, before_exit: Callable[[], Awaitable[None]] | None) -> None:
        super().__init__(config)
        self._before_exit = before_exit
        self._exiting: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        before, self._before_exit = self._before_exit, None
        if before is None:  # no hook, or a second signal: stop now
            super().handle_exit(sig, frame)
            return

        async def exit_after_hook() -> None:
            try:
                await before()
            finally:
                super(_Server, self).handle_exit(sig, frame)

        self._exiting = asyncio.get_running_loop().create_task(exit_after_hook())


async def serve(
    server: APIServer,
    listener: Listener,
    ready: asyncio.Event | None = None,
    before_exit: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run until SIGINT/SIGTERM (uvicorn installs the handlers); ``ready`` is set once listening.

    ``before_exit`` is awaited when a signal arrives, before the server starts draining: ``nodus
    dev`` stops its controllers there while the API still answers, so that they release their Lease,
    take the simulated hosts down, and their watches do not hold up the graceful shutdown.

    Once the server is up, everything alive is long-lived: it is moved out of the garbage collector's
    generations (``gc.freeze``) so that collections under load stay short.
    """
    uv = _Server(config(server, listener), before_exit)
    task = asyncio.ensure_future(uv.serve())
    while not uv.started and not task.done():  # noqa: ASYNC110 - uvicorn exposes a flag, not an event
        await asyncio.sleep(0.05)
    if uv.started:
        gc.collect()
        gc.freeze()
        if ready is not None:
            ready.set()
    await task
