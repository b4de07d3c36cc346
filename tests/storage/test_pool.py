"""Pool connections are released without asyncpg's reset query (``database._keep_session``): nothing on them may
outlive its transaction. The static check keeps the storage code to that; the others show what still holds."""

from __future__ import annotations

import re
from pathlib import Path

from nodus.storage import database
from nodus.storage.objects import Storage

STORAGE = Path(database.__file__).parent
# Statements whose effect outlives a transaction, and the modules allowed them (each on a connection of its own).
SESSION_SCOPED = {
    r"pg_(try_)?advisory_lock\(": {"leadership.py"},
    r"""add_listener\(|["']\s*LISTEN\b""": {"watchcache.py"},
    r"""(execute|fetch\w*)\(\s*f?["']\s*(SET|RESET|DECLARE|PREPARE|CREATE TEMP)""": set(),
    r"set_config\([^)]*false\)": set(),
}


def test_no_storage_module_leaves_session_state_on_a_pool_connection() -> None:
    for pattern, allowed in SESSION_SCOPED.items():
        users = {path.name for path in STORAGE.glob("*.py") if re.search(pattern, path.read_text(), re.IGNORECASE)}
        assert users <= allowed, f"{sorted(users - allowed)} use {pattern!r}: give them a connection of their own"


async def test_a_transaction_left_open_is_rolled_back_on_release(storage: Storage) -> None:
    async with storage._connection() as conn:
        transaction = conn.transaction()
        await transaction.start()
        await conn.execute("CREATE TEMP TABLE IF NOT EXISTS left_open (x int) ON COMMIT DROP")
        await conn.execute("INSERT INTO left_open VALUES (1)")
    # Every connection of the pool, in turn: none is still in that transaction.
    held = [await storage._pool.acquire() for _ in range(storage._pool.get_size())]  # type: ignore[union-attr]
    try:
        for conn in held:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT to_regclass('pg_temp.left_open')") is None
    finally:
        for conn in held:
            await storage._pool.release(conn)  # type: ignore[union-attr]
