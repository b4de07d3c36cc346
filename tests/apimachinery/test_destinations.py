"""The destination policy (ADR 0032): every spelling of a refused address, with and without loopback."""

from __future__ import annotations

import ipaddress

import pytest

from nodus.apimachinery import destinations
from nodus.apimachinery.destinations import Endpoint, Policy, Refused

STRICT = Policy()
# nodus dev: loopback allowed, its database and API server forbidden.
DEV = Policy(
    allow_loopback=True,
    forbidden=frozenset(
        {Endpoint.parse("127.0.0.1:5432"), Endpoint.parse("0.0.0.0:8443"), Endpoint.parse("db.internal")}
    ),
)


def refusal(url: str, policy: Policy) -> str | None:
    try:
        destinations.check_url(url, policy)
    except Refused as refused:
        return str(refused)
    return None


# url, the refusal without loopback, the refusal with loopback but the control plane forbidden (None: allowed).
CASES = [
    pytest.param("https://example.com/data.csv", None, None, id="public-name"),
    pytest.param("https://10.1.2.3/data.csv", None, None, id="private-address"),
    pytest.param("https://[2001:db8::1]/x", None, None, id="public-ipv6"),
    pytest.param("https://127.0.0.1/x", "127.0.0.1 is loopback (this host): refused", None, id="loopback"),
    pytest.param("https://127.9.9.9/x", "127.9.9.9 is loopback (this host): refused", None, id="loopback-range"),
    pytest.param("https://[::1]/x", "::1 is loopback (this host): refused", None, id="ipv6-loopback"),
    pytest.param("https://localhost/x", "localhost is loopback (this host): refused", None, id="localhost"),
    pytest.param("https://LOCALHOST./x", "localhost is loopback (this host): refused", None, id="localhost-dot"),
    pytest.param("https://api.localhost/x", "api.localhost is loopback (this host): refused", None, id="sub-localhost"),
    pytest.param("https://ｌｏｃａｌｈｏｓｔ/x", "localhost is loopback (this host): refused", None, id="fullwidth"),  # noqa: RUF001
    pytest.param("https://2130706433/x", "127.0.0.1 is loopback (this host): refused", None, id="decimal"),
    pytest.param("https://0x7f.1/x", "127.0.0.1 is loopback (this host): refused", None, id="hex-short"),
    pytest.param("https://0x7f000001/x", "127.0.0.1 is loopback (this host): refused", None, id="hex"),
    pytest.param("https://0177.0.0.1/x", "127.0.0.1 is loopback (this host): refused", None, id="octal"),
    pytest.param("https://127.1/x", "127.0.0.1 is loopback (this host): refused", None, id="two-parts"),
    pytest.param("https://127.0.1/x", "127.0.0.1 is loopback (this host): refused", None, id="three-parts"),
    pytest.param("https://127.0.0.1./x", "127.0.0.1 is loopback (this host): refused", None, id="trailing-dot"),
    pytest.param(
        "https://[::ffff:127.0.0.1]/x",
        "::ffff:7f00:1 (carrying 127.0.0.1) is loopback (this host): refused",
        None,
        id="ipv4-mapped",
    ),
    pytest.param(
        "https://[::127.0.0.1]/x", "::7f00:1 (carrying 127.0.0.1) is loopback (this host): refused", None, id="compat"
    ),
    pytest.param(
        "https://[64:ff9b::7f00:1]/x",
        "64:ff9b::7f00:1 (carrying 127.0.0.1) is loopback (this host): refused",
        None,
        id="nat64",
    ),
    pytest.param(
        "https://[2002:7f00:1::]/x",
        "2002:7f00:1:: (carrying 127.0.0.1) is loopback (this host): refused",
        None,
        id="6to4",
    ),
    pytest.param(
        "https://169.254.169.254/latest/meta-data/",
        "169.254.169.254 is link-local (the cloud metadata service): refused",
        "169.254.169.254 is link-local (the cloud metadata service): refused",
        id="metadata",
    ),
    pytest.param(
        "https://2852039166/",
        "169.254.169.254 is link-local (the cloud metadata service): refused",
        "169.254.169.254 is link-local (the cloud metadata service): refused",
        id="metadata-decimal",
    ),
    pytest.param(
        "https://[::ffff:a9fe:a9fe]/",
        "::ffff:a9fe:a9fe (carrying 169.254.169.254) is link-local (the cloud metadata service): refused",
        "::ffff:a9fe:a9fe (carrying 169.254.169.254) is link-local (the cloud metadata service): refused",
        id="metadata-mapped",
    ),
    pytest.param(
        "https://[fd00:ec2::254]/",
        "fd00:ec2::254 is the cloud metadata service: refused",
        "fd00:ec2::254 is the cloud metadata service: refused",
        id="metadata-aws-ipv6",
    ),
    pytest.param(
        "https://169.254.1.2/", "169.254.1.2 is link-local: refused", "169.254.1.2 is link-local: refused", id="ll"
    ),
    pytest.param(
        "https://[fe80::1%25eth0]/",
        "fe80::1%25eth0 is link-local: refused",
        "fe80::1%25eth0 is link-local: refused",
        id="ipv6-link-local-zone",
    ),
    pytest.param(
        "https://0.0.0.0/",
        "0.0.0.0 is unspecified (this host): refused",
        "0.0.0.0 is unspecified (this host): refused",
        id="unspecified",
    ),
    pytest.param("https://0/", "0.0.0.0 is unspecified (this host): refused", "0.0.0.0 is unspecified", id="zero"),
    pytest.param("https://[::]/", ":: is unspecified (this host): refused", ":: is unspecified", id="ipv6-unspecified"),
    pytest.param("https://224.0.0.251/", "224.0.0.251 is multicast: refused", "multicast", id="multicast"),
    pytest.param("https://[ff02::1]/", "ff02::1 is multicast: refused", "multicast", id="ipv6-multicast"),
    pytest.param("https://255.255.255.255/", "255.255.255.255 is broadcast: refused", "broadcast", id="broadcast"),
    pytest.param(
        "https://127.0.0.1:5432/",
        "127.0.0.1 is loopback (this host): refused",
        "127.0.0.1:5432 is the control plane's own endpoint (127.0.0.1:5432): refused",
        id="control-plane-database",
    ),
    pytest.param(
        "https://127.0.0.2:5432/",
        "127.0.0.2 is loopback (this host): refused",
        "127.0.0.2:5432 is the control plane's own endpoint (127.0.0.1:5432): refused",
        id="control-plane-other-loopback",
    ),
    pytest.param(
        "https://localhost:8443/",
        "localhost is loopback (this host): refused",
        "localhost resolves to 127.0.0.1:8443, which is the control plane's own endpoint (0.0.0.0:8443): refused",
        id="control-plane-api-server-all-addresses",
    ),
    pytest.param(
        "https://[::ffff:127.0.0.1]:5432/",
        "::ffff:7f00:1 (carrying 127.0.0.1) is loopback (this host): refused",
        "[::ffff:7f00:1]:5432 (carrying 127.0.0.1) is the control plane's own endpoint (127.0.0.1:5432): refused",
        id="control-plane-mapped",
    ),
    pytest.param(
        "https://DB.internal./x",
        None,
        "db.internal:443 is the control plane's own endpoint (db.internal): refused",
        id="control-plane-by-name",
    ),
    pytest.param("https://127.0.0.1:5433/", "127.0.0.1 is loopback (this host): refused", None, id="other-port"),
    pytest.param(
        "https://1.2.3.4.5/", "'1.2.3.4.5' is neither a host name nor a valid IPv4 address", "neither", id="5"
    ),
    pytest.param(
        "https://0x7g.1/", "'0x7g.1' is neither a host name nor a valid IPv4 address", "neither", id="bad-hex"
    ),
    pytest.param(
        "https://256.1.1.1/", "'256.1.1.1' is neither a host name nor a valid IPv4 address", "neither", id="256"
    ),
    pytest.param("https://%6c%6fcalhost/", "'%6c%6fcalhost' is percent-encoded: refused", "percent", id="percent"),
    pytest.param("https:///x", "'https:///x' names no host", "names no host", id="no-host"),
    pytest.param("https://a:99999/", "'https://a:99999/' has a malformed host or port", "malformed", id="bad-port"),
    pytest.param(
        "https://evil.com\\@127.0.0.1/",
        "the URL holds whitespace, control characters or backslashes",
        "backslashes",
        id="backslash",
    ),
    pytest.param("https://user:secret@127.0.0.1/", "127.0.0.1 is loopback (this host): refused", None, id="userinfo"),
]


@pytest.mark.parametrize(("url", "strict", "dev"), CASES)
def test_what_the_agent_may_reach(url: str, strict: str | None, dev: str | None) -> None:
    got_strict, got_dev = refusal(url, STRICT), refusal(url, DEV)
    assert (got_strict is None) == (strict is None), got_strict
    assert (got_dev is None) == (dev is None), got_dev
    if strict is not None:
        assert got_strict is not None and got_strict.startswith(strict)
    if dev is not None:
        assert got_dev is not None and dev in got_dev


def test_messages_never_carry_user_info() -> None:
    message = refusal("https://user:secret@1.2.3.4.5:1/x?token=t", STRICT)
    assert message is not None and "secret" not in message


@pytest.mark.parametrize(
    ("host", "message"),
    [
        pytest.param("/var/run/postgresql", "'/var/run/postgresql' is a unix socket or path", id="socket-dir"),
        pytest.param("@abstract", "'@abstract' is a unix socket or path", id="abstract-socket"),
        pytest.param("unix:/tmp/s", "'unix:/tmp/s' is a unix socket or path", id="unix-scheme"),
        pytest.param("", "no host is named", id="empty"),
        pytest.param("a b", "'a b' is not a host name or address", id="space"),
    ],
)
def test_hosts_that_are_not_network_hosts(host: str, message: str) -> None:
    with pytest.raises(Refused) as caught:
        destinations.check_host(host, 5432, DEV)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("egress", "allow", "presets", "host", "message"),
    [
        pytest.param("Open", [], [], "example.com", None, id="open"),
        pytest.param("Deny", [], [], "example.com", "the Job's egress policy is Deny", id="deny"),
        pytest.param("AllowList", ["example.com"], [], "example.com", None, id="allowed"),
        pytest.param("AllowList", ["*.example.com"], [], "a.example.com", None, id="allowed-pattern"),
        pytest.param("AllowList", [], ["github"], "github.com", None, id="preset"),
        pytest.param(
            "AllowList", ["example.com"], [], "other.com", "other.com is not in the Job's egress allow", id="no"
        ),
        pytest.param("Nonsense", [], [], "example.com", "the Job's egress policy is Deny", id="unknown-reads-deny"),
    ],
)
def test_the_jobs_egress_narrows_the_policy(
    egress: str, allow: list[str], presets: list[str], host: str, message: str | None
) -> None:
    got = refusal(f"https://{host}/x", STRICT.with_egress(egress, allow, presets))
    assert got == message if message is None else (got is not None and got.startswith(message))


def test_an_allow_listed_host_is_still_judged_by_its_address() -> None:
    assert refusal("https://169.254.169.254/", STRICT.with_egress("AllowList", ["169.254.169.254"])) is not None


@pytest.mark.parametrize(
    ("address", "port", "message"),
    [
        pytest.param("127.0.0.1", 443, "db.example.com resolves to 127.0.0.1, which is loopback (this host)", id="lo"),
        pytest.param("169.254.169.254", 80, "db.example.com resolves to 169.254.169.254, which is link-local", id="md"),
        pytest.param("10.0.0.7", 5432, None, id="private"),
        pytest.param("::ffff:10.0.0.7", 5432, None, id="mapped-private"),
    ],
)
def test_resolved_addresses_name_the_host(address: str, port: int, message: str | None) -> None:
    try:
        destinations.check_address(ipaddress.ip_address(address), port, STRICT, name="db.example.com")
    except Refused as refused:
        assert message is not None and str(refused).startswith(message)
    else:
        assert message is None


@pytest.mark.parametrize(
    ("text", "endpoint"),
    [
        pytest.param("127.0.0.1:5432", Endpoint("127.0.0.1", 5432), id="v4-port"),
        pytest.param("DB.Internal", Endpoint("db.internal", None), id="name"),
        pytest.param("[::1]:8443", Endpoint("::1", 8443), id="v6-port"),
        pytest.param("::1", Endpoint("::1", None), id="v6"),
        pytest.param("127.1:80", Endpoint("127.0.0.1", 80), id="short-v4"),
    ],
)
def test_endpoints_parse(text: str, endpoint: Endpoint) -> None:
    assert Endpoint.parse(text) == endpoint


@pytest.mark.parametrize("text", ["", "host:", "host:0", "host:x", "[::1", "/tmp/sock", "a b", "1.2.3.4.5"])
def test_bad_endpoints_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Endpoint.parse(text)
