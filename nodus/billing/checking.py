"""Proving the ledger: every invariant, and every display copy equal to what it copies.

:func:`verify` returns the breaches (empty: sound). The ledger's own invariants are checked by SQL
in ``nodus.storage.ledger`` (entries sum to zero, balances equal their entries, no project balance
below zero, holds add up and settle once, held credit equals the open holds) and in
``nodus.storage.budgets`` (no Budget has more committed in its current period than its limit: a
limit lowered below what is committed shows here too); here are the display copies: every
Project's ``status.credits`` and every final Attempt's ``status.cost`` must show what the ledger
says. A copy lags a movement by a watch event and a reconcile, and money keeps moving while Jobs run, so a
copy that disagrees is read again (:data:`SETTLE_READS` reads a second apart): it is a breach only when it
disagreed at every read. A project's own storage (ADR 0034): the bytes its quota counts are the sum of its blobs,
every sampled hour marked charged has exactly its amount in the ledger and no hour is charged unmarked,
and ``status.storage.chargedUSD`` of every Project equals its storage charges.

Verification and statements are served to administrators by the API server (``GET /apis/nodus.dev/v1/ledger/verify`` and
``.../namespaces/PROJECT/ledger/statement``, ADR 0038) over its own connections (:func:`breaches`,
:func:`wire`), and run by operators straight on the database (:func:`verify`, :func:`statement`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from decimal import Decimal
from typing import Any

from nodus.apimachinery import units
from nodus.billing import budgets, ledger, money
from nodus.billing import storage as projectstorage
from nodus.storage import blobs, copies, storagehours
from nodus.storage import ledger as tables
from nodus.storage.ledger import Breach, StatementLine
from nodus.storage.objects import Storage


async def verify(url: str) -> list[Breach]:
    """:func:`breaches` of the database at ``url`` (an operator's run, without an API server)."""
    storage = Storage(url, pool_size=2, compaction_interval=3600)
    await storage.start()
    try:
        return await breaches(storage)
    finally:
        await storage.stop()


SETTLE_READS = 5
"""How many times a disagreeing display copy is read (a second apart) before it is a breach."""


async def breaches(storage: Storage, settle_reads: int = SETTLE_READS) -> list[Breach]:
    """Every breach of the ledger's invariants and of its display copies (empty: sound). Read only.

    The ledger's own invariants are read once (they hold at every commit); a display copy is a breach only
    when it disagreed with the ledger at each of ``settle_reads`` reads a second apart, reported as last read."""
    found = await tables.breaches(storage)
    found += await budgets.overspent(storage, units.now())
    found += await _project_storage(storage)
    copies = await _display_copies(storage)
    for _ in range(settle_reads - 1):
        if not copies:
            break
        await asyncio.sleep(1.0)
        again = {_subject(b): b for b in await _display_copies(storage)}
        copies = [again[_subject(b)] for b in copies if _subject(b) in again]
    return found + copies


def _subject(breach: Breach) -> str:
    """Which copy a display-copy breach is about (its message up to the figure shown)."""
    return breach.detail.split(" shows ", 1)[0]


async def _display_copies(storage: Storage) -> list[Breach]:
    """Every display copy that disagrees with the ledger now: Projects' credits, final Attempts' costs and
    Projects' storage charges."""
    found = []
    for project, shown in await tables.project_credit_copies(storage):
        figures = await ledger.credits(storage, project)
        for field, name in (("balanceUSD", "balance"), ("heldUSD", "held"), ("availableUSD", "available")):
            copy = shown.get(field)
            if copy is not None and Decimal(str(copy)) != figures[name]:
                found.append(
                    Breach(
                        "DisplayCopyEqualsLedger",
                        f"project {project}: status.credits.{field} shows {copy}, the ledger "
                        f"{money.text(figures[name])}",
                    )
                )
    found += await _attempt_copies(storage)
    found += await _storage_copies(storage)
    return found


SEGMENTS = ("Boot", "Running", "Restore", "Teardown")


async def _attempt_copies(storage: Storage) -> list[Breach]:
    """Every final Attempt's ``status.cost`` equals its charges in the ledger, in total and per segment."""
    found = []
    for copy in await copies.final_attempt_costs(storage):
        shown = copy.cost.get("bySegment") or {}
        pairs = [("totalUSD", str(copy.cost.get("totalUSD") or "0"), sum(copy.charged.values(), Decimal(0)))]
        pairs += [
            (f"bySegment.{s.lower()}USD", str(shown.get(f"{s.lower()}USD") or "0"), copy.charged.get(s, Decimal(0)))
            for s in SEGMENTS
        ]
        for field, text, amount in pairs:
            if Decimal(text) != amount:
                found.append(
                    Breach(
                        "DisplayCopyEqualsLedger",
                        f"attempt {copy.namespace}/{copy.name}: status.cost.{field} shows {text}, the ledger "
                        f"{money.text(amount)}",
                    )
                )
    return found


async def _project_storage(storage: Storage) -> list[Breach]:
    """A project's stored bytes are the sum of its blobs and its storage hours agree with the ledger."""
    found = [
        Breach("BlobUsageIsSum", f"project {project}: blob_usage holds {kept} bytes, its blobs {total}")
        for project, kept, total in await blobs.usage_disagreements(storage)
    ]
    found += [
        Breach(
            "ProjectStorageCharged",
            f"project {row['namespace']}: storage hour {row['hour']} sampled at {money.text(row['amount'])} USD, "
            + (
                f"the ledger charged {money.text(row['charged'])}"
                if row["charged"] is not None
                else "marked charged but not in the ledger"
            )
            + ("" if row["marked"] else " without marking it charged"),
        )
        for row in await storagehours.disagreements(storage, projectstorage.KEY_PREFIX)
    ]
    return found


async def _storage_copies(storage: Storage) -> list[Breach]:
    """Every Project's ``status.storage.chargedUSD`` shows what the ledger charged for its storage."""
    found = []
    for name, uid, shown in await storagehours.shown(storage):
        charged = (await tables.numbered_charges(storage, uid, projectstorage.SEGMENT)).amount
        if Decimal(str(shown)) != charged:
            found.append(
                Breach(
                    "DisplayCopyEqualsLedger",
                    f"project {name}: status.storage.chargedUSD shows {shown}, the ledger {money.text(charged)}",
                )
            )
    return found


def wire(line: StatementLine) -> dict[str, Any]:
    """A statement line as the API serves it and the CLI prints it, whichever way it was read: amounts exact
    (signed: a hold or a charge takes from the project), seconds in fixed point, absent fields left out."""
    out: dict[str, Any] = {
        "time": units.format_micro_time(line.time),
        "movement": line.kind,
        "key": line.key,
        "subject": line.subject,
    }
    if line.subject_name:
        out["subjectName"] = line.subject_name
    if line.segment:
        out["segment"] = line.segment
    if line.seconds is not None:
        # Fixed point: a normalized 3600 or 60 would print as 3.6E+3 or 6E+1.
        out["seconds"] = format(line.seconds.normalize(), "f")
    if line.rate_per_hour is not None:
        out["rateUSDPerHour"] = money.text(line.rate_per_hour)
    out["amountUSD"] = money.text(line.amount) if line.amount >= 0 else "-" + money.text(-line.amount)
    out["covered"] = line.covered
    out["memo"] = line.memo
    return out


async def statement(url: str, project: str, start: datetime, end: datetime) -> AsyncIterator[StatementLine]:
    """The statement lines of ``project`` from the database at ``url`` (an operator's run)."""
    storage = Storage(url, pool_size=2, compaction_interval=3600)
    await storage.start()
    try:
        async for line in tables.statement(storage, project, start, end):
            yield line
    finally:
        await storage.stop()
