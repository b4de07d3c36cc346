"""Connect-time checks (ADR 0032): names resolved once, every address checked, the checked one dialled."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from nodus.agent import dialing
from nodus.apimachinery import destinations
from nodus.apimachinery.destinations import Endpoint, Policy

LOCAL = Policy(allow_loopback=True)


@pytest.fixture
async def listener() -> AsyncIterator[int]:
    """A TCP server on 127.0.0.1 that says hello; yields its port."""

    async def hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(hello, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


def loopback_name() -> str:
    """This machine's host name when it resolves to loopback only (as in most containers): a name the static
    check cannot know, whose address gives it away."""
    name = socket.gethostname()
    try:
        found = {info[4][0] for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)}
    except socket.gaierror:
        pytest.skip(f"{name} does not resolve")
    if not found or not all(ipaddress.ip_address(str(a).partition("%")[0]).is_loopback for a in found):
        pytest.skip(f"{name} resolves to {sorted(found)}, not to loopback only")
    return name


async def test_a_name_is_judged_by_the_addresses_it_resolves_to(listener: int) -> None:
    name = loopback_name()
    with pytest.raises(destinations.Refused, match=rf"^{name} resolves to 127\.\S+, which is loopback"):
        await dialing.open_connection(name, listener, Policy())
    reader, writer = await dialing.open_connection(name, listener, LOCAL)
    assert await reader.read() == b"hello"
    writer.close()


async def test_localhost_reaches_loopback_only_with_the_flag(listener: int) -> None:
    with pytest.raises(destinations.Refused, match="localhost is loopback"):
        await dialing.open_connection("localhost", listener, Policy())
    reader, writer = await dialing.open_connection("localhost", listener, LOCAL)
    assert await reader.read() == b"hello"
    writer.close()


async def test_the_agents_api_server_is_always_forbidden(listener: int) -> None:
    policy = dialing.host_policy(True, [], f"https://localhost:{listener}")
    with pytest.raises(destinations.Refused, match="the control plane's own endpoint"):
        await dialing.open_connection("127.0.0.1", listener, policy)
    with pytest.raises(destinations.Refused, match="the control plane's own endpoint"):
        await dialing.open_connection("127.0.0.2", listener, policy)


def test_forbidden_names_are_resolved_at_start() -> None:
    policy = dialing.host_policy(False, ["localhost:5432", "10.0.0.5"], "https://api.example.invalid:8443")
    assert {Endpoint("localhost", 5432), Endpoint("127.0.0.1", 5432), Endpoint("10.0.0.5", None)} <= policy.forbidden
    assert Endpoint("api.example.invalid", 8443) in policy.forbidden  # unresolvable: kept by name


async def test_the_http_client_refuses_before_connecting() -> None:
    async with dialing.http_client(Policy(), timeout=httpx.Timeout(5)) as client:
        for url in ("https://169.254.169.254/latest/meta-data/", "https://localhost:1/", "https://2130706433/"):
            with pytest.raises(destinations.Refused):
                await client.get(url)


async def test_a_name_that_does_not_resolve_is_a_connect_error() -> None:
    async with dialing.http_client(Policy(), timeout=httpx.Timeout(5)) as client:
        with pytest.raises(httpx.ConnectError, match="cannot resolve"):
            await client.get("https://nodus-test.invalid/")
