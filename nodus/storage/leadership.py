"""Leadership: at most one process acts for a given role at a time (a PostgreSQL advisory lock).

The lock lives as long as the connection that took it, so a leader that dies (or loses its
database connection) gives leadership up at once, and a standby takes it on its next try.
"""

from __future__ import annotations

import contextlib
import hashlib

import asyncpg

from nodus.storage.database import asyncpg_dsn


def _lock_id(role: str) -> int:
    return int.from_bytes(hashlib.sha256(role.encode()).digest()[:8], "big", signed=True)


class Leadership:
    def __init__(self, url: str, role: str) -> None:
        self._dsn = asyncpg_dsn(url)
        self._lock = _lock_id(role)
        self._conn: asyncpg.Connection | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def try_acquire(self) -> bool:
        """Take leadership if nobody holds it; True while this process holds it."""
        if self.held:
            return True
        conn = await asyncpg.connect(self._dsn, server_settings={"application_name": "nodus-leader"})
        if await conn.fetchval("SELECT pg_try_advisory_lock($1)", self._lock):
            self._conn = conn
            return True
        await conn.close()
        return False

    async def release(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None
