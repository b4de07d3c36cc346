"""Connecting to PostgreSQL: URLs, engines, migrations and the embedded server used by ``nodus dev``."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

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


async def _setup_connection(conn: asyncpg.Connection) -> None:
    # JSONB columns (labels) arrive decoded; bodies are TEXT and arrive exactly as stored.
    await conn.set_type_codec("jsonb", encoder=lambda text: text, decoder=orjson.loads, schema="pg_catalog")


async def create_pool(url: str, size: int = 20) -> asyncpg.Pool:
    """The connection pool of the request path (see ADR 0003)."""
    pool = await asyncpg.create_pool(
        asyncpg_dsn(url),
        min_size=min(2, size),
        max_size=size,
        init=_setup_connection,
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


class EmbeddedPostgres:
    """A PostgreSQL server kept under a data directory (the ``pgserver`` wheel); stopped on ``stop()``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._server: Any = None

    def start(self) -> str:
        import pgserver  # imported lazily: only ``nodus dev`` and tests without a server need it

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._server = pgserver.get_server(self.data_dir, cleanup_mode="stop")  # type: ignore[attr-defined]
        url: str = self._server.get_uri()
        log.info("embedded PostgreSQL running under %s", self.data_dir)
        return url

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
