"""A PostgreSQL server for tests: ``NODUS_TEST_DATABASE_URL`` when set, else an embedded one.

Every test run creates databases of its own on that server, so runs never collide.
"""

from __future__ import annotations

import os
from pathlib import Path

from nodus.storage.database import EmbeddedPostgres

ROOT = Path(__file__).resolve().parents[2]
_embedded: EmbeddedPostgres | None = None


def server_url() -> str:
    global _embedded
    url = os.environ.get("NODUS_TEST_DATABASE_URL")
    if url:
        return url
    if _embedded is None:
        # A short path: PostgreSQL's unix socket lives in this directory (108-byte limit).
        _embedded = EmbeddedPostgres(Path(os.environ.get("NODUS_TEST_PGDATA", "/tmp/nodus-test-pg")))
        return _embedded.start()
    return _embedded.start()


def stop() -> None:
    global _embedded
    if _embedded is not None:
        _embedded.stop()
        _embedded = None


async def compact_watch_log(url: str) -> int:
    """Drop every event from the watch log of the database at ``url`` (a zero retention window), so that
    any older resourceVersion or continue token is answered 410 Expired; returns how many went."""
    from datetime import timedelta

    from nodus.storage.objects import Storage

    storage = Storage(url, pool_size=2, retention=timedelta(0), compaction_interval=3600)
    await storage.start()
    try:
        return await storage.compact()
    finally:
        await storage.stop()
