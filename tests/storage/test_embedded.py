"""The embedded PostgreSQL of ``nodus dev`` (ADR 0032): its socket answers only to its password.

A real server (pgserver) under a short temporary directory: the unix socket lives there, and a
socket path is limited to 108 bytes.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
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


_START_AND_STOP = """
import sys
from pathlib import Path
from nodus.storage.database import EmbeddedPostgres
server = EmbeddedPostgres(Path(sys.argv[1]))
server.start()
server.stop()
"""


@pytest.mark.parametrize("depth", [pytest.param(0, id="short-path"), pytest.param(90, id="too-long-for-a-socket")])
def test_no_runtime_dir_warning_without_xdg_runtime_dir(depth: int) -> None:
    """Issue 16: every ``nodus dev`` start printed pgserver's RuntimeDirWarning (XDG_RUNTIME_DIR is not set, as
    on servers and in containers). Its runtime directory is now beside the data directory, or, when the data
    directory is too deep for PostgreSQL's socket (which then lives in the runtime directory), a short one of
    this user's; private either way, at the first start and the next."""
    with tempfile.TemporaryDirectory(prefix="nodus-pg-", dir="/tmp") as directory:
        data_dir = Path(directory) / ("d" * depth) / "pg"
        env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
        for start in ("first", "again"):
            started = subprocess.run(
                [sys.executable, "-W", "error", "-c", _START_AND_STOP, str(data_dir)],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert started.returncode == 0, f"{start}: {started.stderr}"
            assert "XDG_RUNTIME_DIR" not in started.stderr
        runtime = (
            data_dir.with_name("pg-run") if depth == 0 else Path(tempfile.gettempdir()) / f"nodus-pg-{os.getuid()}"
        )
        assert (runtime / "python_PostgresServer" / ".lockfile").exists()
        assert runtime.lstat().st_uid == os.getuid()
