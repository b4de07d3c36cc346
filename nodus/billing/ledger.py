"""Every way money moves, as balanced postings: grants, holds, captures, covered time, releases.

Accounts (``owner/name``):

* per project: ``available`` (credit that may be held; never below zero) and ``held`` (reserved for
  capacity that is billing; never below zero);
* Nodus's own (owner ``nodus``): ``grants`` (where granted credit comes from: its balance is minus
  everything ever granted), ``revenue`` (what was charged), ``covered`` (time Nodus paid for instead
  of charging: a fault of Nodus), ``capacity`` (the other side of covered time) and ``closed`` (the
  credit deleted projects held when they went, ADR 0037).

| movement | entries | hold |
|---|---|---|
| grant *a* | nodus/grants -a, project/available +a | |
| hold *a* | project/available -a, project/held +a | created with a, or extended by a |
| capture *c* | project/held -c, nodus/revenue +c | amount -c, captured +c |
| covered *c* | nodus/covered -c, nodus/capacity +c | |
| refund *r* | nodus/revenue -r, project/available +r | (a charge later found to be Nodus's fault) |
| charge *c* | project/available -c, nodus/revenue +c | (post-paid, no hold: storage by the hour, ADR 0023) |
| release | project/held -rest, project/available +rest | settled, once |
| close *a* | project/available -a, nodus/closed +a | (the project was deleted: every hold released first) |

Each function makes one posting under an idempotency ``key`` the caller chooses so that a retry
of the same intent is the same key (``grant:<request id>``, ``hold:<attempt uid>``,
``capture:<attempt uid>:<segment>:<seq>``): replaying it changes nothing, reusing it for other
amounts is refused (:class:`~nodus.storage.ledger.KeyReused`). Nothing here rounds: amounts come in
at micro-dollar precision (``money.charge`` rounds a charge once).
"""

from __future__ import annotations

import contextlib
from decimal import Decimal

from nodus.billing import money
from nodus.storage import ledger
from nodus.storage.budgets import BudgetLimit
from nodus.storage.ledger import NODUS, Charge, Entry, HoldChange, Posted, Posting
from nodus.storage.objects import Storage

AVAILABLE = "available"
HELD = "held"
GRANTS = "grants"
REVENUE = "revenue"
COVERED = "covered"
CAPACITY = "capacity"
CLOSED = "closed"


def _positive(amount: Decimal, what: str) -> Decimal:
    if amount <= 0 or amount != amount.quantize(money.MICRO):
        raise money.InvalidAmount(f"{what} must be more than 0 with at most six fractional digits, not {amount}")
    return amount


async def grant(storage: Storage, project: str, amount: Decimal, key: str, memo: str = "") -> Posted:
    """Add ``amount`` of credit to ``project`` (an administrator's grant)."""
    amount = _positive(amount, "a grant")
    entries = (Entry(NODUS, GRANTS, -amount), Entry(project, AVAILABLE, amount))
    return await ledger.post(storage, Posting(key, "Grant", project, entries, memo=memo))


async def hold(
    storage: Storage,
    project: str,
    hold_id: str,
    amount: Decimal,
    key: str,
    *,
    subject: str = "",
    extend: bool = False,
    cap: Decimal | None = None,
    budgets: tuple[BudgetLimit, ...] | None = None,
    memo: str = "",
) -> Posted:
    """Reserve ``amount`` of ``project``'s available credit in hold ``hold_id`` (new, or ``extend``ed).
    ``memo`` is kept with the posting: the API server writes the hold's Attempt there (``attempt/NAME``), which
    statements show after the Attempt is gone (ADR 0038); it is not part of what makes a replay the same.

    Raises :class:`~nodus.storage.ledger.Overdrawn` when the available credit is short,
    :class:`~nodus.storage.ledger.CapExceeded` when ``cap`` (a Job's ``maxCostUSD``) would be passed by
    what the hold's subject has captured and holds, and :class:`~nodus.storage.budgets.BudgetExceeded`
    when one of ``budgets`` (the Budgets the Job matches, ``nodus.billing.budgets.matching``) would be
    passed; the hold is tagged with ``budgets`` (None: not checked, tags kept)."""
    amount = _positive(amount, "a hold")
    entries = (Entry(project, AVAILABLE, -amount), Entry(project, HELD, amount))
    change = HoldChange(hold_id, held=amount, create=not extend, subject=subject, cap=cap, budgets=budgets)
    posting = Posting(
        key,
        "Extend" if extend else "Hold",
        project,
        entries,
        subject=hold_id,
        memo=memo,
        non_negative=frozenset({(project, AVAILABLE)}),
        hold=change,
    )
    return await ledger.post(storage, posting)


async def capture(storage: Storage, project: str, hold_id: str, charge: Charge, key: str) -> Posted:
    """Charge ``charge.amount`` from hold ``hold_id`` (it must hold that much: extend it first)."""
    amount = charge.amount
    if amount < 0:
        raise money.InvalidAmount(f"a charge may not be negative: {amount}")
    entries = (Entry(project, HELD, -amount), Entry(NODUS, REVENUE, amount))
    posting = Posting(
        key,
        "Charge",
        project,
        entries,
        subject=hold_id,
        non_negative=frozenset({(project, HELD)}),
        hold=HoldChange(hold_id, held=-amount, captured=amount),
        charge=charge,
    )
    return await ledger.post(storage, posting)


async def cover(storage: Storage, project: str, subject: str, charge: Charge, key: str) -> Posted:
    """Record time Nodus pays for (``charge.covered``): nothing leaves the project."""
    entries = (Entry(NODUS, COVERED, -charge.amount), Entry(NODUS, CAPACITY, charge.amount))
    return await ledger.post(storage, Posting(key, "Covered", project, entries, subject=subject, charge=charge))


async def refund(storage: Storage, project: str, hold_id: str, charge: Charge, key: str) -> Posted:
    """Give back ``charge.amount`` charged on hold ``hold_id`` (time that turned out to be Nodus's fault):
    revenue returns it to the project's available credit, and the charge row is negative, so the
    segment's charges sum to what the project finally paid."""
    amount = _positive(charge.amount, "a refund")
    entries = (Entry(NODUS, REVENUE, -amount), Entry(project, AVAILABLE, amount))
    negative = Charge(charge.segment, -charge.seconds, charge.rate_per_hour, -amount)
    posting = Posting(key, "Refund", project, entries, subject=hold_id, charge=negative)
    return await ledger.post(storage, posting)


async def charge(storage: Storage, project: str, subject: str, charge: Charge, key: str, memo: str = "") -> Posted:
    """Charge ``charge.amount`` for ``subject`` (a Job's uid) straight from the project's available credit,
    without a hold: what is post-paid (storage by the hour). Raises :class:`~nodus.storage.ledger.Overdrawn`
    when the available credit is short: nothing is charged then, and the caller keeps owing it."""
    amount = _positive(charge.amount, "a charge")
    entries = (Entry(project, AVAILABLE, -amount), Entry(NODUS, REVENUE, amount))
    posting = Posting(
        key,
        "Charge",
        project,
        entries,
        subject=subject,
        memo=memo,
        non_negative=frozenset({(project, AVAILABLE)}),
        charge=charge,
    )
    return await ledger.post(storage, posting)


async def release(storage: Storage, project: str, hold_id: str, key: str) -> Posted:
    """Return what hold ``hold_id`` still holds to the project and settle it (at most once)."""
    return await ledger.release(storage, key, project, hold_id)


async def credits(storage: Storage, project: str) -> dict[str, Decimal]:
    """The project's ``available`` and ``held`` credit, and their sum as ``balance``."""
    accounts = await ledger.balances(storage, project)
    available, held = accounts.get(AVAILABLE, money.ZERO), accounts.get(HELD, money.ZERO)
    return {"available": available, "held": held, "balance": available + held}


async def close(storage: Storage, project: str, project_uid: str) -> ledger.Closed:
    """Close the credit of deleted project ``project`` (uid ``project_uid``), so that a project created later
    under its name starts with none (ADR 0037): every hold still open is released (their attempts are gone with
    the project: nothing will capture them), then all its available credit moves to ``nodus/closed``. Each step
    is idempotent (a hold's release has the billing controller's key, the close ``close:<uid>``), so a pass cut
    short is finished by the next."""
    for open_hold in await ledger.open_holds(storage, project):
        with contextlib.suppress(ledger.HoldSettled):  # settled meanwhile by the billing controller
            await release(storage, project, open_hold.id, f"release:{open_hold.id}")
    memo = f"project {project} (uid {project_uid}) was deleted; its credit was closed"
    return await ledger.close(storage, f"close:{project_uid}", project, CLOSED, memo)


async def granted_to_an_earlier_project(storage: Storage, project: str, posted: Posted) -> bool:
    """Whether a grant found as a replay (``posted.replayed``) was made to an earlier project of this name,
    closed since: its key is spent, and this project got nothing from it."""
    return posted.replayed and await ledger.closed_after(storage, project, posted.transaction_id)
