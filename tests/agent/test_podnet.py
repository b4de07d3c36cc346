"""Container networks for egress, on real podman, iptables and network namespaces.

The "internet" is a network namespace behind a veth pair: 198.51.100.2 stands for a public host, 198.51.100.3 for
the control plane and 169.254.169.254 for the cloud's metadata service; each runs the same TCP server, which the
host itself reaches (so a refusal seen from a container is the rules' doing). Everything the tests add is removed;
the ``nodus`` network and its rules stay (they are reusable).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from nodus.agent import podnet

PODMAN = ["podman", "--cgroup-manager=cgroupfs"]
RUN = [*PODMAN, "run", "-d", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096"]
PUBLIC, CONTROL_PLANE, METADATA = "198.51.100.2", "198.51.100.3", "169.254.169.254"
INTERNET_PORT = 8080
SLEEP = ["python3", "-c", "import time; time.sleep(300)"]
# Run inside a container: connect to each [host, port], read what the server says; "ok:<reply>" or the errno name.
PROBE = """\
import errno, json, socket, sys
results = []
for host, port in json.loads(sys.argv[1]):
    try:
        with socket.create_connection((host, port), timeout=5) as connection:
            results.append("ok:" + connection.recv(100).decode().strip())
    except OSError as error:
        results.append(errno.errorcode.get(error.errno, str(error)))
print(json.dumps(results))
"""
# Run inside a --network none container: 1 MiB through 127.0.0.1:<port> and back; prints its length and sha256.
ECHO_PROBE = """\
import hashlib, socket, sys
payload = bytes(range(256)) * 4096
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10) as connection:
    connection.sendall(payload)
    connection.shutdown(socket.SHUT_WR)
    received = b""
    while chunk := connection.recv(65536):
        received += chunk
print(len(received), hashlib.sha256(received).hexdigest())
"""
# The internet's server: answers each connection with the address it was reached at.
SERVER = """\
import socket
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("0.0.0.0", 8080))
listener.listen(64)
while True:
    connection, _ = listener.accept()
    connection.sendall(connection.getsockname()[0].encode() + b"\\n")
    connection.close()
"""

pytestmark = [
    pytest.mark.integration,  # real programs and engines: left out of `make test-fast`
    pytest.mark.skipif(
        shutil.which("podman") is None or os.geteuid() != 0, reason="needs podman and root (iptables, netns)"
    ),
]


@pytest.fixture(scope="module")
def image() -> str:
    from nodus.cli import devimages

    cache = Path(__file__).resolve().parents[2] / ".cache" / "images"
    return devimages.import_into_podman(devimages.base_tarball(cache), "localhost/nodus/base:" + devimages.tag())


@pytest.fixture(scope="module")
def internet() -> Iterator[None]:
    """The namespace standing for the internet, its veth pair, routes and server; all removed afterwards."""
    namespace, host_end, far_end = f"nodus-t{os.getpid()}", f"nt{os.getpid() % 100000}h", f"nt{os.getpid() % 100000}n"
    setup = [
        ["ip", "netns", "add", namespace],
        ["ip", "link", "add", host_end, "type", "veth", "peer", "name", far_end],
        ["ip", "link", "set", far_end, "netns", namespace],
        ["ip", "addr", "add", "198.51.100.1/24", "dev", host_end],
        ["ip", "link", "set", host_end, "up"],
        ["ip", "-n", namespace, "addr", "add", f"{PUBLIC}/24", "dev", far_end],
        ["ip", "-n", namespace, "addr", "add", f"{CONTROL_PLANE}/32", "dev", far_end],
        ["ip", "-n", namespace, "addr", "add", f"{METADATA}/32", "dev", far_end],
        ["ip", "-n", namespace, "link", "set", far_end, "up"],
        ["ip", "-n", namespace, "link", "set", "lo", "up"],
        ["ip", "-n", namespace, "route", "add", "default", "via", "198.51.100.1"],
        ["ip", "route", "add", f"{METADATA}/32", "via", PUBLIC, "dev", host_end],
    ]
    server: subprocess.Popen[bytes] | None = None
    try:
        for command in setup:
            subprocess.run(command, check=True, capture_output=True)
        server = subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, "-I", "-S", "-c", SERVER])
        deadline = time.monotonic() + 10
        while _connect(PUBLIC, INTERNET_PORT) != f"ok:{PUBLIC}" and time.monotonic() < deadline:
            time.sleep(0.05)
        yield
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "netns", "del", namespace], check=False, capture_output=True)  # takes the veths along


@pytest.fixture(scope="module")
def host_server() -> Iterator[int]:
    """A server on every address of the host, IPv4 and IPv6 (``::``, dual stack); yields its port."""
    listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    listener.bind(("::", 0))
    listener.listen(16)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                with connection:
                    connection.sendall(b"host\n")

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()


@pytest.fixture(scope="module")
def network() -> str:
    return podnet.ensure_open_network([CONTROL_PLANE])


@contextlib.contextmanager
def container(image: str, *args: str) -> Iterator[str]:
    """A detached container running ``args`` (after its ``podman run`` flags and the image); removed afterwards."""
    flags = [arg for arg in args if arg.startswith("--")]
    command = [arg for arg in args if not arg.startswith("--")]
    started = subprocess.run([*RUN, *flags, image, *command], check=True, capture_output=True, text=True)
    identity = started.stdout.strip()
    try:
        yield identity
    finally:
        subprocess.run([*PODMAN, "rm", "-f", "-t", "0", identity], check=False, capture_output=True)


def inspect(identity: str, template: str) -> str:
    return subprocess.run(
        [*PODMAN, "inspect", "--format", template, identity], check=True, capture_output=True, text=True
    ).stdout.strip()


async def exec_in(identity: str, *command: str) -> str:
    """``podman exec`` without blocking the event loop (the forwarder under test runs on it)."""
    process = await asyncio.create_subprocess_exec(
        *PODMAN, "exec", identity, *command, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode().strip()


def exec_sync(identity: str, *command: str) -> str:
    return subprocess.run([*PODMAN, "exec", identity, *command], check=True, capture_output=True, text=True).stdout


def _connect(host: str, port: int) -> str:
    try:
        with socket.create_connection((host, port), timeout=5) as connection:
            return "ok:" + connection.recv(100).decode().strip()
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))


def _bridge_link_local(bridge: str) -> str:
    """The bridge's IPv6 link-local address, once duplicate address detection has finished (else nothing answers)."""
    deadline = time.monotonic() + 10
    while True:
        shown = subprocess.run(
            ["ip", "-6", "-j", "addr", "show", "dev", bridge], check=False, capture_output=True, text=True
        )
        infos = [info for link in json.loads(shown.stdout or "[]") for info in link.get("addr_info", [])]
        ready = [i["local"] for i in infos if i.get("scope") == "link" and not i.get("tentative")]
        if ready or time.monotonic() > deadline:
            assert ready, f"{bridge} has no usable link-local address: {infos}"
            return str(ready[0])
        time.sleep(0.1)


def _bridge() -> str:
    shown = subprocess.run([*PODMAN, "network", "inspect", podnet.NETWORK], check=True, capture_output=True)
    return str(json.loads(shown.stdout)[0]["network_interface"])


def test_open_network_reaches_the_internet_but_not_the_host_metadata_control_plane_or_neighbours(
    image: str, internet: None, host_server: int, network: str
) -> None:
    host_address = _default_route_source()
    # The host itself reaches every one of them: what a container is refused below, the rules refuse.
    assert _connect(CONTROL_PLANE, INTERNET_PORT) == f"ok:{CONTROL_PLANE}"
    assert _connect(METADATA, INTERNET_PORT) == f"ok:{METADATA}"
    assert _connect(host_address, host_server) == "ok:host"
    server = ["python3", "-c", SERVER]
    with (
        container(image, f"--network={network}", *server) as neighbour,
        container(image, f"--network={network}", *SLEEP) as tenant,
    ):
        neighbour_address = inspect(neighbour, "{{.NetworkSettings.Networks.nodus.IPAddress}}")
        gateway = inspect(tenant, "{{.NetworkSettings.Networks.nodus.Gateway}}")
        link_local = _bridge_link_local(_bridge())
        targets = [
            [PUBLIC, INTERNET_PORT],
            [CONTROL_PLANE, INTERNET_PORT],
            [METADATA, INTERNET_PORT],
            [host_address, host_server],
            [gateway, host_server],
            [gateway, 22],
            [f"{link_local}%eth0", host_server],
            [neighbour_address, INTERNET_PORT],
        ]
        results = json.loads(exec_sync(tenant, "python3", "-c", PROBE, json.dumps(targets)))
    assert dict(zip([f"{h}:{p}" for h, p in targets], results, strict=True)) == {
        f"{PUBLIC}:{INTERNET_PORT}": f"ok:{PUBLIC}",
        f"{CONTROL_PLANE}:{INTERNET_PORT}": "ECONNREFUSED",
        f"{METADATA}:{INTERNET_PORT}": "ECONNREFUSED",
        f"{host_address}:{host_server}": "ECONNREFUSED",
        f"{gateway}:{host_server}": "ECONNREFUSED",
        f"{gateway}:22": "ECONNREFUSED",
        f"{link_local}%eth0:{host_server}": "ECONNREFUSED",
        f"{neighbour_address}:{INTERNET_PORT}": "ECONNREFUSED",
    }


def _default_route_source() -> str:
    shown = subprocess.run(["ip", "-j", "route", "get", "1.1.1.1"], capture_output=True, text=True, check=True)
    return str(json.loads(shown.stdout)[0]["prefsrc"])


@pytest.fixture
async def echo_socket(tmp_path: Path) -> AsyncIterator[Path]:
    """A unix socket on the host that echoes each connection's bytes until the client half-closes."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    path = tmp_path / "egress.sock"
    server = await asyncio.start_unix_server(echo, str(path))
    yield path
    server.close()
    await server.wait_closed()


async def test_forwarder_relays_127_0_0_1_3128_in_a_network_none_container_to_the_host_socket(
    image: str, echo_socket: Path
) -> None:
    with container(image, "--network=none", *SLEEP) as tenant:
        pid = int(inspect(tenant, "{{.State.Pid}}"))
        forwarder = await podnet.start_forwarder(pid, echo_socket)
        try:
            # No thread of the agent was left in the container's namespace.
            home = os.readlink("/proc/self/ns/net")
            tasks = os.listdir("/proc/self/task")
            assert {os.readlink(f"/proc/self/task/{tid}/ns/net") for tid in tasks} == {home}
            # 1 MiB there and back, byte for byte, and twice (one connection does not use the forwarder up).
            expected = f"{256 * 4096} {hashlib.sha256(bytes(range(256)) * 4096).hexdigest()}"
            for _ in range(2):
                assert await exec_in(tenant, "python3", "-c", ECHO_PROBE, "3128") == expected
            # Nothing else is reachable: no other port, no address outside, and not the agent's host.
            others = [["127.0.0.1", 3129], ["198.51.100.2", 8080], ["10.88.0.1", 22]]
            assert json.loads(await exec_in(tenant, "python3", "-c", PROBE, json.dumps(others))) == [
                "ECONNREFUSED",
                "ENETUNREACH",
                "ENETUNREACH",
            ]
        finally:
            forwarder.close()
            await forwarder.wait_closed()
        closed = json.loads(await exec_in(tenant, "python3", "-c", PROBE, json.dumps([["127.0.0.1", 3128]])))
        assert closed == ["ECONNREFUSED"]


async def test_forwarder_refuses_a_port_the_tenant_took_first_and_a_process_that_is_gone(
    image: str, echo_socket: Path
) -> None:
    squat = "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 3128)); s.listen(); time.sleep(300)"
    with container(image, "--network=none", "python3", "-c", squat) as tenant:
        pid = int(inspect(tenant, "{{.State.Pid}}"))
        deadline = time.monotonic() + 10
        # Listening on 127.0.0.1:3128 (0C38), as /proc/<pid>/net/tcp shows it from the host.
        while ":0C38 00000000:0000 0A" not in await asyncio.to_thread(Path(f"/proc/{pid}/net/tcp").read_text):
            assert time.monotonic() < deadline, "the squatter never listened"
            await asyncio.sleep(0.05)
        with pytest.raises(OSError) as taken:
            await podnet.start_forwarder(pid, echo_socket)
        assert taken.value.errno == errno.EADDRINUSE
    gone = await asyncio.create_subprocess_exec("true")
    await gone.wait()
    with pytest.raises(FileNotFoundError):
        await podnet.start_forwarder(gone.pid, echo_socket)
    for not_a_container in (1, os.getpid()):
        with pytest.raises(ValueError):
            await podnet.start_forwarder(not_a_container, echo_socket)


# Run inside a container: hold one connection more than the forwarder's cap open, each echoing a byte.
FLOOD = """\
import json, socket, sys
held, answers = [], []
for _ in range(int(sys.argv[1]) + 1):
    connection = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    connection.sendall(b"x")
    try:
        answers.append(connection.recv(1).decode() or "closed")
    except ConnectionResetError:
        answers.append("closed")
    held.append(connection)
print(json.dumps(answers))
"""


async def test_forwarder_holds_at_most_its_cap_of_connections_from_one_tenant(image: str, echo_socket: Path) -> None:
    with container(image, "--network=none", *SLEEP) as tenant:
        forwarder = await podnet.start_forwarder(int(inspect(tenant, "{{.State.Pid}}")), echo_socket)
        try:
            cap = podnet.MAX_FORWARDED_CONNECTIONS
            answers = json.loads(await exec_in(tenant, "python3", "-c", FLOOD, str(cap)))
        finally:
            forwarder.close()
            await forwarder.wait_closed()
    # The first ``cap`` are relayed; the one beyond is closed unanswered.
    assert answers == ["x"] * cap + ["closed"]


def _nodus_rules(command: str) -> list[str]:
    listed = subprocess.run([command, "-S"], check=True, capture_output=True, text=True).stdout.splitlines()
    return [line for line in listed if "NODUS" in line]


def test_ensure_twice_leaves_one_copy_of_each_rule_with_its_jumps_first(network: str) -> None:
    bridge = _bridge()
    jump = ["-i", bridge, "-m", "comment", "--comment", "nodus: egress of Open containers", "-j", "NODUS-EGRESS"]
    # A stale second copy of a jump, and a rule someone put above ours: both set right by the next ensure.
    subprocess.run(["iptables", "-A", "FORWARD", *jump], check=True)
    subprocess.run(["iptables", "-I", "FORWARD", "1", "-i", "nodus-test-x", "-j", "RETURN"], check=True)
    try:
        assert podnet.ensure_open_network([CONTROL_PLANE, "2130706433", "10.200.0.0/16"]) == podnet.NETWORK
        first = {command: _nodus_rules(command) for command in ("iptables", "ip6tables")}
        assert podnet.ensure_open_network([CONTROL_PLANE, "2130706433", "10.200.0.0/16"]) == podnet.NETWORK
    finally:
        subprocess.run(["iptables", "-D", "FORWARD", "-i", "nodus-test-x", "-j", "RETURN"], check=False)
    for command, rules in first.items():
        assert _nodus_rules(command) == rules
        assert len(rules) == len(set(rules)), f"{command}: a rule twice"
        for chain, target in (("INPUT", "NODUS-HOST"), ("FORWARD", "NODUS-EGRESS")):
            listed = subprocess.run([command, "-S", chain], check=True, capture_output=True, text=True).stdout
            jumps = [line for line in listed.splitlines() if line.endswith(f"-j {target}")]
            assert len(jumps) == 1 and listed.splitlines()[1] == jumps[0], f"{command} {chain}: {listed}"
            assert f"-i {bridge} " in jumps[0]
    egress = [rule for rule in first["iptables"] if rule.startswith("-A NODUS-EGRESS")]
    # The control plane's spellings became addresses and networks (2130706433 is 127.0.0.1, refused anyway).
    for destination in ("198.51.100.3/32", "127.0.0.1/32", "10.200.0.0/16", "169.254.0.0/16", "100.100.100.200/32"):
        assert any(f"-d {destination} " in rule for rule in egress), destination
    podnet.ensure_open_network([CONTROL_PLANE])


def test_a_control_plane_name_that_does_not_resolve_installs_nothing_and_says_so() -> None:
    before = _nodus_rules("iptables")
    with pytest.raises(podnet.NetworkSetupFailed, match=re.escape("control plane's 'api.invalid'")):
        podnet.ensure_open_network([CONTROL_PLANE, "api.invalid"])
    assert _nodus_rules("iptables") == before
