"""The embedded PostgreSQL of ``nodus dev`` (ADR 0032): its socket answers only to its password.

A real server (pgserver) under a short temporary directory: the unix socket lives there, and a
socket path is limited to 108 bytes.
"""

from __future__ import annotations

import asyncio
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from nodus.storage.database import PASSWORD_FILE, EmbeddedPostgres


@pytest.fixture(scope="module")
def embedded() -> Iterator[tuple[EmbeddedPostgres, str]]:
    with tempfile.TemporaryDirectory(prefix="nodus-pg-", dir="/tmp") as directory:
        server = EmbeddedPostgres(Path(directory) / "pg")
        url = server.start()
        try:
            yield server, url
        finally:
            server.stop()


def without_password(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname or ''}"))


async def answer(url: str) -> object:
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval("SELECT current_user")
    finally:
        await connection.close()


def test_the_url_carries_a_password_that_the_socket_requires(embedded: tuple[EmbeddedPostgres, str]) -> None:
    server, url = embedded
    assert asyncio.run(answer(url)) == "postgres"
    # What a tenant's sink DSN could name before: the socket, no password (trust authentication then).
    with pytest.raises(asyncpg.InvalidPasswordError):
        asyncio.run(answer(without_password(url)))
    password_file = server.data_dir / PASSWORD_FILE
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    assert urlsplit(url).password == password_file.read_text().strip()
    hba = [line.split() for line in (server.data_dir / "pg_hba.conf").read_text().splitlines()]
    assert {line[-1] for line in hba if line and not line[0].startswith("#")} == {"scram-sha-256"}


def test_a_restart_keeps_the_password(embedded: tuple[EmbeddedPostgres, str]) -> None:
    server, url = embedded
    assert EmbeddedPostgres(server.data_dir).start() == url
