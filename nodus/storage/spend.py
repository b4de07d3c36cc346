"""What a project was charged per UTC day: sums of the ledger's charges, never its entries (ADR 0054).

A charge row (``charges``, migration 0006) is what one capture, post-paid charge or refund moved for a
project (a refund's row is negative); covered time (``covered``: Nodus paid) is not the project's spend and
is left out. The sums use the ``(project, created_at)`` index.
"""

from __future__ import annotations

import contextlib
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from nodus.storage.objects import Storage

_PER_DAY = """
SELECT (created_at AT TIME ZONE 'UTC')::date AS day, sum(amount) AS amount
FROM charges
WHERE project = $1 AND NOT covered AND created_at >= $2 AND created_at < $3
GROUP BY day
ORDER BY day
"""


async def charged_per_day(storage: Storage, project: str, start: datetime, end: datetime) -> dict[date, Decimal]:
    """The sum of ``project``'s charges per UTC day from ``start`` to ``end`` (exclusive); days without a
    charge are absent."""
    async with _connection(storage) as conn:
        records = await conn.fetch(_PER_DAY, project, start, end)
    return {r["day"]: Decimal(r["amount"]) for r in records}


def _connection(storage: Storage) -> contextlib.AbstractAsyncContextManager[Any]:
    # The object store's pool, as the ledger uses it.
    return storage._connection()
