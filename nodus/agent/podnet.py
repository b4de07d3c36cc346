"""Container networks for the three egress policies of a podman attempt (ADR 0032's destination policy, enforced
in the kernel).

* ``Deny``: the container runs with ``--network none``; it has loopback and nothing else.
* ``AllowList``: ``--network none`` too, plus :func:`start_forwarder`: the agent listens on ``127.0.0.1:3128``
  *inside* the container's network namespace and relays each connection byte for byte to the attempt's
  :class:`~nodus.agent.egress.EgressProxy` unix socket on the host. Nothing runs in the image for it (no python
  needed there): a short-lived thread of the agent enters the namespace, binds and listens, and leaves; the socket
  stays bound to that namespace, and the agent's event loop accepts on it.
* ``Open``: ``--network`` :data:`NETWORK`, a podman bridge network of its own (:data:`SUBNET`, no DNS plugin, so
  containers use the host's resolv.conf servers) that :func:`ensure_open_network` creates once and guards with
  iptables rules keyed on the bridge interface (never on source addresses, which a container with NET_RAW forges):

  - ``NODUS-HOST``, jumped to from ``INPUT`` first for everything entering from the bridge: the host itself (any of
    its addresses, any port, the gateway included) is refused, except replies on connections the host opened and
    DNS to a resolv.conf server that is one of the host's own addresses;
  - ``NODUS-EGRESS``, jumped to first from ``FORWARD`` and from ``CNI-ADMIN`` (the CNI firewall plugin's chain for
    administrators' overrides, evaluated before its per-container ACCEPTs, so a plugin that later puts its own jump
    above ours is still overridden): refused are link-local 169.254.0.0/16 (the metadata service), the other
    metadata addresses, loopback, unspecified, multicast and broadcast, the control plane's addresses (every address
    its names resolve to now, or whole networks given in CIDR form), and other containers on the same bridge
    (tenants do not reach each other; this needs ``br_netfilter``, without it bridged traffic bypasses iptables).

  Private ranges (10/8, 172.16/12, 192.168/16) and CGNAT (100.64/10, but for 100.100.100.200) stay reachable, as
  the agent's own destination policy allows them (ADR 0032): a customer's database in its own network is a
  legitimate destination. A provider whose internal networks must stay out of reach lists them among the
  ``control_plane`` entries (CIDR).

  The network has no IPv6: every IPv6 packet from the bridge is refused, to the host (whose link-local address on
  the bridge would otherwise reach services listening on ``::``) and beyond.

Refusals are REJECTs, so a program sees "connection refused" at once instead of a timeout. Re-running
:func:`ensure_open_network` is idempotent: each chain's content is replaced in one ``iptables-restore`` transaction
(no moment without rules) and each jump is left as the single first rule of its chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ipaddress
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from nodus.apimachinery import destinations

NETWORK = "nodus"
SUBNET = "10.89.64.0/24"
# Addresses a container can be given: the subnet less its network, gateway and broadcast addresses.
ADDRESSES = ipaddress.ip_network(SUBNET).num_addresses - 3
HOST_CHAIN = "NODUS-HOST"
EGRESS_CHAIN = "NODUS-EGRESS"
# The CNI firewall plugin jumps here before accepting a container's traffic; it never flushes this chain.
CNI_ADMIN_CHAIN = "CNI-ADMIN"
PODMAN_FLAGS = ("--cgroup-manager=cgroupfs",)
_COMMENT = "nodus: egress of Open containers"
# Always refused beyond the bridge, as destinations.address_class refuses them for the agent itself.
_NEVER = ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32")
_CLONE_NEWNET = 0x40000000
_CHUNK_BYTES = 64 * 1024
# One attempt's program must not exhaust the agent's file descriptors through the forwarder.
MAX_FORWARDED_CONNECTIONS = 256


class NetworkSetupFailed(Exception):
    """The network or its rules could not be put in place; the message says which command failed and why."""


def ensure_open_network(control_plane: Sequence[str], podman: str = "podman") -> str:
    """Create (once) the ``Open`` bridge network and (re)install its iptables rules; returns :data:`NETWORK`.

    ``control_plane`` holds what the agent knows of the control plane: host names, addresses, ``HOST:PORT``
    endpoints (the whole host is refused, on every port) or CIDR networks. Names are resolved now; a name that
    does not resolve raises :class:`NetworkSetupFailed` (refusing to guard nothing). Call it again when the
    control plane's addresses change: the rules are replaced, not added to.
    """
    forbidden = _forbidden_networks(control_plane)
    bridge, dns_servers = _ensure_network(podman)
    dns_servers += [str(a) for a in nameservers(Path("/etc/resolv.conf"))]
    _restore("iptables-restore", ipv4_rules(bridge, forbidden, dns_servers))
    _restore("ip6tables-restore", ipv6_rules(bridge))
    for command in ("iptables", "ip6tables"):
        _ensure_first_jump(command, "INPUT", bridge, HOST_CHAIN)
        _ensure_first_jump(command, "FORWARD", bridge, EGRESS_CHAIN)
    _ensure_chain("iptables", CNI_ADMIN_CHAIN)
    _ensure_first_jump("iptables", CNI_ADMIN_CHAIN, bridge, EGRESS_CHAIN)
    return NETWORK


def ipv4_rules(bridge: str, forbidden: Iterable[ipaddress.IPv4Network], dns_servers: Iterable[str]) -> str:
    """The ``iptables-restore --noflush`` text that replaces both chains' content (declaring a chain flushes it)."""
    lines = ["*filter", f":{HOST_CHAIN} - [0:0]", f":{EGRESS_CHAIN} - [0:0]"]
    host = f"-A {HOST_CHAIN}"
    lines.append(f"{host} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT")
    for server in dict.fromkeys(dns_servers):
        for protocol in ("udp", "tcp"):
            lines.append(f"{host} -d {server}/32 -p {protocol} --dport 53 -j ACCEPT")
    lines.append(f"{host} -p tcp -j REJECT --reject-with tcp-reset")
    lines.append(f"{host} -j REJECT --reject-with icmp-port-unreachable")
    egress = f"-A {EGRESS_CHAIN}"
    lines.append(f"{egress} -o {bridge} -j REJECT --reject-with icmp-port-unreachable")
    never = [ipaddress.IPv4Network(text) for text in _NEVER]
    metadata = [ipaddress.IPv4Network(a) for a in destinations.METADATA_ADDRESSES if a.version == 4]
    for destination in dict.fromkeys([*never, *metadata, *forbidden]):
        lines.append(f"{egress} -d {destination} -p tcp -j REJECT --reject-with tcp-reset")
        lines.append(f"{egress} -d {destination} -j REJECT --reject-with icmp-port-unreachable")
    return "\n".join([*lines, "COMMIT", ""])


def ipv6_rules(bridge: str) -> str:
    """The ``ip6tables-restore --noflush`` text: the network has no IPv6, so every IPv6 packet from it is refused."""
    lines = ["*filter", f":{HOST_CHAIN} - [0:0]", f":{EGRESS_CHAIN} - [0:0]"]
    # Neighbour discovery only, so that a connection to the host's link-local address is refused at once
    # (a reset) rather than left to time out unanswered.
    for kind in ("neighbour-solicitation", "neighbour-advertisement"):
        lines.append(f"-A {HOST_CHAIN} -p ipv6-icmp --icmpv6-type {kind} -m hl --hl-eq 255 -j ACCEPT")
    for chain in (HOST_CHAIN, EGRESS_CHAIN):
        lines.append(f"-A {chain} -p tcp -j REJECT --reject-with tcp-reset")
        lines.append(f"-A {chain} -j REJECT --reject-with icmp6-port-unreachable")
    return "\n".join([*lines, "COMMIT", ""])


def nameservers(resolv_conf: Path) -> list[ipaddress.IPv4Address]:
    """The IPv4 ``nameserver`` addresses of a resolv.conf, but loopback ones (containers are given others)."""
    found: list[ipaddress.IPv4Address] = []
    with contextlib.suppress(OSError):
        for line in resolv_conf.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 2 and fields[0] == "nameserver":
                with contextlib.suppress(ValueError):
                    address = ipaddress.IPv4Address(fields[1])
                    if not address.is_loopback:
                        found.append(address)
    return found


def _forbidden_networks(control_plane: Sequence[str]) -> list[ipaddress.IPv4Network]:
    networks: list[ipaddress.IPv4Network] = []
    for entry in control_plane:
        try:
            network = ipaddress.ip_network(entry.strip(), strict=False)
        except ValueError:
            pass
        else:
            if isinstance(network, ipaddress.IPv4Network):
                networks.append(network)
            continue  # IPv6: the network has none, every IPv6 destination is refused already
        try:
            host = destinations.Endpoint.parse(entry).host
            resolved = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
        except (ValueError, OSError) as error:
            raise NetworkSetupFailed(f"the control plane's {entry!r} cannot be resolved: {error}") from None
        networks += [ipaddress.IPv4Network(info[4][0]) for info in resolved]
    return networks


def _podman(podman: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([podman, *PODMAN_FLAGS, *args], capture_output=True, text=True, check=False)


def _ensure_network(podman: str) -> tuple[str, list[str]]:
    """The network's bridge interface and its DNS servers (its gateways if podman's DNS serves it), creating the
    network first when it is missing."""
    if _podman(podman, "network", "exists", NETWORK).returncode != 0:
        created = _podman(podman, "network", "create", "--disable-dns", "--subnet", SUBNET, NETWORK)
        # Another agent may have created it between the two commands: the inspect below decides.
        if created.returncode != 0 and "already exists" not in created.stderr:
            raise NetworkSetupFailed(f"podman network create {NETWORK} failed: {created.stderr.strip()[-500:]}")
    inspected = _podman(podman, "network", "inspect", NETWORK)
    if inspected.returncode != 0:
        raise NetworkSetupFailed(f"podman network inspect {NETWORK} failed: {inspected.stderr.strip()[-500:]}")
    record = json.loads(inspected.stdout)[0]
    bridge = record.get("network_interface") if isinstance(record, dict) else None
    if not isinstance(bridge, str) or not bridge:
        raise NetworkSetupFailed(f"podman network {NETWORK} names no bridge interface")
    if record.get("ipv6_enabled"):
        # The IPv6 rules refuse everything; a network someone created with IPv6 would be silently v4-only.
        raise NetworkSetupFailed(f"podman network {NETWORK} has IPv6; remove it (podman network rm {NETWORK})")
    subnets = record.get("subnets") or []
    gateways = [str(subnet["gateway"]) for subnet in subnets if isinstance(subnet, dict) and subnet.get("gateway")]
    return bridge, gateways if record.get("dns_enabled") else []


def _run(argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetworkSetupFailed(f"{' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
    return done


def _restore(command: str, rules: str) -> None:
    _run([command, "--noflush", "--wait"], rules)


def _ensure_chain(command: str, chain: str) -> None:
    if subprocess.run([command, "-w", "-S", chain], capture_output=True, check=False).returncode != 0:
        created = subprocess.run([command, "-w", "-N", chain], capture_output=True, text=True, check=False)
        if created.returncode != 0 and "exists" not in created.stderr:
            raise NetworkSetupFailed(f"{command} -N {chain} failed: {created.stderr.strip()}")


def _ensure_first_jump(command: str, chain: str, bridge: str, target: str) -> None:
    """Leave ``-i bridge -j target`` as the one and only jump to ``target`` in ``chain``, at its top.

    A missing first rule is inserted before stale copies are deleted, so traffic is never left unguarded.
    """
    spec = ["-i", bridge, "-m", "comment", "--comment", _COMMENT, "-j", target]
    rules = _numbered_rules(command, chain)
    jumps = [number for number, rule in rules if rule.split()[-2:] == ["-j", target]]
    ours_first = bool(rules) and rules[0][0] in jumps and f"-i {bridge} " in rules[0][1]
    if ours_first and len(jumps) == 1:
        return
    if not ours_first:
        _run([command, "-w", "-I", chain, "1", *spec])
        jumps = [number + 1 for number in jumps]
    else:
        jumps = jumps[1:]
    for number in sorted(jumps, reverse=True):
        _run([command, "-w", "-D", chain, str(number)])


def _numbered_rules(command: str, chain: str) -> list[tuple[int, str]]:
    """The rules of ``chain`` as ``iptables -S`` prints them, numbered from 1 as ``-I``/``-D`` count them."""
    lines = _run([command, "-w", "-S", chain]).stdout.splitlines()
    rules = [line for line in lines if line.startswith(f"-A {chain} ")]
    return list(enumerate(rules, start=1))


class Forwarder:
    """``127.0.0.1:<port>`` inside one container's network namespace, relayed to a unix socket on the host.

    Build it with :func:`start_forwarder`; :meth:`close` it when the attempt has ended.
    """

    def __init__(self, socket_path: Path, port: int) -> None:
        self.socket_path = socket_path
        self.port = port
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()

    def close(self) -> None:
        """Stop listening and end every relayed connection. Idempotent, never blocks."""
        if self._server is not None:
            self._server.close()
        for task in self._connections:
            task.cancel()

    async def wait_closed(self) -> None:
        """Wait until every connection handler has finished (after :meth:`close`)."""
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= MAX_FORWARDED_CONNECTIONS:
            writer.close()
            return
        self._connections.add(task)
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(self.socket_path), limit=_CHUNK_BYTES)
        except OSError:
            self._connections.discard(task)
            writer.close()
            return
        try:
            upload = asyncio.create_task(_copy(reader, up_writer))
            try:
                await _copy(up_reader, writer)
            finally:
                # The proxy has finished (or we are closing): the upload has nobody left to go to.
                upload.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await upload
        finally:
            self._connections.discard(task)
            up_writer.close()
            writer.close()


async def start_forwarder(container_pid: int, socket_path: Path, port: int = 3128) -> Forwarder:
    """Listen on ``127.0.0.1:port`` in the network namespace of process ``container_pid`` (a host pid, as
    ``podman inspect --format {{.State.Pid}}`` gives it) and relay each connection to ``socket_path``.

    Start it before the program runs, so nothing in the container can take the port first. Raises OSError when
    the namespace cannot be entered (the process is gone) or the port cannot be bound.
    """
    if container_pid <= 1 or container_pid == os.getpid():
        raise ValueError(f"{container_pid} is not a container's process")
    listener = await asyncio.to_thread(_in_namespace_thread, container_pid, port)
    forwarder = Forwarder(socket_path, port)
    try:
        forwarder._server = await asyncio.start_server(forwarder._serve, sock=listener, limit=_CHUNK_BYTES)
    except BaseException:
        listener.close()
        raise
    return forwarder


def _in_namespace_thread(pid: int, port: int) -> socket.socket:
    """The listening socket, created by a thread of its own (not ``asyncio.to_thread``'s pool thread, which is
    reused afterwards): setns changes only the calling thread, and that thread ends in the container's namespace."""
    result: list[socket.socket | BaseException] = []

    def work() -> None:
        try:
            result.append(_listen_in(pid, port))
        except BaseException as error:  # handed to the caller's thread
            result.append(error)

    thread = threading.Thread(target=work, name=f"nodus-netns-{pid}", daemon=True)
    thread.start()
    thread.join()
    outcome = result[0]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _listen_in(pid: int, port: int) -> socket.socket:
    # Opened before entering: the fd keeps this very namespace even if the pid is reused meanwhile.
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target)
        try:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind(("127.0.0.1", port))
                listener.listen(128)
                listener.setblocking(False)
            except BaseException:
                listener.close()
                raise
        finally:
            _setns(home)  # the thread ends right after; back home all the same, should it ever be reused
    finally:
        os.close(target)
        os.close(home)
    return listener


def _setns(fd: int) -> None:
    # os.setns is Python 3.12+; the agent runs on 3.11, so libc's, through ctypes.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns into a network namespace: {os.strerror(errno)}")


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while chunk := await source.read(_CHUNK_BYTES):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
