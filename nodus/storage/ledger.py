"""The ledger's tables: balanced, idempotent postings, account balances, holds and charges.

This module owns the SQL; what a movement means (a grant, a hold, a capture) is ``nodus.billing``'s.
One :func:`post` is one PostgreSQL transaction that, in this order:

1. looks the idempotency key up: a posting already made with the same entries is a replay and
   changes nothing (:attr:`Posted.replayed`); the same key with other entries is refused
   (:class:`KeyReused`);
2. applies the hold change (create, add, capture, release; a hold is settled at most once,
   :class:`HoldSettled`), after the cap and Budget checks and their advisory locks where it has them,
   and records the charge, if any;
3. creates the accounts it names if needed and locks them ``FOR NO KEY UPDATE`` in id order, last
   (the hot rows are held only from there to the commit; no deadlock between two postings that touch
   the same accounts), then moves their balances, refusing a balance that would go below zero on an
   account that may not (:class:`Overdrawn`, naming the account and the amounts);
4. inserts the transaction and its entries, after the account locks (their foreign-key checks would
   otherwise queue on rows another posting holds). A deferred constraint trigger (migration 0006)
   refuses the commit if the entries do not sum to zero.

Steps 1-4 for a posting without a hold change other than a capture are one call of the server-side
function ``ledger_post`` (migration 0008): one round trip (docs/benchmarks.md §6).

Amounts are :class:`~decimal.Decimal` with at most six fractional digits (NUMERIC(24, 6)); rounding
is the caller's, done once where a charge is computed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import asyncpg

from nodus.storage.errors import StorageError
from nodus.storage.objects import Storage

if TYPE_CHECKING:
    from nodus.storage.budgets import BudgetLimit

NODUS = "nodus"  # the owner of Nodus's own accounts
# Two-key advisory locks (class, hash of the subject) for caps; no other lock uses this class.
_CAP_LOCK_CLASS = 7262025


class LedgerError(StorageError):
    """A posting was refused; nothing was written."""


class KeyReused(LedgerError):
    """The idempotency key was used before for a posting with other entries."""


class Overdrawn(LedgerError):
    """An account that may not go below zero would have."""

    def __init__(self, owner: str, account: str, balance: Decimal, change: Decimal) -> None:
        super().__init__(f"account {owner}/{account} holds {balance}; moving {change} would take it below zero")
        self.owner, self.account, self.balance, self.change = owner, account, balance, change


class HoldSettled(LedgerError):
    """The hold was settled already (released), or never existed."""


class CapExceeded(LedgerError):
    """A hold would take what its subject (a Job) has captured and holds past the subject's cap."""

    def __init__(self, subject: str, committed: Decimal, change: Decimal, cap: Decimal) -> None:
        super().__init__(f"{subject} has {committed} charged and held; {change} more would pass its cap of {cap}")
        self.subject, self.committed, self.change, self.cap = subject, committed, change, cap


@dataclass(frozen=True)
class Entry:
    """One leg: ``amount`` added to account ``owner/account`` (negative: taken from it)."""

    owner: str
    account: str
    amount: Decimal


@dataclass(frozen=True)
class HoldChange:
    """What a posting does to a hold: ``create`` it with ``held``, or add ``held`` (negative: captured
    or released) with ``captured``/``released`` counted; ``settle`` closes it (at most once)."""

    hold_id: str
    held: Decimal = Decimal(0)
    captured: Decimal = Decimal(0)
    released: Decimal = Decimal(0)
    create: bool = False
    settle: bool = False
    subject: str = ""
    # With a cap, the subject's captured plus held credit, this change included, may not pass it.
    cap: Decimal | None = None
    # The Budgets the subject (a Job) matches now: the hold is tagged with exactly these and the change
    # must fit each (nodus.storage.budgets). None: not checked, tags kept (time already billed).
    budgets: tuple[BudgetLimit, ...] | None = None


@dataclass(frozen=True)
class Charge:
    """A charge as statements show it: ``seconds`` of ``segment`` at ``rate_per_hour``."""

    segment: str
    seconds: Decimal
    rate_per_hour: Decimal
    amount: Decimal
    covered: bool = False


@dataclass(frozen=True)
class Posting:
    """One movement of money. ``non_negative`` names the accounts (owner, name) that may not go below zero."""

    key: str
    kind: str
    project: str
    entries: tuple[Entry, ...]
    subject: str = ""
    memo: str = ""
    non_negative: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    hold: HoldChange | None = None
    charge: Charge | None = None

    def fingerprint(self) -> str:
        """What makes two postings under one key the same: kind, project, subject and the entries."""
        legs = sorted(f"{e.owner}/{e.account}:{e.amount.normalize()}" for e in self.entries)
        text = "|".join([self.kind, self.project, self.subject, *legs])
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Posted:
    transaction_id: int
    replayed: bool


def _connection(storage: Storage) -> contextlib.AbstractAsyncContextManager[Any]:
    # The object store's pool: the ledger shares its connections and its start/stop, as logs do.
    return storage._connection()


async def post(storage: Storage, posting: Posting) -> Posted:
    """Make ``posting`` (see the module docstring), or find that it was made already.

    The posting is one call of ``ledger_post`` (migration 0008), which takes the hot account rows last
    and holds them only to the commit. With no hold change, or a plain one (a capture), that call is the
    whole transaction; any other hold change (create, settle, a cap, budgets) is made first, by
    :func:`_change_hold`, in one transaction with the call. Every posting takes its locks in one order
    (cap and budget locks, the hold's row, the accounts in id order): none waits on another in a cycle."""
    if sum((e.amount for e in posting.entries), Decimal(0)) != 0:
        raise LedgerError(f"posting {posting.key}: its entries sum to {sum(e.amount for e in posting.entries)}, not 0")
    fingerprint = posting.fingerprint()
    async with _connection(storage) as conn:
        if _in_one_statement(posting.hold):
            # No round trip while the hot rows are locked: the key, the hold, the charge, the balances and
            # the entries in one statement, its own transaction (a replay is found by the call itself).
            return await _record(conn, posting, fingerprint, replay=True)
        try:
            async with conn.transaction():
                existing = await _existing(conn, posting.key, fingerprint)
                if existing is not None:
                    return Posted(existing, replayed=True)
                return Posted(await _apply(conn, posting, fingerprint), replayed=False)
        except asyncpg.UniqueViolationError:
            # A concurrent posting of the same key won the race: this one is its replay, or a conflict.
            existing = await _existing(conn, posting.key, fingerprint)
            if existing is None:
                raise
            return Posted(existing, replayed=True)


async def _existing(conn: Any, key: str, fingerprint: str) -> int | None:
    row = await conn.fetchrow("SELECT id, fingerprint FROM ledger_transactions WHERE key = $1", key)
    if row is None:
        return None
    if row["fingerprint"] != fingerprint:
        raise KeyReused(f"the idempotency key {key} was used before for a posting with other amounts")
    return int(row["id"])


async def _apply(conn: Any, posting: Posting, fingerprint: str) -> int:
    """The posting inside the caller's transaction, its key looked up already: the hold change first
    (its cap and budget locks, then the hold's row), then ledger_post, which locks the accounts last."""
    if posting.hold is not None:
        await _change_hold(conn, posting.project, posting.hold)
    return (await _record(conn, posting, fingerprint, replay=False, hold=False)).transaction_id


def _in_one_statement(change: HoldChange | None) -> bool:
    """Whether ledger_post makes ``change`` itself: none, or a plain move of the hold's amounts (a
    capture). Anything more (create, settle, a cap, budgets, or any field added later) is
    :func:`_change_hold`'s, in a transaction of its own."""
    return change is None or change == HoldChange(
        change.hold_id, held=change.held, captured=change.captured, released=change.released
    )


# ledger_post (migration 0008) refuses with check_violation / unique_violation errors named by a constraint.
_POST = (
    "SELECT transaction_id, replayed FROM ledger_post("
    "$1, $2, $3, $4, $5, $6, $7::text[], $8::text[], $9::numeric[], $10::boolean[], "
    "$11, $12, $13, $14, $15, $16, $17, $18, $19, $20)"
)


async def _record(conn: Any, posting: Posting, fingerprint: str, *, replay: bool, hold: bool = True) -> Posted:
    """Call ledger_post for ``posting`` (its hold change too when ``hold``: it must be plain, see
    :func:`_in_one_statement`); with ``replay`` a key posted before is a replay, else a unique violation."""
    change = posting.hold if hold else None
    charge = posting.charge
    try:
        row = await conn.fetchrow(
            _POST,
            posting.key,
            posting.kind,
            posting.project,
            posting.subject,
            fingerprint,
            posting.memo,
            [e.owner for e in posting.entries],
            [e.account for e in posting.entries],
            [e.amount for e in posting.entries],
            [(e.owner, e.account) in posting.non_negative for e in posting.entries],
            change.hold_id if change is not None else None,
            change.held if change is not None else None,
            change.captured if change is not None else None,
            change.released if change is not None else None,
            charge.segment if charge is not None else None,
            charge.seconds if charge is not None else None,
            charge.rate_per_hour if charge is not None else None,
            charge.amount if charge is not None else None,
            charge.covered if charge is not None else None,
            replay,
        )
    except asyncpg.CheckViolationError as exc:
        if exc.constraint_name == "ledger_overdrawn":
            refused = json.loads(exc.detail)
            raise Overdrawn(
                refused["owner"], refused["account"], Decimal(refused["balance"]), Decimal(refused["change"])
            ) from None
        if exc.constraint_name == "ledger_hold_settled":
            raise HoldSettled(exc.message) from None
        raise
    except asyncpg.UniqueViolationError as exc:
        if exc.constraint_name == "ledger_key_reused":
            raise KeyReused(exc.message) from None
        raise
    return Posted(int(row["transaction_id"]), replayed=bool(row["replayed"]))


async def _change_hold(conn: Any, project: str, change: HoldChange) -> None:
    if change.cap is not None and change.held > 0:
        await _check_cap(conn, change)
    if change.budgets is not None and change.held > 0:
        from nodus.storage import budgets  # it builds on this module

        await budgets.check(conn, project, change)
    if change.create:
        await conn.execute(
            "INSERT INTO holds (id, project, subject, amount) VALUES ($1, $2, $3, $4)",
            change.hold_id,
            project,
            change.subject,
            change.held,
        )
        return
    updated = await conn.fetchval(
        "UPDATE holds SET amount = amount + $2, captured = captured + $3, released = released + $4, "
        "settled_at = CASE WHEN $5 THEN now() ELSE settled_at END "
        "WHERE id = $1 AND settled_at IS NULL AND amount + $2 >= 0 RETURNING id",
        change.hold_id,
        change.held,
        change.captured,
        change.released,
        change.settle,
    )
    if updated is None:
        raise HoldSettled(f"hold {change.hold_id} is settled already, does not exist, or holds less than asked")


async def release(storage: Storage, key: str, project: str, hold_id: str, memo: str = "") -> Posted:
    """Settle a hold: what it still holds goes back to the project's available credit, once.

    The amount is read under the hold's row lock in the same transaction, so a capture racing the
    release is either before it (and the release returns less) or refused after it (HoldSettled).
    A replay of ``key`` changes nothing, whatever the hold holds by then."""
    async with _connection(storage) as conn, conn.transaction():
        replay = await conn.fetchval("SELECT id FROM ledger_transactions WHERE key = $1", key)
        if replay is not None:
            return Posted(int(replay), replayed=True)
        row = await conn.fetchrow("SELECT amount, settled_at FROM holds WHERE id = $1 FOR UPDATE", hold_id)
        if row is None or row["settled_at"] is not None:
            raise HoldSettled(f"hold {hold_id} is settled already or does not exist")
        rest = Decimal(row["amount"])
        posting = Posting(
            key=key,
            kind="Release",
            project=project,
            subject=hold_id,
            memo=memo,
            entries=(Entry(project, "held", -rest), Entry(project, "available", rest)),
            hold=HoldChange(hold_id, held=-rest, released=rest, settle=True),
        )
        fingerprint = hashlib.sha256(f"Release|{project}|{hold_id}".encode()).hexdigest()
        return Posted(await _apply(conn, posting, fingerprint), replayed=False)


async def _check_cap(conn: Any, change: HoldChange) -> None:
    """Refuse a hold that would take its subject past ``change.cap``; serialised per subject, so two
    holds of one Job racing each other cannot both slip under the cap."""
    subject = change.subject or str(
        await conn.fetchval("SELECT subject FROM holds WHERE id = $1", change.hold_id) or change.hold_id
    )
    await conn.execute("SELECT pg_advisory_xact_lock($1::int, hashtext($2))", _CAP_LOCK_CLASS, subject)
    committed = Decimal(
        await conn.fetchval("SELECT coalesce(sum(amount + captured), 0) FROM holds WHERE subject = $1", subject)
    )
    assert change.cap is not None
    if committed + change.held > change.cap:
        raise CapExceeded(subject, committed, change.held, change.cap)


@dataclass(frozen=True)
class Hold:
    id: str
    project: str
    subject: str
    amount: Decimal
    captured: Decimal
    released: Decimal
    settled: bool


async def hold(storage: Storage, hold_id: str) -> Hold | None:
    async with _connection(storage) as conn:
        row = await conn.fetchrow("SELECT * FROM holds WHERE id = $1", hold_id)
    return _hold(row) if row is not None else None


async def holds_of(storage: Storage, subject_prefix: str) -> list[Hold]:
    """The holds whose subject starts with ``subject_prefix`` (a Job's ``<project>/<job uid>``)."""
    async with _connection(storage) as conn:
        rows = await conn.fetch(
            "SELECT * FROM holds WHERE starts_with(subject, $1) ORDER BY created_at", subject_prefix
        )
    return [_hold(r) for r in rows]


def _hold(row: Any) -> Hold:
    return Hold(
        row["id"],
        row["project"],
        row["subject"],
        Decimal(row["amount"]),
        Decimal(row["captured"]),
        Decimal(row["released"]),
        row["settled_at"] is not None,
    )


@dataclass(frozen=True)
class Closed:
    """A project's available credit moved to a Nodus account by :func:`close`: how much (on a replay, 0)."""

    transaction_id: int
    replayed: bool
    amount: Decimal


async def close(storage: Storage, key: str, project: str, account: str, memo: str = "") -> Closed:
    """Move everything in ``project``'s available credit to Nodus's ``account``, once (ADR 0037).

    The balance is read under the account's row lock in the same transaction, so a posting racing the close is
    either before it (and closed with the rest) or after it (and refused if it takes from the account). The
    posting is made even when the balance is zero: it marks where the project ended (:func:`closed_after`).
    A replay of ``key`` changes nothing, whatever the balance is by then."""
    async with _connection(storage) as conn, conn.transaction():
        replay = await conn.fetchval("SELECT id FROM ledger_transactions WHERE key = $1", key)
        if replay is not None:
            return Closed(int(replay), True, Decimal(0))
        balance = await conn.fetchval(
            "SELECT balance FROM ledger_accounts WHERE owner = $1 AND name = 'available' FOR NO KEY UPDATE", project
        )
        rest = Decimal(balance or 0)
        posting = Posting(
            key=key,
            kind="Close",
            project=project,
            memo=memo,
            entries=(Entry(project, "available", -rest), Entry(NODUS, account, rest)),
            non_negative=frozenset({(project, "available")}),
        )
        fingerprint = hashlib.sha256(f"Close|{project}|{key}".encode()).hexdigest()
        return Closed(await _apply(conn, posting, fingerprint), False, rest)


async def closed_after(storage: Storage, project: str, transaction_id: int) -> bool:
    """Whether a project named ``project`` was closed (deleted) after transaction ``transaction_id``."""
    async with _connection(storage) as conn:
        found = await conn.fetchval(
            "SELECT 1 FROM ledger_transactions WHERE project = $1 AND kind = 'Close' AND id > $2 LIMIT 1",
            project,
            transaction_id,
        )
    return found is not None


async def open_holds(storage: Storage, project: str) -> list[Hold]:
    """The holds of ``project`` not settled yet, oldest first."""
    async with _connection(storage) as conn:
        rows = await conn.fetch(
            "SELECT * FROM holds WHERE project = $1 AND settled_at IS NULL ORDER BY created_at, id", project
        )
    return [_hold(r) for r in rows]


async def balances(storage: Storage, owner: str) -> dict[str, Decimal]:
    """Every account of ``owner`` and its balance."""
    async with _connection(storage) as conn:
        rows = await conn.fetch("SELECT name, balance FROM ledger_accounts WHERE owner = $1", owner)
    return {r["name"]: Decimal(r["balance"]) for r in rows}


async def charged(storage: Storage, subject_prefix: str) -> dict[str, Decimal]:
    """Charged so far per segment for subjects starting with ``subject_prefix`` (covered time apart)."""
    async with _connection(storage) as conn:
        rows = await conn.fetch(
            "SELECT segment, covered, sum(amount) AS amount FROM charges WHERE starts_with(subject, $1) "
            "GROUP BY segment, covered",
            subject_prefix,
        )
    out: dict[str, Decimal] = {}
    for row in rows:
        name = f"covered:{row['segment']}" if row["covered"] else row["segment"]
        out[name] = out.get(name, Decimal(0)) + Decimal(row["amount"])
    return out


@dataclass(frozen=True)
class NumberedCharges:
    """The charges of one segment of a subject keyed ``<prefix>:<n>`` (storage by the hour): how many,
    their sum, and the highest ``n`` (None: none yet)."""

    count: int
    amount: Decimal
    last: int | None


async def numbered_charges(storage: Storage, subject: str, segment: str) -> NumberedCharges:
    """The ``segment`` charges of ``subject`` whose keys end in ``:<n>``, with the highest ``n``."""
    async with _connection(storage) as conn:
        row = await conn.fetchrow(
            "SELECT count(*) AS count, coalesce(sum(c.amount), 0) AS amount, "
            "max((regexp_match(t.key, ':([0-9]{1,18})$'))[1]::bigint) AS last "
            "FROM charges c JOIN ledger_transactions t ON t.id = c.transaction_id "
            "WHERE c.subject = $1 AND c.segment = $2",
            subject,
            segment,
        )
    last = row["last"]
    return NumberedCharges(int(row["count"]), Decimal(row["amount"]), int(last) if last is not None else None)


@dataclass(frozen=True)
class Breach:
    """A broken ledger invariant, for ``nodus billing verify``."""

    invariant: str
    detail: str


_CHECKS: Sequence[tuple[str, str, str]] = (
    (
        "EntriesBalance",
        "SELECT transaction_id AS id, sum(amount) AS total FROM ledger_entries GROUP BY transaction_id "
        "HAVING sum(amount) <> 0",
        "transaction {id}: entries sum to {total}",
    ),
    (
        "BalancesAreSums",
        "SELECT a.owner, a.name, a.balance, coalesce(sum(e.amount), 0) AS total FROM ledger_accounts a "
        "LEFT JOIN ledger_entries e ON e.account_id = a.id GROUP BY a.id "
        "HAVING a.balance <> coalesce(sum(e.amount), 0)",
        "account {owner}/{name}: balance {balance}, entries sum to {total}",
    ),
    (
        "NoNegativeProjectBalance",
        "SELECT owner, name, balance FROM ledger_accounts WHERE owner <> 'nodus' AND balance < 0",
        "account {owner}/{name} is negative: {balance}",
    ),
    (
        "HoldsAddUp",
        "SELECT id, amount, captured, released FROM holds WHERE amount < 0 OR (settled_at IS NOT NULL AND amount <> 0)",
        "hold {id}: amount {amount} (captured {captured}, released {released})",
    ),
    (
        "HeldEqualsOpenHolds",
        "SELECT p.project, coalesce(a.balance, 0) AS held, p.open FROM "
        "(SELECT project, sum(amount) AS open FROM holds GROUP BY project) p "
        "LEFT JOIN ledger_accounts a ON a.owner = p.project AND a.name = 'held' "
        "WHERE coalesce(a.balance, 0) <> p.open",
        "project {project}: held account {held}, open holds {open}",
    ),
)


async def breaches(storage: Storage) -> list[Breach]:
    """Every breach of the ledger's invariants (empty: the ledger is sound)."""
    found: list[Breach] = []
    async with _connection(storage) as conn:
        for invariant, query, detail in _CHECKS:
            for row in await conn.fetch(query):
                found.append(Breach(invariant, detail.format(**dict(row))))
    return found


async def project_credit_copies(storage: Storage) -> list[tuple[str, dict[str, Any]]]:
    """Every Project's ``status.credits`` display copy, by project name."""
    async with _connection(storage) as conn:
        rows = await conn.fetch(
            "SELECT name, (body::jsonb->'status'->'credits')::text AS credits FROM objects "
            "WHERE kind = 'Project' AND body::jsonb->'status' ? 'credits'"
        )
    return [(r["name"], json.loads(r["credits"])) for r in rows]


@dataclass(frozen=True)
class StatementLine:
    time: datetime
    key: str
    kind: str
    subject: str
    segment: str
    seconds: Decimal | None
    rate_per_hour: Decimal | None
    amount: Decimal
    covered: bool
    memo: str
    # What the subject (a uid) is, as kubectl names objects: ``attempt/train-0-1``, ``job/train``, ``project/demo``;
    # '' when it names nothing (a grant) or nothing known any more.
    subject_name: str = ""


# An object by its uid, as ``kind/name`` (kubectl's form: the kind in lower case).
_NAMED = "SELECT lower(o.kind) || '/' || o.name FROM objects o WHERE o.uid = {uid}"
# The name the API server wrote in the memo of a hold's Hold posting (ADR 0038): it outlives the Attempt.
_HOLD_NAME = (
    "SELECT nullif(h.memo, '') FROM ledger_transactions h WHERE h.subject = {uid} AND h.kind = 'Hold' "
    "ORDER BY h.id LIMIT 1"
)


async def subject_name(storage: Storage, uid: str) -> str:
    """``kind/name`` of the object whose uid is ``uid`` (``attempt/train-0-1``), or '' when there is none."""
    async with _connection(storage) as conn:
        return str(await conn.fetchval(_NAMED.format(uid="$1"), uid) or "")


async def statement(
    storage: Storage, project: str, start: datetime, end: datetime
) -> AsyncGenerator[StatementLine, None]:
    """Every movement of ``project``'s available and held credit and every charge, oldest first, each with
    what its subject is: the object of that uid if it exists, else the name recorded with its hold."""
    query = f"""
        SELECT t.created_at, t.key, t.kind, t.subject, t.memo, c.segment, c.seconds, c.rate_per_hour, c.covered,
               coalesce(c.amount, (SELECT sum(e.amount) FROM ledger_entries e JOIN ledger_accounts a
                                   ON a.id = e.account_id
                                   WHERE e.transaction_id = t.id AND a.owner = t.project AND a.name = 'available'))
               AS amount,
               CASE WHEN t.subject = '' THEN '' ELSE
                 coalesce(({_NAMED.format(uid="t.subject")}), ({_HOLD_NAME.format(uid="t.subject")}), '')
               END AS subject_name
        FROM ledger_transactions t LEFT JOIN charges c ON c.transaction_id = t.id
        WHERE t.project = $1 AND t.created_at >= $2 AND t.created_at < $3
        ORDER BY t.id
    """
    async with _connection(storage) as conn, conn.transaction():
        async for row in conn.cursor(query, project, start, end):
            yield StatementLine(
                row["created_at"],
                row["key"],
                row["kind"],
                row["subject"],
                row["segment"] or "",
                Decimal(row["seconds"]) if row["seconds"] is not None else None,
                Decimal(row["rate_per_hour"]) if row["rate_per_hour"] is not None else None,
                Decimal(row["amount"] or 0),
                bool(row["covered"]),
                row["memo"],
                row["subject_name"],
            )
