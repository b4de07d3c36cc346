"""Connecting to PostgreSQL: URLs, engines, migrations and the embedded server used by ``nodus dev``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
import orjson
from alembic import command
from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent.parent / "migrations"


def sqlalchemy_url(url: str) -> str:
    """``postgresql://...`` as SQLAlchemy's asyncpg dialect wants it (``postgresql+asyncpg://...``)."""
    scheme, rest = url.split("://", 1)
    if scheme in ("postgres", "postgresql"):
        scheme = "postgresql+asyncpg"
    return f"{scheme}://{rest}"


def asyncpg_dsn(url: str) -> str:
    """The plain libpq form of a URL, for asyncpg connections made outside SQLAlchemy (LISTEN)."""
    scheme, rest = url.split("://", 1)
    return f"postgresql://{rest}" if scheme.startswith("postgres") else url


async def setup_connection(conn: asyncpg.Connection) -> None:
    """Every connection of the request path and the watch cache: JSONB columns (labels) arrive decoded;
    bodies are TEXT and arrive exactly as stored."""
    await conn.set_type_codec("jsonb", encoder=lambda text: text, decoder=orjson.loads, schema="pg_catalog")


async def _keep_session(_: asyncpg.Connection) -> None:
    """Release without asyncpg's reset query (``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``),
    a round trip on every release, ~5 % of a create's CPU: nothing on a pool connection outlives its transaction.
    Advisory locks here are ``pg_advisory_xact_lock``; cursors live in transactions; nothing LISTENs or SETs a
    session variable on one (the watch cache and leadership have connections of their own);
    ``tests/storage/test_pool.py`` holds the code to that. asyncpg still rolls back a transaction left open."""


async def create_pool(url: str, size: int = 20) -> asyncpg.Pool:
    """The connection pool of the request path (see ADR 0003)."""
    pool = await asyncpg.create_pool(
        asyncpg_dsn(url),
        min_size=min(2, size),
        max_size=size,
        init=setup_connection,
        reset=_keep_session,
        server_settings={"application_name": "nodus"},
    )
    assert pool is not None
    return pool


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return config


def migrate(url: str) -> None:
    """Bring the schema to the newest migration. Safe to run concurrently and repeatedly."""
    command.upgrade(alembic_config(url), "head")


async def migrate_async(url: str) -> None:
    await asyncio.to_thread(migrate, url)


async def create_database(server_url: str, prefix: str = "nodus_test") -> str:
    """Create a fresh, uniquely named database on a server and return its URL (tests, benchmarks)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(asyncpg_dsn(server_url))
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    parts = urlsplit(server_url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


async def drop_database(database_url: str) -> None:
    parts = urlsplit(database_url)
    name = parts.path.lstrip("/")
    admin = urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, parts.fragment))
    conn = await asyncpg.connect(asyncpg_dsn(admin))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


# Every connection to the embedded server proves the password (ADR 0032): its unix socket and any port
# are reachable by whatever runs on this machine, programs of Jobs included.
EMBEDDED_HBA = """\
# Written by Nodus (ADR 0032): every connection authenticates with the password in nodus-password.
local   all          all                 scram-sha-256
host    all          all   127.0.0.1/32  scram-sha-256
host    all          all   ::1/128       scram-sha-256
local   replication  all                 scram-sha-256
host    replication  all   127.0.0.1/32  scram-sha-256
host    replication  all   ::1/128       scram-sha-256
"""
PASSWORD_FILE = "nodus-password"


# A unix socket's path holds at most 107 bytes (sun_path is 108 with its NUL).
_SOCKET_PATH_MAX = 107


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """``name=value`` in this process's environment while the block runs."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


class EmbeddedPostgres:
    """A PostgreSQL server kept under a data directory (the ``pgserver`` wheel); stopped on ``stop()``.

    pgserver initialises it with trust authentication; :meth:`start` replaces that, before returning
    the URL, with a password of its own: random, kept in ``<data dir>/nodus-password`` (0600), required
    of every local and host connection (``scram-sha-256`` in ``pg_hba.conf``). The URL carries it.

    pgserver keeps a lock file in a runtime directory (platformdirs' ``XDG_RUNTIME_DIR``, which it warns
    about when unset, as on servers and in containers), and puts the socket there when the data
    directory's path is too long for one. Unless ``XDG_RUNTIME_DIR`` is set, that directory is
    ``<data dir>-run`` beside the data directory (``nodus dev``: ``.nodus/postgres-run``), or, for a data
    directory too deep for a socket, a private directory of this user under the system's temporary one.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._server: Any = None

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        runtime = os.environ.get("XDG_RUNTIME_DIR") or str(self._runtime_dir())
        # pgserver reads it once, when first imported: set for that moment only, so that the processes this one
        # starts (agents, the programs of Jobs) get the environment as it was.
        with _environment("XDG_RUNTIME_DIR", runtime):
            import pgserver  # imported lazily: only ``nodus dev`` and tests without a server need it
        self._server = pgserver.get_server(self.data_dir, cleanup_mode="stop")  # type: ignore[attr-defined]
        plain: str = self._server.get_uri()
        password = self._password()
        url = plain.replace("postgres:@", f"postgres:{quote(password, safe='')}@", 1)
        self._require_password(plain, password)
        log.info("embedded PostgreSQL running under %s", self.data_dir)
        return url

    def _password(self) -> str:
        """The data directory's password, created (0600, never replaced) on first use."""
        path = self.data_dir / PASSWORD_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            return path.read_text().strip()
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
        return path.read_text().strip()

    def _require_password(self, plain_url: str, password: str) -> None:
        """Give the postgres role ``password`` and make pg_hba.conf require it (reloaded when changed)."""
        from pgserver._commands import POSTGRES_BIN_PATH

        # Works over trust (a fresh or older data directory) and over the password alike.
        statements = (
            "SET password_encryption = 'scram-sha-256';\n"
            f"ALTER ROLE postgres PASSWORD '{password}';\n"  # token_urlsafe: no quote to escape
        )
        hba = self.data_dir / "pg_hba.conf"
        changed = hba.read_text() != EMBEDDED_HBA
        if changed:
            statements += "SELECT pg_reload_conf();\n"
        env = {**os.environ, "PGPASSWORD": password}
        try:
            if changed:
                hba.write_text(EMBEDDED_HBA)  # the existing file, so its owner (pgserver's user) is kept
            subprocess.run(
                [str(POSTGRES_BIN_PATH / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", plain_url],
                input=statements,
                env=env,
                text=True,
                check=True,
                capture_output=True,
                timeout=60,
            )
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(
                f"cannot set the embedded PostgreSQL's password under {self.data_dir}: {exc.stderr.strip()} "
                f"(if {PASSWORD_FILE} was lost, restore it, or set trust in pg_hba.conf once and restart)"
            ) from None

    def _runtime_dir(self) -> Path:
        """``<data dir>-run``; when the socket cannot live in the data directory, a short one in the temporary
        directory. Either is made this user's alone (0700), as platformdirs requires of ``XDG_RUNTIME_DIR``."""
        if len(os.fsencode(self.data_dir.resolve() / ".s.PGSQL.5432")) <= _SOCKET_PATH_MAX:
            directory = self.data_dir.with_name(f"{self.data_dir.name}-run")
        else:
            directory = Path(tempfile.gettempdir()) / f"nodus-pg-{os.getuid()}"
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
        info = directory.lstat()  # in a shared directory: never a link, never another user's
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise RuntimeError(
                f"{directory} (the embedded PostgreSQL's runtime directory) is not a directory of this user: "
                "remove it, choose another --data-dir, or set XDG_RUNTIME_DIR"
            )
        if stat.S_IMODE(info.st_mode) != 0o700:
            # pgserver, run as root, opens the socket's directory to its own user: private again for this start.
            directory.chmod(0o700)
        return directory

    def stop(self) -> bool:
        """Stop the server unless another process still uses it (pgserver counts them); True when it is down."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None
        return not (self.data_dir / "postmaster.pid").exists()
