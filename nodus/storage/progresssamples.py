"""A Job's progress history: one sample each time its shown progress or cost changed (ADR 0054).

A sample is what ``status.progress.units`` (completed, total), ``status.progress.metrics`` and
``status.cost.totalUSD`` said right after a write, with the time it was recorded. Samples are written by
the object store in the same transaction as the Job's write that changed them (:class:`Sample` is a
:class:`~nodus.storage.committing.Companion`): a history never shows a value the Job never had, and a Job
write that did not change these fields writes no sample and runs no extra statement.

Rows are keyed by the Job's uid and the resourceVersion of the write that recorded them, so their order is
commit order, and a Job re-created under the same name starts a history of its own. ``job_uid`` references
``objects.uid`` with ``ON DELETE CASCADE``: the history goes in the transaction that removes the Job.

Bounded: at most :data:`MAX_SAMPLES` (2,000) per Job. When a recorded sample brings a Job's history to
2,000, every other sample older than the newest :data:`KEEP_NEWEST` (200) is dropped, the oldest kept (the
2nd, 4th, ... oldest go): 1,100 remain, recent samples keep their full resolution and older ones halve theirs
each time the history fills again. The rule runs in the recording statement, so no caller can exceed it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
import orjson

from nodus.storage.objects import Storage

MAX_SAMPLES = 2_000
KEEP_NEWEST = 200

# One statement records and, when the history reaches MAX_SAMPLES, thins it. The CTEs see the table as it
# was before the insert, so the history's size after it is count + 1, and the newest KEEP_NEWEST after it
# are the new sample and the newest KEEP_NEWEST - 1 before it.
_RECORD = """
WITH added AS (
    INSERT INTO progress_samples (job_uid, rv, time, completed, total, metrics, cost_usd)
    VALUES ($1, $2, clock_timestamp(), $3, $4, $5::jsonb, $6)
), size AS (
    SELECT count(*) + 1 AS n FROM progress_samples WHERE job_uid = $1
)
DELETE FROM progress_samples p
USING (
    SELECT rv, row_number() OVER (ORDER BY rv) AS position
    FROM progress_samples
    WHERE job_uid = $1
    ORDER BY rv
    LIMIT greatest((SELECT n FROM size) - $7::int, 0)
) older
WHERE (SELECT n FROM size) >= $8::int AND p.job_uid = $1 AND p.rv = older.rv AND older.position % 2 = 0
"""

_READ = """
SELECT time, completed, total, metrics, cost_usd FROM progress_samples WHERE job_uid = $1 ORDER BY rv
"""


@dataclass(frozen=True)
class Sample:
    """What a Job showed after one write: units ``completed`` of ``total`` (each None when not reported),
    its latest ``metrics`` (name to decimal string) and what it cost so far (``cost_usd``, a decimal string,
    None before any charge). ``time`` is set when it is read back."""

    completed: int | None
    total: int | None
    metrics: dict[str, str] = field(default_factory=dict)
    cost_usd: str | None = None
    time: datetime | None = None

    async def write(self, conn: asyncpg.Connection, stored: dict[str, Any]) -> None:
        """Record this sample for the Job ``stored`` (its uid, and the resourceVersion its write just got),
        thinning the Job's history as the module docstring says; inside the write's transaction."""
        metadata = stored["metadata"]
        await conn.execute(
            _RECORD,
            str(metadata["uid"]),
            int(metadata["resourceVersion"]),
            self.completed,
            self.total,
            orjson.dumps(self.metrics).decode(),
            self.cost_usd,
            KEEP_NEWEST,
            MAX_SAMPLES,
        )


async def samples(storage: Storage, job_uid: str) -> list[Sample]:
    """Every kept sample of the Job with uid ``job_uid``, oldest first (none for an unknown uid)."""
    async with _connection(storage) as conn:
        records = await conn.fetch(_READ, job_uid)
    return [Sample(r["completed"], r["total"], dict(r["metrics"]), r["cost_usd"], r["time"]) for r in records]


def _connection(storage: Storage) -> contextlib.AbstractAsyncContextManager[Any]:
    # The object store's pool, as logs and the ledger use it.
    return storage._connection()
