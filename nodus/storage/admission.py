"""What a Job's create reads for its estimate, in one statement (ADR 0019, docs/benchmarks.md §1.1).

The estimate needs the project's ledger accounts (its available credit), its Budgets and the newest
successful Attempts of the same program; three reads would be three round trips on every create.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from nodus.storage.objects import Storage


@dataclass(frozen=True)
class AdmissionReads:
    """``balances``: the project's ledger accounts by name; ``budgets``: its Budget objects;
    ``history``: the newest Succeeded Attempts carrying ``labels``, newest written first."""

    balances: dict[str, Decimal]
    budgets: list[dict[str, Any]]
    history: list[dict[str, Any]]


async def admission_reads(storage: Storage, project: str, labels: dict[str, str], limit: int) -> AdmissionReads:
    """One round trip for the three reads of a Job's estimate (see :class:`AdmissionReads`)."""
    async with storage._connection() as conn:
        row = await conn.fetchrow(
            "SELECT"
            " (SELECT coalesce(json_object_agg(name, balance::text), '{}') FROM ledger_accounts"
            "  WHERE owner = $1)::text AS balances,"
            " (SELECT coalesce(json_agg(body), '[]') FROM objects WHERE namespace = $1 AND kind = 'Budget')::text"
            "  AS budgets,"
            " (SELECT coalesce(json_agg(body ORDER BY rv DESC), '[]') FROM ("
            "   SELECT body, rv FROM objects WHERE kind = 'Attempt' AND namespace = $1 AND labels @> $2::jsonb"
            "   AND phase = 'Succeeded' ORDER BY rv DESC LIMIT $3) newest)::text AS history",
            project,
            orjson.dumps(labels).decode(),
            limit,
        )
    assert row is not None
    return AdmissionReads(
        {name: Decimal(value) for name, value in json.loads(row["balances"]).items()},
        [orjson.loads(body) for body in json.loads(row["budgets"])],
        [orjson.loads(body) for body in json.loads(row["history"])],
    )
