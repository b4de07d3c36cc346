"""Reading a sink's DSN (ADR 0032): both libpq forms, and everything that would touch the agent's host refused.

Connecting is played against a real PostgreSQL in ``test_sinks``; these are the parser's cases.
"""

from __future__ import annotations

import ssl

import pytest

from nodus.agent import dsns
from nodus.agent.dsns import Target


@pytest.mark.parametrize(
    ("dsn", "target"),
    [
        pytest.param(
            "postgresql://loader:s3cret@db.example.com:6432/app?sslmode=require",
            Target("db.example.com", 6432, "loader", "app", "s3cret", "require"),
            id="uri",
        ),
        pytest.param(
            "postgres://loader@db.example.com/app", Target("db.example.com", 5432, "loader", "app"), id="uri-defaults"
        ),
        pytest.param(
            "postgresql://lo%40der:p%2Fw@[2001:db8::5]:5433/my%20db",
            Target("2001:db8::5", 5433, "lo@der", "my db", "p/w"),
            id="uri-encoded-ipv6",
        ),
        pytest.param(
            "postgresql://db.example.com/app?user=loader&password=pw&application_name=etl",
            Target("db.example.com", 5432, "loader", "app", "pw", server_settings={"application_name": "etl"}),
            id="uri-query",
        ),
        pytest.param(
            "host=db.example.com port=6432 dbname=app user=loader password='a b\\'c' sslmode=verify-full",
            Target("db.example.com", 6432, "loader", "app", "a b'c", "verify-full"),
            id="keywords",
        ),
        pytest.param(
            "host = db.example.com user=loader",
            Target("db.example.com", 5432, "loader", "loader"),
            id="keywords-spaces",
        ),
        pytest.param(
            "host=db.example.com user=loader sslrootcert=system",
            Target("db.example.com", 5432, "loader", "loader", sslmode="verify-full"),
            id="system-roots",
        ),
        pytest.param(
            "host=db.example.com user=loader options='-c search_path=etl' connect_timeout=5",
            Target(
                "db.example.com",
                5432,
                "loader",
                "loader",
                server_settings={"options": "-c search_path=etl"},
                connect_timeout=5.0,
            ),
            id="options",
        ),
    ],
)
def test_dsns_parse(dsn: str, target: Target) -> None:
    assert dsns.parse(dsn) == target


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        pytest.param("dbname=app user=x", "names no host", id="no-host"),
        pytest.param("postgresql:///app?user=x", "names no host", id="uri-no-host"),
        pytest.param("host=db.example.com", "names no user", id="no-user"),
        pytest.param("host=a.example.com,b.example.com user=x", "several hosts", id="several-hosts"),
        pytest.param("postgresql://x@a.example.com,b.example.com/app", "several hosts", id="uri-several-hosts"),
        pytest.param("host=db.example.com hostaddr=127.0.0.1 user=x", "hostaddr connects to an address", id="hostaddr"),
        pytest.param("service=prod", "service reads a service file", id="service"),
        pytest.param(
            "postgresql://x@db.example.com/app?service=prod", "service reads a service file", id="uri-service"
        ),
        pytest.param("host=db.example.com user=x servicefile=/etc/pg_service.conf", "servicefile", id="servicefile"),
        pytest.param("host=db.example.com user=x passfile=/root/.pgpass", "passfile reads a password file", id="pass"),
        pytest.param("host=db.example.com user=x sslcert=/etc/c.pem", "sslcert reads a client certificate", id="cert"),
        pytest.param("host=db.example.com user=x sslkey=/etc/k.pem", "sslkey reads a key file", id="key"),
        pytest.param("host=db.example.com user=x sslcrl=/etc/crl.pem", "sslcrl reads a file", id="crl"),
        pytest.param("host=db.example.com user=x sslrootcert=/etc/ca.pem", "sslrootcert names a file", id="rootcert"),
        pytest.param("host=db.example.com user=x sslmode=sometimes", "sslmode 'sometimes' is not one of", id="sslmode"),
        pytest.param("host=db.example.com user=x gssencmode=require", "gssencmode is not supported", id="unknown"),
        pytest.param("host=db.example.com user=x port=99999", "port '99999' is not a number", id="port"),
        pytest.param("host=db.example.com user=x user=y", "gives user twice", id="twice"),
        pytest.param("postgresql://x@db.example.com/app?host=/tmp", "gives host twice", id="uri-host-twice"),
        pytest.param("host=db.example.com user=x password='open", "unterminated quoted value", id="quote"),
        pytest.param("just some words", "neither a postgresql:// URI nor keyword=value", id="garbage"),
    ],
)
def test_dsns_refused(dsn: str, message: str) -> None:
    with pytest.raises(dsns.DSNError, match=message):
        dsns.parse(dsn)


def test_errors_never_carry_the_password() -> None:
    with pytest.raises(dsns.DSNError) as caught:
        dsns.parse("host=db.example.com user=x password=hunter2 passfile=/root/.pgpass")
    assert "hunter2" not in str(caught.value)
    assert "hunter2" not in repr(dsns.parse("host=db.example.com user=x password=hunter2"))


def test_tls_keeps_the_host_name_when_connecting_to_an_address() -> None:
    # asyncio passes the address asyncpg connected to as the server name; the DSN's host is what is verified.
    context = dsns._context(dsns.parse("host=db.example.com user=x sslmode=verify-full"))
    tls = context.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="203.0.113.7")
    assert tls.server_hostname == "db.example.com"
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)


@pytest.mark.parametrize(
    ("sslmode", "verify", "check"),
    [
        pytest.param("prefer", ssl.CERT_NONE, False, id="prefer"),
        pytest.param("require", ssl.CERT_NONE, False, id="require"),
        pytest.param("verify-ca", ssl.CERT_REQUIRED, False, id="verify-ca"),
        pytest.param("verify-full", ssl.CERT_REQUIRED, True, id="verify-full"),
    ],
)
def test_sslmodes_mean_what_libpq_means(sslmode: str, verify: ssl.VerifyMode, check: bool) -> None:
    context = dsns._context(dsns.parse(f"host=db.example.com user=x sslmode={sslmode}"))
    assert (context.verify_mode, context.check_hostname) == (verify, check)
