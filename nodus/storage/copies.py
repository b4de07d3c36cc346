"""The display copies of money on objects, read beside what the ledger charged, for ``nodus billing verify``.

An Attempt's ``status.cost`` is written by the billing controller from the ledger's answer; once
``final`` it must equal, segment by segment, the charges the ledger holds for that attempt (its hold
is its uid). One statement reads both, so the comparison is of one snapshot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from nodus.storage.objects import Storage


@dataclass(frozen=True)
class AttemptCopy:
    """A final Attempt's ``status.cost`` and what the ledger charged on its hold, by segment (not covered)."""

    namespace: str
    name: str
    cost: dict[str, Any]
    charged: dict[str, Decimal]


async def final_attempt_costs(storage: Storage) -> list[AttemptCopy]:
    """Every Attempt whose ``status.cost.final`` is true, with the ledger's charges for it."""
    async with storage._connection() as conn:
        rows = await conn.fetch(
            "WITH copies AS ("
            "  SELECT namespace, name, uid, body::jsonb->'status'->'cost' AS cost FROM objects"
            "  WHERE kind = 'Attempt' AND body::jsonb->'status'->'cost'->>'final' = 'true'"
            "), paid AS ("
            "  SELECT subject, segment, sum(amount) AS amount FROM charges"
            "  WHERE NOT covered AND subject IN (SELECT uid FROM copies) GROUP BY subject, segment"
            ") "
            "SELECT c.namespace, c.name, c.cost::text AS cost,"
            "  coalesce(json_object_agg(p.segment, p.amount::text) FILTER (WHERE p.segment IS NOT NULL), '{}')::text"
            "  AS charged "
            "FROM copies c LEFT JOIN paid p ON p.subject = c.uid GROUP BY c.namespace, c.name, c.cost::text"
        )
    return [
        AttemptCopy(
            r["namespace"],
            r["name"],
            json.loads(r["cost"]),
            {segment: Decimal(amount) for segment, amount in json.loads(r["charged"]).items()},
        )
        for r in rows
    ]
