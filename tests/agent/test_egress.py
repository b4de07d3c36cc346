"""Egress policies in a real sandbox, against a real server on the host's loopback, and the host rule.

The server listens on the host's 127.0.0.1, which the program reaches only while it shares the host's
network (``Open``); in its own network (``Deny``, ``AllowList``) 127.0.0.1 is the sandbox's own, so
only the agent's proxy can get there, and only for an allowed name whose address the agent's
destination policy allows: loopback only for an agent started with ``--allow-loopback-endpoints``
(:data:`LOCAL`), never the control plane's endpoints (ADR 0032).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodus.agent import egress, runtime
from nodus.agent.layout import AttemptLayout
from nodus.apimachinery import destinations

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REAL_PYTHON = os.path.realpath(sys.executable)
# Only guards against a hang; never reached when things work.
HANG_GUARD = 120.0
BODY = "hello from the host"
# An agent started with --allow-loopback-endpoints (its API server elsewhere).
LOCAL = destinations.Policy(allow_loopback=True)

CONNECT_DIRECTLY = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30).close()
    print("connected")
except OSError:
    print("cannot connect")
"""

THROUGH_THE_PROXY = """
import http.client, os, socket, sys, urllib.parse
port = int(sys.argv[1])
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
def connection():
    return http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=30)
for url in (f"http://localhost:{port}/plain", f"http://127.0.0.1:{port}/plain"):
    plain = connection()
    plain.request("GET", url)
    response = plain.getresponse()
    print(response.status, response.read().decode().strip())
for host, target_port in (("localhost", port), ("example.invalid", 443)):
    tunnel = connection()
    tunnel.set_tunnel(host, target_port)
    try:
        tunnel.request("GET", "/tunnelled")
        response = tunnel.getresponse()
        print("tunnel", response.status, response.read().decode().strip())
    except OSError as error:
        print("tunnel refused:", error)
try:
    socket.create_connection(("127.0.0.1", port), timeout=30).close()
    print("connected directly")
except OSError:
    print("cannot connect directly")
"""


@pytest.fixture
async def host_server() -> AsyncIterator[int]:
    """An HTTP server on the host's 127.0.0.1 that answers every request with BODY; yields its port."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            body = BODY.encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass  # a client that only tests whether it can connect
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


def python_spec(layout: AttemptLayout, code: str, *args: str, policy: runtime.Egress) -> runtime.RunSpec:
    return runtime.RunSpec(
        argv=[REAL_PYTHON, "-c", code, *args],
        env={"PATH": PATH},
        working_dir="/workspace",
        layout=layout,
        egress=policy,
    )


async def output_of(chosen: runtime.Runtime, spec: runtime.RunSpec) -> list[str]:
    process = await chosen.start(spec)

    async def collect() -> list[str]:
        return [line async for stream, line in process.lines() if stream == "stdout"]

    stdout = await asyncio.wait_for(collect(), HANG_GUARD)
    assert await asyncio.wait_for(process.wait(), HANG_GUARD) == runtime.Exit(
        code=0, signal=None, oom_killed=False, stopped=False
    )
    return stdout


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param(runtime.Egress(), "connected", id="open-shares-the-host-network"),
        pytest.param(runtime.Egress(policy="Deny"), "cannot connect", id="deny"),
        pytest.param(
            runtime.Egress(policy="AllowList", allow=("localhost",), destinations=LOCAL),
            "cannot connect",
            id="allow-list",
        ),
    ],
)
async def test_direct_connections_reach_the_host_only_when_open(
    sandbox: runtime.Runtime, layout: AttemptLayout, host_server: int, policy: runtime.Egress, expected: str
) -> None:
    spec = python_spec(layout, CONNECT_DIRECTLY, str(host_server), policy=policy)

    assert await output_of(sandbox, spec) == [expected]


async def test_allow_list_lets_listed_hosts_through_the_proxy_and_refuses_the_rest(
    sandbox: runtime.Runtime, layout: AttemptLayout, host_server: int, caplog: pytest.LogCaptureFixture
) -> None:
    spec = python_spec(
        layout,
        THROUGH_THE_PROXY,
        str(host_server),
        policy=runtime.Egress(policy="AllowList", allow=("LocalHost.",), destinations=LOCAL),
    )
    with caplog.at_level(logging.INFO, logger=egress.__name__):
        stdout = await output_of(sandbox, spec)

    assert stdout == [
        f"200 {BODY}",
        "403 nodus egress: 127.0.0.1 is not allowed; add it to spec.network.egress.allow",
        f"tunnel 200 {BODY}",
        "tunnel refused: Tunnel connection failed: 403 Forbidden",
        "cannot connect directly",
    ]
    refused = [record.getMessage() for record in caplog.records if record.name == egress.__name__]
    assert any("127.0.0.1" in message for message in refused)
    assert any("example.invalid" in message for message in refused)
    # The proxy ends with the attempt.
    assert not (layout.directory / "egress.sock").exists()


async def test_allow_list_gives_the_program_the_proxy_environment(
    sandbox: runtime.Runtime, layout: AttemptLayout
) -> None:
    spec = runtime.RunSpec(
        argv=["env"],
        env={"PATH": PATH, "HTTP_PROXY": "http://the-program-cannot-bypass:1"},
        working_dir="/workspace",
        layout=layout,
        egress=runtime.Egress(policy="AllowList", presets=("python-packages",)),
    )

    assert sorted(await output_of(sandbox, spec)) == sorted(
        [f"PATH={PATH}", *(f"{name}={value}" for name, value in egress.PROXY_ENV.items())]
    )


@pytest.mark.parametrize(
    ("policy", "why"),
    [
        pytest.param(
            runtime.Egress(policy="AllowList", presets=("no-such-preset",)),
            "unknown egress preset 'no-such-preset'",
            id="preset",
        ),
        pytest.param(runtime.Egress(policy="AllowList", allow=("bad host",)), "not a host name", id="allow-entry"),
        pytest.param(
            runtime.Egress(policy="Deny", allow=("pypi.org",)), "only apply to the AllowList", id="deny-allow"
        ),
    ],
)
async def test_egress_that_cannot_be_honoured_is_refused(
    sandbox: runtime.Runtime, layout: AttemptLayout, policy: runtime.Egress, why: str
) -> None:
    with pytest.raises(runtime.StartFailed, match=why):
        await sandbox.start(python_spec(layout, "pass", policy=policy))


async def test_proxy_refuses_unknown_presets(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown egress preset 'no-such-preset'"):
        await egress.EgressProxy.start(tmp_path / "egress.sock", (), ("no-such-preset",), policy=LOCAL)
    assert not (tmp_path / "egress.sock").exists()


async def ask(proxy: egress.EgressProxy, form: str, port: int) -> tuple[str, str]:
    """The status line and body answering ``GET /`` on localhost:``port`` through ``proxy``: in a CONNECT
    tunnel, or as an absolute-URI request. A refused CONNECT answers the CONNECT itself."""
    reader, writer = await asyncio.open_unix_connection(proxy.socket_path)
    try:
        if form == "CONNECT":
            writer.write(f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
            head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HANG_GUARD)).decode()
            if " 200 " not in head.split("\r\n")[0]:
                body = await asyncio.wait_for(reader.read(), HANG_GUARD)
                return head.split("\r\n")[0], body.decode().strip()
            writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        else:
            writer.write(f"GET http://localhost:{port}/ HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        answer = (await asyncio.wait_for(reader.read(), HANG_GUARD)).decode()
    finally:
        writer.close()
    head, _, body = answer.partition("\r\n\r\n")
    return head.split("\r\n")[0], body.strip()


@pytest.mark.parametrize(
    ("policy", "status", "body"),
    [
        pytest.param(
            destinations.Policy(),
            "HTTP/1.1 403 Forbidden",
            "nodus egress: localhost is loopback (this host): refused; ",
            id="loopback-without-the-flag",
        ),
        pytest.param(
            LOCAL.forbid(destinations.Endpoint.parse("127.0.0.1")),
            "HTTP/1.1 403 Forbidden",
            "nodus egress: localhost resolves to 127.0.0.1:{port}, which is the control plane's own endpoint "
            "(127.0.0.1): refused; ",
            id="control-plane",
        ),
        pytest.param(LOCAL, "HTTP/1.1 200 OK", BODY, id="loopback-with-the-flag"),
    ],
)
@pytest.mark.parametrize("form", ["CONNECT", "GET"])
async def test_an_allowed_name_is_refused_for_its_address(
    tmp_path: Path, host_server: int, policy: destinations.Policy, status: str, body: str, form: str
) -> None:
    # "localhost" is in the allow list and resolves to 127.0.0.1: the name passes, its address decides.
    proxy = await egress.EgressProxy.start(tmp_path / "egress.sock", ("localhost",), policy=policy)
    try:
        got_status, got_body = await ask(proxy, form, host_server)
    finally:
        proxy.close()
        await proxy.wait_closed()
    assert got_status == status
    assert got_body.startswith(body.format(port=host_server))


@pytest.mark.parametrize(
    ("host", "allow", "expected"),
    [
        pytest.param("pypi.org", ["pypi.org"], True, id="exact"),
        pytest.param("PyPI.org.", ["pypi.org"], True, id="case-and-trailing-dot"),
        pytest.param("pypi.org", ["PYPI.ORG."], True, id="entry-case-and-trailing-dot"),
        pytest.param("evilpypi.org", ["pypi.org"], False, id="not-a-suffix-match"),
        pytest.param("files.pypi.org", ["pypi.org"], False, id="exact-entry-excludes-subdomains"),
        pytest.param("a.example.com", ["*.example.com"], True, id="wildcard-one-level"),
        pytest.param("a.b.example.com", ["*.example.com"], True, id="wildcard-deeper"),
        pytest.param("example.com", ["*.example.com"], False, id="wildcard-excludes-the-apex"),
        pytest.param("badexample.com", ["*.example.com"], False, id="wildcard-is-label-aligned"),
        pytest.param(".example.com", ["*.example.com"], False, id="empty-label"),
        pytest.param("127.0.0.1", ["localhost"], False, id="address-is-not-the-name"),
        pytest.param("::1", ["::1"], True, id="ipv6-literal"),
        pytest.param("", ["*"], False, id="empty-host"),
        pytest.param("pypi.org", [], False, id="empty-allow-list"),
        pytest.param("files.pythonhosted.org", egress.PRESETS["python-packages"], True, id="preset-python"),
        pytest.param("cdn-lfs.hf.co", egress.PRESETS["huggingface"], True, id="preset-huggingface"),
        pytest.param("raw.githubusercontent.com", egress.PRESETS["github"], True, id="preset-github"),
    ],
)
def test_allowed(host: str, allow: list[str], expected: bool) -> None:
    assert egress.allowed(host, allow) is expected


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        pytest.param("pypi.org", True, id="name"),
        pytest.param("*.example.com", True, id="wildcard"),
        pytest.param("10.0.0.1", True, id="ipv4"),
        pytest.param("localhost.", True, id="trailing-dot"),
        pytest.param("a.*.com", False, id="inner-wildcard"),
        pytest.param("*", False, id="everything"),
        pytest.param("bad host", False, id="space"),
        pytest.param("", False, id="empty"),
    ],
)
def test_valid_allow_entries(entry: str, expected: bool) -> None:
    assert egress.is_valid_pattern(entry) is expected


def test_presets_are_named_and_valid() -> None:
    assert {"python-packages", "huggingface", "github", "conda", "apt"} <= egress.PRESET_NAMES
    assert all(egress.is_valid_pattern(entry) for entries in egress.PRESETS.values() for entry in entries)
