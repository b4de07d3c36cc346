"""A customer's PostgreSQL DSN: read without touching the agent's host, connected to a checked address.

:func:`parse` reads both forms libpq accepts, a URI (``postgresql://user:pw@db.example.com:5432/app
?sslmode=require``) and keywords (``host=db.example.com dbname=app user=loader password='a b'``), and
keeps only what a sink needs: ``host``, ``port``, ``dbname``, ``user``, ``password``, ``sslmode``,
``sslrootcert=system``, ``application_name``, ``options`` and ``connect_timeout``. Everything else is
refused by name, on purpose (ADR 0032):

* several hosts (``host=a,b``) and ``hostaddr``: the address reached must be the host named and checked;
* ``service``, ``servicefile``, ``passfile``, ``sslcert``, ``sslkey``, ``sslrootcert`` and ``sslcrl``
  paths: they make the client read files of the agent's host (a service file can redirect the
  connection, a password file or client key would be sent to whoever the DSN names);
* no host, or a host that is a path (``host=/var/run/postgresql``): a unix socket of the agent's host,
  where the control plane's database may listen.

:func:`connect` checks the host, resolves it once and connects asyncpg to a checked address with every
setting explicit, so that neither ``PG*`` environment variables nor ``~/.pgpass`` nor
``~/.postgresql/*`` of the agent's user play a part. TLS keeps the name: ``verify-full`` verifies the
certificate against the host the DSN names, although the TCP connection goes to its checked address.
``sslmode`` is libpq's: ``disable``; ``allow`` and ``prefer`` (the default) try TLS without verifying
it and fall back to plain text when the server has no TLS; ``require`` (TLS, unverified); ``verify-ca``
and ``verify-full`` (against the system CAs).

Messages never carry the password.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import asyncpg

from nodus.agent import dialing
from nodus.apimachinery import destinations

DEFAULT_PORT = 5432
DEFAULT_CONNECT_TIMEOUT = 60.0
SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
_KEYWORDS = frozenset(
    {"host", "port", "dbname", "user", "password", "sslmode", "sslrootcert", "application_name", "options"}
    | {"connect_timeout"}
)
_REFUSED = {
    "hostaddr": "connects to an address other than the host named; name the host in host",
    "service": "reads a service file of the agent's host; spell the settings out",
    "servicefile": "reads a file of the agent's host; spell the settings out",
    "passfile": "reads a password file of the agent's host; put the password in the DSN",
    "sslcert": "reads a client certificate file of the agent's host; client certificates are not supported",
    "sslkey": "reads a key file of the agent's host; client certificates are not supported",
    "sslcrl": "reads a file of the agent's host",
    "sslcrldir": "reads files of the agent's host",
}


class DSNError(ValueError):
    """A DSN that cannot be used; the message names the problem, never the password."""


@dataclass(frozen=True)
class Target:
    """Where and how to connect, as the DSN says it."""

    host: str
    port: int
    user: str
    database: str
    password: str = field(default="", repr=False)
    sslmode: str = "prefer"
    server_settings: dict[str, str] = field(default_factory=dict)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT


def parse(dsn: str) -> Target:
    """The target ``dsn`` names (URI or keyword form); DSNError for anything refused (module docstring)."""
    text = dsn.strip()
    values = _uri(text) if text.startswith(("postgresql://", "postgres://")) else _keywords(text)
    for key in values:
        if key in _REFUSED:
            raise DSNError(f"the DSN's {key} {_REFUSED[key]}")
        if key not in _KEYWORDS:
            raise DSNError(f"the DSN's {key} is not supported; use only {', '.join(sorted(_KEYWORDS))}")
    host = values.get("host", "")
    if not host:
        raise DSNError("the DSN names no host (a client would use a unix socket of the agent's host); set host")
    if "," in host or "," in values.get("port", ""):
        raise DSNError("the DSN names several hosts; name one")
    user = values.get("user", "")
    if not user:
        raise DSNError("the DSN names no user; set user")
    sslmode = values.get("sslmode", "prefer")
    rootcert = values.get("sslrootcert")
    if rootcert is not None:
        if rootcert != "system":
            raise DSNError("the DSN's sslrootcert names a file of the agent's host; only sslrootcert=system is read")
        sslmode = values.get("sslmode", "verify-full")
    if sslmode not in SSL_MODES:
        raise DSNError(f"the DSN's sslmode {sslmode!r} is not one of {', '.join(SSL_MODES)}")
    settings = {key: values[key] for key in ("application_name", "options") if values.get(key)}
    return Target(
        host=host,
        port=_number(values.get("port"), "port", DEFAULT_PORT),
        user=user,
        database=values.get("dbname") or user,
        password=values.get("password", ""),
        sslmode=sslmode,
        server_settings=settings,
        connect_timeout=float(_number(values.get("connect_timeout"), "connect_timeout", int(DEFAULT_CONNECT_TIMEOUT))),
    )


async def connect(dsn: str, policy: destinations.Policy) -> Any:
    """An asyncpg connection to the database ``dsn`` names, at an address ``policy`` allows.

    Raises DSNError, :class:`~nodus.apimachinery.destinations.Refused`, OSError (no address answers,
    the name does not resolve) or asyncpg's errors (authentication, a missing database).
    """
    target = parse(dsn)
    last: Exception | None = None
    for address in await dialing.resolve(target.host, target.port, policy):
        try:
            return await _connect(target, str(address))
        except OSError as exc:
            last = exc
    assert last is not None
    raise last


async def _connect(target: Target, address: str) -> Any:
    plain = target.sslmode == "disable"
    try:
        return await _asyncpg(target, address, False if plain else _context(target))
    except ConnectionError as exc:
        # A server without TLS answers the SSLRequest with "N", which asyncpg reports as a
        # ConnectionError; libpq's allow and prefer then go on in plain text.
        if plain or target.sslmode not in ("allow", "prefer") or "SSL" not in str(exc):
            raise
    return await _asyncpg(target, address, False)


async def _asyncpg(target: Target, address: str, tls: ssl.SSLContext | bool) -> Any:
    # Every setting explicit: asyncpg reads PG* variables, ~/.pgpass and ~/.postgresql only for what is left out.
    return await asyncpg.connect(
        host=address,
        port=target.port,
        user=target.user,
        password=target.password,
        database=target.database,
        ssl=tls,
        direct_tls=False,
        server_settings=target.server_settings or None,
        timeout=target.connect_timeout,
    )


class _NamedContext(ssl.SSLContext):
    """A client TLS context that verifies (and sends SNI for) the DSN's host name, whatever address the
    connection was made to: asyncio would otherwise use the address asyncpg was given."""

    server_name: str

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return super().wrap_bio(incoming, outgoing, server_side, self.server_name, session)


def _context(target: Target) -> ssl.SSLContext:
    context = _NamedContext(ssl.PROTOCOL_TLS_CLIENT)
    context.server_name = target.host
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if target.sslmode in ("verify-ca", "verify-full"):
        context.load_default_certs()
        context.check_hostname = target.sslmode == "verify-full"
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _uri(text: str) -> dict[str, str]:
    try:
        parts = urlsplit(text)
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise DSNError("the DSN is not a valid postgresql:// URI") from None
    userinfo, at, hostspec = parts.netloc.rpartition("@")
    values: dict[str, str] = {}
    if at:
        user, colon, password = userinfo.partition(":")
        values["user"] = unquote(user)
        if colon:
            values["password"] = unquote(password)
    if "," in hostspec:
        raise DSNError("the DSN names several hosts; name one")
    if hostspec.startswith("["):
        host, _, rest = hostspec[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = hostspec.partition(":")
    if host:
        values["host"] = unquote(host)
    if port:
        values["port"] = port
    if parts.path.strip("/"):
        values["dbname"] = unquote(parts.path[1:])
    for key, value in pairs:
        if key in values:
            raise DSNError(f"the DSN gives {key} twice; give it once")
        values[key] = value
    return values


def _keywords(text: str) -> dict[str, str]:
    """libpq's ``keyword = value`` form: values bare or single-quoted, with backslash escapes."""
    values: dict[str, str] = {}
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return values
        start = i
        while i < n and not text[i].isspace() and text[i] != "=":
            i += 1
        key = text[start:i]
        while i < n and text[i].isspace():
            i += 1
        if not key or i >= n or text[i] != "=":
            raise DSNError("the DSN is neither a postgresql:// URI nor keyword=value pairs")
        i += 1
        while i < n and text[i].isspace():
            i += 1
        value, i = _value(text, i)
        if key in values:
            raise DSNError(f"the DSN gives {key} twice; give it once")
        values[key] = value


def _value(text: str, i: int) -> tuple[str, int]:
    out: list[str] = []
    quoted = i < len(text) and text[i] == "'"
    i += quoted
    while i < len(text):
        c = text[i]
        if quoted and c == "'":
            return "".join(out), i + 1
        if not quoted and c.isspace():
            break
        if c == "\\" and i + 1 < len(text):
            i += 1
            c = text[i]
        out.append(c)
        i += 1
    if quoted:
        raise DSNError("the DSN has an unterminated quoted value")
    return "".join(out), i


def _number(text: str | None, key: str, default: int) -> int:
    if text is None or text == "":
        return default
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise DSNError(f"the DSN's {key} {text!r} is not a number from 1 to 65535")
    return int(text)
