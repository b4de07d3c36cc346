"""Which destinations the agent may reach on a Job's behalf (ADR 0032). Pure: nothing here does I/O.

A Job names places that the agent, not the sandboxed program, connects to from the host: URL inputs,
git sources, S3 endpoints, sink databases. The host reaches what a tenant must not: the host itself
(loopback), the cloud's metadata service (link-local), the control plane's database and API server.
So each such destination passes two checks against one :class:`Policy`:

* static (:func:`check_url`, :func:`check_host`), on what the user wrote, at admission and again in
  the agent before it dials: every spelling of an IPv4 address that resolvers accept
  (``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``127.1``), IPv6 literals and the IPv4 addresses they
  carry, names that mean this host (``localhost``, ``*.localhost``), unix socket paths;
* at connect time (:func:`check_address`), on every address the name resolves to. The caller then
  connects to an address it checked and never resolves the name again (DNS rebinding), and checks
  every redirect hop the same way.

Refused whatever the flags: unspecified addresses (0.0.0.0/8, ``::``), link-local ones
(169.254.0.0/16 with the metadata service, fe80::/10), multicast, broadcast, the metadata services'
other addresses, unix sockets and paths, and the control plane's own endpoints
(:attr:`Policy.forbidden`). Loopback (127.0.0.0/8, ``::1``, localhost names) is refused unless
:attr:`Policy.allow_loopback` (tests, and ``nodus dev``, whose hosts are this machine); even then a
forbidden loopback endpoint stays refused. Private ranges (10/8, 172.16/12, 192.168/16, fc00::/7)
are allowed: a customer's database in its own network is a legitimate destination.

IPv6 addresses that carry an IPv4 one (mapped ``::ffff:a.b.c.d``, compatible ``::a.b.c.d``, SIIT,
6to4, NAT64, Teredo) are judged by the IPv4 address they carry. Any loopback address stands for
every other one when matched against a forbidden endpoint, and so does an unspecified one (a server
listening on ``0.0.0.0:8443`` is reached at ``127.0.0.2:8443``).

The Job's egress policy narrows the rest (:meth:`Policy.with_egress`): ``Deny`` refuses every
destination, ``AllowList`` every host outside its allow list and presets.
"""

from __future__ import annotations

import ipaddress
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal
from urllib.parse import urlsplit

from nodus.apimachinery import allowlists

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
EgressPolicy = Literal["Open", "Deny", "AllowList"]

DEFAULT_PORTS = {"https": 443, "http": 80, "postgresql": 5432, "postgres": 5432}
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
# Where clouds serve instance metadata and credentials: AWS, GCP, Azure, OpenStack (169.254.169.254),
# AWS over IPv6 (fd00:ec2::254), Alibaba (100.100.100.200).
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(text) for text in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
_CLASSES: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.ip_network(network), label)
    for network, label in (
        ("127.0.0.0/8", "loopback (this host)"),
        ("::1/128", "loopback (this host)"),
        ("0.0.0.0/8", "unspecified (this host)"),
        ("::/128", "unspecified (this host)"),
        ("169.254.0.0/16", "link-local"),
        ("fe80::/10", "link-local"),
        ("224.0.0.0/4", "multicast"),
        ("ff00::/8", "multicast"),
        ("255.255.255.255/32", "broadcast"),
    )
)
_LOOPBACK = "loopback (this host)"
_UNSPECIFIED = "unspecified (this host)"
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_PUBLIC_FIX = "name a public host; the agent never connects to its own host, link-local addresses or the control plane"


class Refused(Exception):
    """A destination the agent must not reach; the message says which and why, ``fix`` what to do."""

    def __init__(self, message: str, fix: str = _PUBLIC_FIX) -> None:
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class Endpoint:
    """A host, or one port of it: an address in canonical text (``127.0.0.1``, ``::1``) or a lower-case name."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        """``HOST``, ``HOST:PORT``, ``[V6]:PORT`` or a bare IPv6 address; ValueError otherwise."""
        text = text.strip()
        host, port = text, None
        if text.startswith("["):
            inner, bracket, rest = text[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                raise ValueError(f"{text!r} is not HOST[:PORT]")
            host, port = inner, _port(rest[1:], text) if rest else None
        elif text.count(":") == 1:
            host, _, digits = text.partition(":")
            port = _port(digits, text)
        if not host or any(c.isspace() or c in "/@%\\" for c in host):
            raise ValueError(f"{text!r} is not HOST[:PORT]")
        try:
            address = parse_address(host)
        except Refused as exc:
            raise ValueError(str(exc)) from None
        return cls(str(address) if address is not None else _normal_name(host), port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


@dataclass(frozen=True)
class Policy:
    """What may be reached: the server's or agent's flags, and (for one Job) its egress policy."""

    # Loopback destinations are reached (tests, nodus dev); forbidden endpoints stay refused.
    allow_loopback: bool = False
    # The control plane's endpoints: its database, the API server's addresses, operators' additions.
    forbidden: frozenset[Endpoint] = field(default_factory=frozenset)
    # The Job's spec.network.egress: Deny refuses everything, AllowList what ``allow`` does not name.
    egress: EgressPolicy = "Open"
    allow: tuple[str, ...] = ()

    def forbid(self, *endpoints: Endpoint) -> Policy:
        """This policy with ``endpoints`` refused too."""
        return replace(self, forbidden=self.forbidden | frozenset(endpoints))

    def with_egress(self, policy: str, allow: Iterable[str] = (), presets: Iterable[str] = ()) -> Policy:
        """This policy narrowed to a Job's egress (``allow`` plus the ``presets``' hosts for AllowList).

        An unknown policy reads as Deny, and unknown presets add nothing: the narrowest reading.
        """
        egress: EgressPolicy = "Open" if policy == "Open" else "AllowList" if policy == "AllowList" else "Deny"
        hosts = list(allow)
        for name in presets:
            hosts += allowlists.PRESETS.get(name, ())
        return replace(self, egress=egress, allow=tuple(dict.fromkeys(hosts)))


def check_url(url: str, policy: Policy) -> tuple[str, int]:
    """The host and port of ``url`` if the policy lets the agent reach them (see :func:`check_host`).

    Refused: characters that parsers disagree on (whitespace, controls, backslashes), no host, a bad
    port. The scheme is the caller's business; its default port is used when none is written.
    """
    if any(c.isspace() or ord(c) < 0x20 or c in "\\\x7f" for c in url):
        raise Refused("the URL holds whitespace, control characters or backslashes", "write a plain URL")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        raise Refused(f"{_shown(url)} has a malformed host or port", "write a plain URL") from None
    if not host:
        raise Refused(f"{_shown(url)} names no host", "write a URL with a host, such as https://example.com/file")
    port = port if port is not None else DEFAULT_PORTS.get(parts.scheme.lower(), 443)
    check_host(host, port, policy)
    return host, port


def check_host(host: str, port: int | None, policy: Policy) -> None:
    """Raise :class:`Refused` unless the policy lets the agent connect to ``host`` (port ``port``).

    ``host`` is what the user wrote: a name, an address in any spelling, or a path (a unix socket).
    A name passes unless it means this host or is a forbidden endpoint; what it resolves to is
    :func:`check_address`'s to judge, at connect time.
    """
    if not host:
        raise Refused("no host is named", "name the host to connect to")
    if host.startswith(("/", "@")) or host.lower().startswith("unix:"):
        raise Refused(
            f"{_shown(host)} is a unix socket or path on the agent's host: refused",
            "name a host reached over TCP; unix sockets on the agent's host are never used",
        )
    if any(c.isspace() or ord(c) < 0x20 or c in "\\\x7f/@?#" for c in host):
        raise Refused(f"{_shown(host)} is not a host name or address", "name a host such as db.example.com")
    address = parse_address(host)
    if address is not None:
        check_address(address, port, policy)
        _check_egress(str(address), policy)
        return
    if "%" in host:
        raise Refused(f"{_shown(host)} is percent-encoded: refused", "write the host name without %-escapes")
    name = _normal_name(host)
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        if not policy.allow_loopback:
            raise Refused(f"{name} is {_LOOPBACK}: refused", _loopback_fix())
        _check_forbidden(ipaddress.ip_address("127.0.0.1"), port, policy, name)
    for entry in policy.forbidden:
        if entry.host == name and entry.port in (None, port):
            raise Refused(f"{_at(name, port)} is the control plane's own endpoint ({entry}): refused")
    _check_egress(name, policy)


def check_address(address: Address, port: int | None, policy: Policy, name: str | None = None) -> None:
    """Raise :class:`Refused` unless the policy lets the agent connect to ``address`` (``port``).

    ``name`` is the host name that resolved to it, for the message (``db.example.com resolves to
    127.0.0.1, which is loopback``). The Job's egress is not checked here: it is about names.
    """
    label = address_class(address)
    if label is not None and not (label == _LOOPBACK and policy.allow_loopback):
        fix = _loopback_fix() if label == _LOOPBACK else _PUBLIC_FIX
        raise Refused(f"{_subject(address, name)} {label}: refused", fix)
    _check_forbidden(address, port, policy, name)


def address_class(address: Address) -> str | None:
    """Why ``address`` is never a destination (``"link-local (the cloud metadata service)"``), or None.

    An IPv6 address carrying an IPv4 one is judged by the IPv4 address. Loopback is reported too:
    whether it is allowed is the policy's decision.
    """
    carried = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    if carried is not None:
        return address_class(carried)
    if address in METADATA_ADDRESSES:
        return "link-local (the cloud metadata service)" if address.is_link_local else "the cloud metadata service"
    for network, label in _CLASSES:
        if address.version == network.version and address in network:
            return label
    return None


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, SIIT, compatible, 6to4, NAT64, Teredo), or None."""
    address = ipaddress.IPv6Address(int(address))  # drop a zone (scope id)
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _SIIT or any(address in network for network in _NAT64):
        return low
    if address in _COMPATIBLE and int(address) > 1:  # ::a.b.c.d, but not :: and ::1 themselves
        return low
    return None


def parse_address(host: str) -> Address | None:
    """The address ``host`` spells, in any form a resolver accepts; None for a host name.

    IPv6 with or without brackets and zone; IPv4 as the WHATWG URL standard and ``inet_aton`` read
    it: one to four parts, each decimal, octal (leading 0) or hexadecimal (0x), the last one filling
    the remaining bytes (``127.1``, ``2130706433``, ``0x7f.1``). A name whose last label is numeric
    but that is no valid address is refused, as browsers refuse it.
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            raise Refused(f"{_shown(host)} is not a valid IPv6 address", "write a valid address") from None
    labels = text.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()  # a trailing dot
    if not labels or not _numeric(labels[-1]):
        return None
    value = _ipv4_value(labels)
    if value is None:
        raise Refused(f"{_shown(host)} is neither a host name nor a valid IPv4 address", "write a valid address")
    return ipaddress.IPv4Address(value)


def _ipv4_value(labels: list[str]) -> int | None:
    if len(labels) > 4:
        return None
    numbers: list[int] = []
    for label in labels:
        number = _number(label)
        if number is None:
            return None
        numbers.append(number)
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for i, number in enumerate(head):
        value += number << (8 * (3 - i))
    return value


def _numeric(label: str) -> bool:
    lower = label.lower()
    if lower.startswith("0x"):
        return all(c in "0123456789abcdef" for c in lower[2:])
    return lower.isascii() and lower.isdigit()


def _number(label: str) -> int | None:
    lower = label.lower()
    try:
        if lower.startswith("0x"):
            return int(lower[2:], 16) if lower[2:] else 0
        if len(lower) > 1 and lower.startswith("0"):
            return int(lower[1:], 8)
        return int(lower, 10) if lower.isascii() and lower.isdigit() else None
    except ValueError:
        return None


def _check_forbidden(address: Address, port: int | None, policy: Policy, name: str | None) -> None:
    for entry in policy.forbidden:
        if entry.port not in (None, port):
            continue
        try:
            forbidden = ipaddress.ip_address(entry.host)
        except ValueError:
            continue  # a name: compared by name in check_host; the agent resolves its names at start
        if _same_host(address, forbidden):
            raise Refused(f"{_subject(address, name, port)} the control plane's own endpoint ({entry}): refused")


def _same_host(address: Address, forbidden: Address) -> bool:
    carried = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    address = carried or address
    if address == forbidden:
        return True
    here = (_LOOPBACK, _UNSPECIFIED)
    return address_class(address) in here and address_class(forbidden) in here


def _check_egress(host: str, policy: Policy) -> None:
    if policy.egress == "Deny":
        raise Refused(
            f"the Job's egress policy is Deny, so the agent reaches no host on its behalf, {host} included",
            f"set spec.network.egress.policy to AllowList with {host} in spec.network.egress.allow, or to Open",
        )
    if policy.egress == "AllowList" and not allowlists.allowed(host, policy.allow):
        raise Refused(
            f"{host} is not in the Job's egress allow list",
            f"add {host} to spec.network.egress.allow",
        )


def _subject(address: Address, name: str | None, port: int | None = None) -> str:
    shown = _at(str(address), port)
    carried = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    if carried is not None:
        shown += f" (carrying {carried})"
    return f"{name} resolves to {shown}, which is" if name and name != str(address) else f"{shown} is"


def _at(host: str, port: int | None) -> str:
    if port is None:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _loopback_fix() -> str:
    return (
        "name a host other than the agent's own; loopback is reached only when the API server and agents run "
        "with --allow-loopback-endpoints (tests, nodus dev)"
    )


def _normal_name(name: str) -> str:
    # NFKC folds the look-alikes IDNA would map onto ASCII (fullwidth "localhost", U+FF4C...).
    return unicodedata.normalize("NFKC", name).casefold().strip().removesuffix(".")


def _port(digits: str, text: str) -> int:
    if not digits.isdigit() or not 0 < int(digits) < 65536:
        raise ValueError(f"{text!r} is not HOST[:PORT]")
    return int(digits)


def redact_url(url: str) -> str:
    """``url`` fit for a message: without user info (a token) or query string, at most 200 characters."""
    try:
        parts = urlsplit(url)
        url = parts._replace(netloc=parts.netloc.rpartition("@")[2], query="…" if parts.query else "").geturl()
    except ValueError:
        url = url.partition("://")[0] + "://…" if "://" in url else "…"
    return url if len(url) <= 200 else url[:199] + "…"


def _shown(text: str) -> str:
    return repr(redact_url(text) if "://" in text else text if len(text) <= 200 else text[:199] + "…")
