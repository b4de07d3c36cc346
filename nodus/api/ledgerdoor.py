"""The ledger door: how money moves and is read by the controllers, which never touch the database.

Controllers post :mod:`~nodus.api.postings` operations (hold, extend, capture, cover, refund, release, and
post-paid charges) and read back the state they need: a hold with what was charged on it, a subject's storage
hours, a Budget's figures. Administrators also read the whole ledger here: its verification and a project's
statement (ADR 0038). ``nodus.api.http.billing`` serves each over HTTP and documents the answers.

What the ledger refuses is a domain error of the storage layer (an overdraft, a cap or Budget passed, a key
reused for other amounts, a settled hold, an amount out of shape); :func:`refusal` is the one place each
becomes its Status (``InsufficientCredits``, ``MaxCostReached``, ``BudgetExceeded``, ``Conflict``,
``BadRequest``), with the amounts and what to do. Every posting is its own transaction (the ledger's); a
replayed key changes nothing and answers the same state.

The Project's ``status.credits`` is not written here: the credits reconciler of ``nodus controllers`` copies
it after the movements the controllers post (ADR 0044).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Any

from nodus.api import credits
from nodus.api.errors import APIError, bad_request, not_found
from nodus.api.postings import SEGMENTS, Capture, Hold, Operation, PostPaid, Release
from nodus.api.registry import API_VERSION, GROUP
from nodus.apimachinery import units
from nodus.billing import budgets, checking, ledger, money
from nodus.catalog.pricebook import PriceBook
from nodus.storage import ledger as tables
from nodus.storage.budgets import BudgetExceeded, BudgetLimit
from nodus.storage.errors import Key
from nodus.storage.ledger import CapExceeded, HoldSettled, KeyReused, LedgerError, Overdrawn
from nodus.storage.objects import Storage

Object = dict[str, Any]


class LedgerDoor:
    """The ledger's operations and reads for one API server (see the module docstring)."""

    def __init__(self, storage: Storage, price_book: PriceBook) -> None:
        self._storage = storage
        self._price_book = price_book

    # --- reads -----------------------------------------------------------------------------------

    async def hold(self, project: str, hold_id: str) -> Object:
        """The ``LedgerHold`` answer: the hold (``exists`` False when there is none), what was charged and covered
        on it per segment, and the project's credits."""
        hold = await tables.hold(self._storage, hold_id)
        charged = await tables.charged(self._storage, hold_id)
        figures = await ledger.credits(self._storage, project)
        out: Object = {
            "kind": "LedgerHold",
            "apiVersion": API_VERSION,
            "project": project,
            "hold": hold_id,
            "exists": hold is not None,
            "chargedUSD": {s: money.text(charged[s]) for s in SEGMENTS if s in charged},
            "coveredUSD": {s: money.text(charged[f"covered:{s}"]) for s in SEGMENTS if f"covered:{s}" in charged},
            "credits": credits.figures_wire(figures),
        }
        if hold is not None:
            out.update(
                amountUSD=money.text(hold.amount),
                capturedUSD=money.text(hold.captured),
                releasedUSD=money.text(hold.released),
                settled=hold.settled,
            )
        return out

    async def storage_charges(self, project: str, subject: str) -> Object:
        """The ``LedgerStorage`` answer: this server's storage price, the hours charged to ``subject`` (a Job's
        uid, or the project's own) and the project's credits."""
        charged = await tables.numbered_charges(self._storage, subject, "Storage")
        figures = await ledger.credits(self._storage, project)
        out: Object = {
            "kind": "LedgerStorage",
            "apiVersion": API_VERSION,
            "project": project,
            "subject": subject,
            "price": self._price_book.storage.wire(self._price_book.version),
            "chargedUSD": money.text(charged.amount),
            "hours": charged.count,
            "credits": credits.figures_wire(figures),
        }
        if charged.last is not None:
            out["lastHour"] = charged.last
        return out

    async def budget(self, project: str, name: str) -> Object:
        """The ``LedgerBudget`` answer: Budget ``name``'s figures for its current period; a 404 Status when the
        project has no such Budget."""
        budget = await self._storage.get(Key(budgets.KIND, project, name))
        if budget is None:
            raise not_found("budgets", GROUP, name)
        limit, figures = await budgets.standing(self._storage, budget, units.now())
        room = budgets.room(limit, figures)
        out: Object = {
            "kind": "LedgerBudget",
            "apiVersion": API_VERSION,
            "project": project,
            "budget": name,
            "uid": limit.uid,
            "period": str((budget.get("spec") or {}).get("period") or budgets.DEFAULT_PERIOD),
            "limitUSD": money.text(limit.limit),
            "spentUSD": money.text(figures.spent),
            "heldUSD": money.text(figures.held),
            "committedUSD": money.text(figures.committed),
            "remainingUSD": money.text(room.remaining),
        }
        if limit.start is not None and limit.end is not None:
            out.update(periodStart=units.format_time(limit.start), periodEnd=units.format_time(limit.end))
        return out

    async def verification(self) -> Object:
        """The ``LedgerVerification`` answer: every breach of the ledger's invariants and display copies now. A
        breach is a finding, not a failure."""
        found = await checking.breaches(self._storage)
        return {
            "kind": "LedgerVerification",
            "apiVersion": API_VERSION,
            "sound": not found,
            "breaches": [{"invariant": breach.invariant, "message": breach.detail} for breach in found],
        }

    async def statement(self, project: str, start: datetime, end: datetime) -> AsyncGenerator[Object, None]:
        """Every movement and charge of ``project`` from ``start`` to ``end`` (exclusive), oldest first, as the
        statement's items, read from one database snapshot. The caller closes it (``aclose``) however it ends:
        it holds a connection while it is open."""
        lines = tables.statement(self._storage, project, start, end)
        try:
            async for line in lines:
                yield checking.wire(line)
        finally:
            await lines.aclose()

    # --- postings --------------------------------------------------------------------------------

    async def post(self, project: str, operation: Operation) -> Object:
        """Apply ``operation`` to ``project``'s ledger; returns the state it leaves, as :meth:`hold` answers (a
        post-paid Charge: as :meth:`storage_charges`). A refused posting changes nothing: its Status is
        :func:`refusal`'s."""
        try:
            await self._apply(project, operation)
        except (LedgerError, money.InvalidAmount) as exc:
            raise refusal(project, exc) from None
        if isinstance(operation, PostPaid):
            return await self.storage_charges(project, operation.subject)
        return await self.hold(project, operation.hold)

    async def _apply(self, project: str, operation: Operation) -> None:
        storage = self._storage
        match operation:
            case Hold(extend=False):
                # The hold's Attempt by name, kept with the Hold: statements name it after it is gone (ADR 0038).
                named = await tables.subject_name(storage, operation.hold)
                await ledger.hold(
                    storage,
                    project,
                    operation.hold,
                    operation.amount,
                    operation.key,
                    subject=operation.subject,
                    cap=operation.cap,
                    budgets=await self._budgets(project, operation),
                    memo=named,
                )
            case Hold(extend=True):
                await ledger.hold(
                    storage,
                    project,
                    operation.hold,
                    operation.amount,
                    operation.key,
                    subject=operation.subject,
                    extend=True,
                    cap=operation.cap,
                    budgets=await self._budgets(project, operation),
                )
            case Capture(operation="Capture"):
                await ledger.capture(storage, project, operation.hold, operation.charge, operation.key)
            case Capture(operation="Cover"):
                await ledger.cover(storage, project, operation.hold, operation.charge, operation.key)
            case Capture(operation="Refund"):
                await ledger.refund(storage, project, operation.hold, operation.charge, operation.key)
            case Release():
                await ledger.release(storage, project, operation.hold, operation.key)
            case PostPaid():
                await ledger.charge(
                    storage, project, operation.subject, operation.charge, operation.key, operation.memo
                )

    async def _budgets(self, project: str, hold: Hold) -> tuple[BudgetLimit, ...] | None:
        """The Budgets the hold's Job matches now; None without a Job or when it is gone (or is another Job of
        that name than the hold's ``subject``): then no Budget is checked."""
        if hold.job is None:
            return None
        job = await self._storage.get(Key("Job", project, hold.job))
        if job is None or (hold.subject and job["metadata"].get("uid") != hold.subject):
            return None
        labels = job["metadata"].get("labels") or {}
        return budgets.matching(await budgets.of_project(self._storage, project), labels, units.now())


def refusal(project: str, exc: LedgerError | money.InvalidAmount) -> APIError:
    """The Status of a posting the ledger refused: the one mapping of its domain errors."""
    match exc:
        case Overdrawn():
            need = -exc.change
            return APIError(
                "InsufficientCredits",
                f"project {project} has {money.text(exc.balance)} USD {exc.account} credit; this needs "
                f"{money.text(need)} USD",
                fix=f"An administrator: nodus credits grant {project} AMOUNT (at least "
                f"{money.text(need - exc.balance)} more), or lower what runs at once.",
                details={"name": project, "group": GROUP, "kind": "projects"},
            )
        case CapExceeded():
            return APIError(
                "MaxCostReached",
                f"the Job has {money.text(exc.committed)} USD charged and held; {money.text(exc.change)} USD more "
                f"would pass its maxCostUSD of {money.text(exc.cap)}",
                fix="Raise spec.maxCostUSD (kubectl patch job NAME --type merge -p "
                '\'{"spec":{"maxCostUSD":"..."}}\'); the Job resumes by itself.',
                details={"name": project, "group": GROUP, "kind": "jobs"},
            )
        case BudgetExceeded():
            return _over_budget(exc)
        case KeyReused():
            return APIError("Conflict", str(exc), fix="Use a new key for a new movement.")
        case HoldSettled():
            return APIError("Conflict", str(exc), fix="Open a new hold; a settled hold takes no more movements.")
        case money.InvalidAmount():
            return bad_request(str(exc))
    raise exc  # a refusal of the ledger this door does not know: a server error, never a silent success


def _over_budget(exc: BudgetExceeded) -> APIError:
    budget, committed, change = exc.budget, exc.committed, exc.change
    if budget.start is not None and budget.end is not None:
        span = f"from {units.format_time(budget.start)} to {units.format_time(budget.end)}"
        wait = f", wait for its period to end at {units.format_time(budget.end)}"
    else:
        span, wait = "in total", ""
    needed = money.text(committed + change)
    patch = f'{{"spec":{{"limitUSD":"{needed}"}}}}'
    return APIError(
        "BudgetExceeded",
        f"Budget {budget.name} allows {money.text(budget.limit)} USD {span}; its Jobs have {money.text(committed)} "
        f"USD charged and held, and this hold needs {money.text(change)} USD more",
        fix=f"Raise spec.limitUSD of Budget {budget.name} to at least {needed} (kubectl patch budget {budget.name} "
        f"--type merge -p '{patch}'){wait}, or lower the Job's parallelism; the Job resumes by itself.",
        details={"name": budget.name, "group": GROUP, "kind": "budgets"},
    )
