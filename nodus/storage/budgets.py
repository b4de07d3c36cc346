"""Budgets in the ledger: which holds count against which Budget, and what each Budget has committed.

A Budget (a project's spending limit per period over a label selector of its Jobs) is an API object;
which Jobs match it is the API's business (``nodus.billing.budgets``). The ledger knows a Budget by
its uid, through the holds tagged with it (``budget_holds``, migration 0007):

* a hold is tagged with the Budgets its Job matches when it is placed, and re-tagged when it is
  extended to fund the Job further (:attr:`~nodus.storage.ledger.HoldChange.budgets`): a tag the Job
  no longer matches is closed, a new match opens one. A tag is an interval, never rewritten;
* a Budget's ``spent`` is what was charged on its holds while their tag was open, in its period
  (covered time is not charged; a refund is a negative charge and reduces it); its ``held`` is what
  its open-tagged holds hold now; ``committed`` is their sum;
* :func:`check` runs inside the ledger transaction of a hold or an extension (from
  ``ledger._change_hold``): under one advisory lock per Budget (taken in one order, after the cap's
  lock, so two postings never wait on each other in a cycle) it re-tags the hold and refuses, with
  :class:`BudgetExceeded`, a change that would take any of the Budgets past its limit. Two holds
  racing for the last of a Budget are serialised: the second sees the first, or is refused.

Every amount is ``Decimal`` (NUMERIC(24, 6)); times are ``timestamptz``, periods in UTC, and a charge
counts in the period in which it was posted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import orjson

from nodus.storage.ledger import Breach, HoldChange, LedgerError
from nodus.storage.objects import Storage

# Two-key advisory locks (class, hash of the Budget's uid); the cap's class is ledger._CAP_LOCK_CLASS.
_BUDGET_LOCK_CLASS = 7262026


@dataclass(frozen=True)
class BudgetLimit:
    """A Budget as the ledger enforces it: ``limit`` over the period [``start``, ``end``) (both None: Total)."""

    uid: str
    name: str
    limit: Decimal
    start: datetime | None = None
    end: datetime | None = None
    project: str = ""


@dataclass(frozen=True)
class Standing:
    """What a Budget has committed in its period: ``spent`` (charged) plus ``held`` (open holds)."""

    spent: Decimal
    held: Decimal

    @property
    def committed(self) -> Decimal:
        return self.spent + self.held


class BudgetExceeded(LedgerError):
    """A hold or an extension would take a Budget's committed money past its limit."""

    def __init__(self, budget: BudgetLimit, committed: Decimal, change: Decimal) -> None:
        super().__init__(
            f"budget {budget.name} has {committed} charged and held in its period; {change} more would pass its "
            f"limit of {budget.limit}"
        )
        self.budget, self.committed, self.change = budget, committed, change


_STANDING = """
WITH b AS (SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS b(uid, start, stop))
SELECT b.uid,
    (SELECT coalesce(sum(c.amount), 0) FROM budget_holds t JOIN charges c ON c.subject = t.hold_id
      WHERE t.budget = b.uid AND NOT c.covered
        AND c.created_at >= t.since AND (t.until IS NULL OR c.created_at < t.until)
        AND (b.start IS NULL OR c.created_at >= b.start) AND (b.stop IS NULL OR c.created_at < b.stop)
        AND (b.start IS NULL OR t.until IS NULL OR t.until > b.start)) AS spent,
    (SELECT coalesce(sum(h.amount), 0) FROM budget_holds t JOIN holds h ON h.id = t.hold_id
      WHERE t.budget = b.uid AND t.until IS NULL AND h.settled_at IS NULL) AS held
FROM b
"""


def _lock_key(uid: str) -> int:
    return int.from_bytes(hashlib.sha256(uid.encode()).digest()[:4], "big", signed=True)


async def _standing(conn: Any, budgets: Sequence[BudgetLimit]) -> dict[str, Standing]:
    rows = await conn.fetch(_STANDING, [b.uid for b in budgets], [b.start for b in budgets], [b.end for b in budgets])
    return {r["uid"]: Standing(Decimal(r["spent"]), Decimal(r["held"])) for r in rows}


async def check(conn: Any, project: str, change: HoldChange) -> None:
    """Tag hold ``change.hold_id`` with exactly ``change.budgets`` and refuse the change if it would
    take any of them past its limit. Called in the posting's transaction, before the hold is written,
    so a refusal rolls the tags back with everything else."""
    budgets = change.budgets or ()
    if not budgets and change.create:
        return  # a new hold matching no Budget: no tag to open, none to close
    # Sorted keys: every posting takes the locks of the Budgets it touches in the same order.
    for key in sorted({_lock_key(b.uid) for b in budgets}):
        await conn.execute("SELECT pg_advisory_xact_lock($1::int, $2::int)", _BUDGET_LOCK_CLASS, key)
    uids = [b.uid for b in budgets]
    # greatest(): a tag opened by a transaction that started after this one still closes after it opened.
    await conn.execute(
        "UPDATE budget_holds SET until = greatest(since, now()) "
        "WHERE hold_id = $1 AND until IS NULL AND NOT (budget = ANY($2::text[]))",
        change.hold_id,
        uids,
    )
    if not budgets:
        return
    await conn.execute(
        "INSERT INTO budget_holds (hold_id, budget, project) SELECT $1, b, $3 FROM unnest($2::text[]) AS b "
        "ON CONFLICT (hold_id, budget) WHERE until IS NULL DO NOTHING",
        change.hold_id,
        uids,
        project,
    )
    standing = await _standing(conn, budgets)
    for budget in budgets:
        committed = standing[budget.uid].committed
        if committed + change.held > budget.limit:
            raise BudgetExceeded(budget, committed, change.held)


async def standing(storage: Storage, budgets: Sequence[BudgetLimit]) -> dict[str, Standing]:
    """Each Budget's spent and held money now, by uid (a Budget no hold was tagged with has zeros)."""
    if not budgets:
        return {}
    async with storage._connection() as conn:  # the object store's pool, as the ledger's
        return await _standing(conn, budgets)


async def breaches(storage: Storage, budgets: Sequence[BudgetLimit]) -> list[Breach]:
    """``BudgetsHold``: every Budget whose committed money is past its limit (for ``nodus billing verify``)."""
    found = []
    figures = await standing(storage, budgets)
    for budget in budgets:
        shown = figures[budget.uid]
        if shown.committed > budget.limit:
            found.append(
                Breach(
                    "BudgetsHold",
                    f"budget {budget.project}/{budget.name}: {shown.committed} committed ({shown.spent} spent, "
                    f"{shown.held} held) passes its limit of {budget.limit}",
                )
            )
    return found


async def budget_objects(storage: Storage) -> list[dict[str, Any]]:
    """Every Budget object of every project, as stored."""
    async with storage._connection() as conn:
        rows = await conn.fetch("SELECT body FROM objects WHERE kind = 'Budget' ORDER BY namespace, name")
    return [orjson.loads(r["body"]) for r in rows]
