"""The ledger against the real PostgreSQL: postings, replays, holds, refusals, and the database's own guard."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from decimal import Decimal

import asyncpg
import pytest

from nodus.billing import ledger, money
from nodus.storage import ledger as tables
from nodus.storage.ledger import Charge, HoldSettled, KeyReused, Overdrawn
from nodus.storage.objects import Storage


@pytest.fixture
async def storage(database_url: str) -> AsyncIterator[Storage]:
    store = Storage(database_url, pool_size=8, compaction_interval=3600)
    await store.start()
    yield store
    await store.stop()


def project() -> str:
    return f"p-{uuid.uuid4().hex[:10]}"


def usd(text: str) -> Decimal:
    return money.parse(text)


async def test_grant_hold_capture_release(storage: Storage) -> None:
    name = project()
    await ledger.grant(storage, name, usd("100"), f"grant:{name}")
    await ledger.hold(storage, name, f"{name}-h", usd("30"), f"hold:{name}")
    assert await ledger.credits(storage, name) == {"available": usd("70"), "held": usd("30"), "balance": usd("100")}
    charge = Charge("Running", Decimal(3600), usd("2.5"), money.charge(usd("2.5"), Decimal(3600)))
    await ledger.capture(storage, name, f"{name}-h", charge, f"capture:{name}:1")
    await ledger.release(storage, name, f"{name}-h", f"release:{name}")
    assert await ledger.credits(storage, name) == {"available": usd("97.5"), "held": usd("0"), "balance": usd("97.5")}
    hold = await tables.hold(storage, f"{name}-h")
    assert hold is not None and hold.settled and hold.captured == usd("2.5") and hold.released == usd("27.5")
    assert await tables.breaches(storage) == []


async def test_a_replay_changes_nothing_and_other_amounts_are_refused(storage: Storage) -> None:
    name = project()
    first = await ledger.grant(storage, name, usd("10"), f"grant:{name}")
    again = await ledger.grant(storage, name, usd("10"), f"grant:{name}")
    assert (again.transaction_id, again.replayed) == (first.transaction_id, True)
    with pytest.raises(KeyReused):
        await ledger.grant(storage, name, usd("11"), f"grant:{name}")
    assert (await ledger.credits(storage, name))["available"] == usd("10")


async def test_holds_must_fit_and_captures_must_fit_their_hold(storage: Storage) -> None:
    name = project()
    await ledger.grant(storage, name, usd("5"), f"grant:{name}")
    with pytest.raises(Overdrawn, match="available"):
        await ledger.hold(storage, name, f"{name}-h", usd("5.000001"), f"hold:{name}")
    await ledger.hold(storage, name, f"{name}-h", usd("5"), f"hold:{name}:2")
    with pytest.raises((HoldSettled, Overdrawn)):
        await ledger.capture(storage, name, f"{name}-h", Charge("Running", Decimal(1), usd("1"), usd("6")), f"c:{name}")
    await ledger.release(storage, name, f"{name}-h", f"release:{name}")
    replay = await ledger.release(storage, name, f"{name}-h", f"release:{name}")
    assert replay.replayed
    with pytest.raises(HoldSettled):
        await ledger.release(storage, name, f"{name}-h", f"release:{name}:again")
    assert await ledger.credits(storage, name) == {"available": usd("5"), "held": usd("0"), "balance": usd("5")}


async def test_the_database_refuses_unbalanced_entries(storage: Storage) -> None:
    name = project()
    await ledger.grant(storage, name, usd("1"), f"grant:{name}")
    async with storage._connection() as conn:
        with pytest.raises(asyncpg.CheckViolationError, match="does not balance"):
            async with conn.transaction():
                transaction = await conn.fetchval("SELECT max(id) FROM ledger_transactions")
                account = await conn.fetchval("SELECT id FROM ledger_accounts WHERE owner = $1", name)
                await conn.execute(
                    "INSERT INTO ledger_entries (transaction_id, account_id, amount) VALUES ($1, $2, 1)",
                    transaction,
                    account,
                )
    assert await tables.breaches(storage) == []


@pytest.mark.parametrize(
    ("rate", "seconds", "expected"),
    [
        pytest.param("2.5", "3600", "2.5", id="one-hour"),
        pytest.param("3.29", "1", "0.000914", id="one-second-rounds-half-up"),
        pytest.param("0.000001", "1", "0", id="below-a-micro-dollar"),
        pytest.param("98.32", "59.5", "1.625011", id="fractional-seconds"),
    ],
)
def test_a_charge_is_rate_times_seconds_rounded_once(rate: str, seconds: str, expected: str) -> None:
    assert money.charge(usd(rate), Decimal(seconds)) == Decimal(expected)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("-1", "at least 0", id="negative"),
        pytest.param("1.0000001", "six fractional digits", id="too-precise"),
        pytest.param("ten", "not a decimal", id="words"),
        pytest.param(1.5, "not a float", id="float"),
    ],
)
def test_amounts_are_checked(text: object, problem: str) -> None:
    with pytest.raises(money.InvalidAmount, match=problem):
        money.parse(text)


async def test_closing_a_deleted_project_releases_its_holds_and_takes_its_credit_once(storage: Storage) -> None:
    """ADR 0037: a project created again under a deleted one's name starts with nothing of it."""
    name, uid = project(), uuid.uuid4().hex
    granted = await ledger.grant(storage, name, usd("40"), f"grant:{name}:start")
    await ledger.hold(storage, name, f"{name}-h", usd("7.5"), f"hold:{name}")
    before = (await tables.balances(storage, tables.NODUS)).get(ledger.CLOSED, usd("0"))
    closed = await ledger.close(storage, name, uid)
    assert not closed.replayed and closed.amount == usd("40")
    assert await ledger.credits(storage, name) == {"available": usd("0"), "held": usd("0"), "balance": usd("0")}
    hold = await tables.hold(storage, f"{name}-h")
    assert hold is not None and hold.settled and hold.released == usd("7.5")
    assert (await tables.balances(storage, tables.NODUS))[ledger.CLOSED] == before + usd("40")
    again = await ledger.close(storage, name, uid)
    assert again.replayed and again.transaction_id == closed.transaction_id
    # The earlier project's grant key is spent: found as a replay, and known to be the earlier project's.
    replayed = await ledger.grant(storage, name, usd("40"), f"grant:{name}:start")
    assert replayed.transaction_id == granted.transaction_id
    assert await ledger.granted_to_an_earlier_project(storage, name, replayed)
    fresh = await ledger.grant(storage, name, usd("5"), f"grant:{name}:new")
    assert not await ledger.granted_to_an_earlier_project(storage, name, fresh)
    assert (await ledger.credits(storage, name))["available"] == usd("5")
    assert await tables.breaches(storage) == []


async def test_closing_a_project_without_credit_still_marks_its_end(storage: Storage) -> None:
    name = project()
    closed = await ledger.close(storage, name, uuid.uuid4().hex)
    assert not closed.replayed and closed.amount == 0
    assert await tables.closed_after(storage, name, closed.transaction_id - 1)
    assert await tables.breaches(storage) == []
