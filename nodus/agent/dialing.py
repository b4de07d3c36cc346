"""Connections the agent makes on a Job's behalf, to checked addresses only (ADR 0032).

:func:`resolve` checks what the Job wrote (:func:`nodus.apimachinery.destinations.check_host`),
resolves the name once and checks every address it resolves to. Callers connect to those addresses,
never to the name again: a name that resolves to a public address when checked and to 127.0.0.1
when connected (DNS rebinding) gets no second chance. Built on it:

* :func:`open_connection`: a stream (the egress proxy's upstream);
* :func:`http_client`: an httpx client whose every connection, each redirect hop's included, goes
  through the check (URL inputs, S3). TLS is still verified against the name in the URL: only the
  TCP connection is made to the checked address.

A refusal raises :class:`~nodus.apimachinery.destinations.Refused`; a name that does not resolve
raises :class:`OSError` (``httpx.ConnectError`` through the client).

:func:`host_policy` builds an agent's policy from its flags: its API server's addresses, resolved at
start, are always forbidden, and so are the ``--forbid-address`` endpoints (names resolved at start
too, and kept as names for the static check).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from nodus.apimachinery import destinations
from nodus.apimachinery.destinations import Address, Endpoint, Policy


async def resolve(host: str, port: int, policy: Policy) -> list[Address]:
    """Every address of ``host`` (port ``port``), each checked against ``policy``; Refused or OSError."""
    destinations.check_host(host, port, policy)
    literal = destinations.parse_address(host)
    if literal is not None:
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"cannot resolve {host}: {exc.strerror or exc}") from None
    addresses = list(dict.fromkeys(_address(info[4][0]) for info in found))
    for address in addresses:
        destinations.check_address(address, port, policy, name=host)
    if not addresses:
        raise OSError(f"{host} has no address")
    return addresses


async def open_connection(
    host: str, port: int, policy: Policy, *, limit: int = 2**16
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TCP stream to the first checked address of ``host`` that answers; Refused or OSError."""
    last: OSError | None = None
    for address in await resolve(host, port, policy):
        try:
            return await asyncio.open_connection(str(address), port, limit=limit)
        except OSError as exc:
            last = exc
    assert last is not None
    raise last


def http_client(policy: Policy, *, ca_file: str | None = None, timeout: httpx.Timeout) -> httpx.AsyncClient:
    """An httpx client that connects only to checked addresses; it follows no redirects and reads no
    proxy settings from the environment (a proxy would be the address checked, not the destination).

    ``ca_file`` replaces the system CAs when given, for private endpoints.
    """
    context = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    return httpx.AsyncClient(
        transport=_CheckingTransport(policy, context), timeout=timeout, follow_redirects=False, trust_env=False
    )


def host_policy(allow_loopback: bool, forbid: Iterable[str], api_server: str) -> Policy:
    """The agent's policy: ``--allow-loopback-endpoints``, the ``--forbid-address`` entries and its API
    server (``https://host:port``), names resolved now (blocking). ValueError for a malformed entry."""
    parts = urlsplit(api_server)
    server_port = parts.port or (443 if parts.scheme == "https" else 80)
    entries = [Endpoint.parse(text) for text in forbid]
    if parts.hostname:
        entries.append(Endpoint.parse(f"[{parts.hostname}]:{server_port}"))
    resolved = [*entries]
    for entry in entries:
        if destinations.parse_address(entry.host) is None:
            resolved += [Endpoint(str(address), entry.port) for address in _resolve_now(entry.host)]
    return Policy(allow_loopback=allow_loopback, forbidden=frozenset(resolved))


def _resolve_now(name: str) -> list[Address]:
    try:
        found = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return []  # a name that does not resolve reaches nothing; it stays forbidden by name
    return list(dict.fromkeys(_address(info[4][0]) for info in found))


def _address(text: Any) -> Address:
    return ipaddress.ip_address(str(text).partition("%")[0])


class _CheckingBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with every TCP connection resolved and checked first (see module doc)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            addresses = await resolve(host, port, self.policy)
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from None
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(str(address), port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise destinations.Refused(f"{path} is a unix socket on the agent's host: refused")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _CheckingTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over :class:`_CheckingBackend`."""

    def __init__(self, policy: Policy, context: ssl.SSLContext) -> None:
        super().__init__(verify=context, trust_env=False)
        # httpx takes no network backend, so its pool is replaced by one with the same defaults and ours.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_CheckingBackend(policy),
        )
