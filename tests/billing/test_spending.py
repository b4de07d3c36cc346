"""A project's spend per UTC day against the real PostgreSQL ledger: what counts, which day it falls on, the
month so far, and the window (ADR 0054)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from nodus.billing import ledger, money, spending
from nodus.storage.ledger import Charge
from nodus.storage.objects import Storage

NOW = datetime(2026, 12, 3, 10, 30, tzinfo=UTC)


@pytest.fixture
async def storage(database_url: str) -> AsyncIterator[Storage]:
    store = Storage(database_url, pool_size=8, compaction_interval=3600)
    await store.start()
    yield store
    await store.stop()


def running(amount: str) -> Charge:
    return Charge("Running", Decimal(60), Decimal("1"), Decimal(amount))


async def charged_at(storage: Storage, key: str, when: datetime) -> None:
    """Move the charge posted under ``key`` to ``when`` (the ledger stamps the database's now())."""
    async with storage._connection() as conn:
        moved = await conn.execute(
            "UPDATE charges SET created_at = $2 WHERE transaction_id = "
            "(SELECT id FROM ledger_transactions WHERE key = $1)",
            key,
            when,
        )
    assert moved == "UPDATE 1"


async def funded(storage: Storage) -> str:
    name = f"p-{uuid.uuid4().hex[:10]}"
    await ledger.grant(storage, name, money.parse("100"), f"grant:{name}")
    await ledger.hold(storage, name, f"{name}-h", money.parse("50"), f"hold:{name}")
    return name


async def test_spend_counts_what_the_project_paid_on_the_day_it_paid(storage: Storage) -> None:
    name = await funded(storage)
    hold = f"{name}-h"
    await ledger.capture(storage, name, hold, running("1.25"), f"{name}:a")
    await charged_at(storage, f"{name}:a", datetime(2026, 12, 3, 0, 0, tzinfo=UTC))  # today's first instant
    await ledger.capture(storage, name, hold, running("2"), f"{name}:b")
    await charged_at(storage, f"{name}:b", datetime(2026, 12, 2, 23, 59, 59, tzinfo=UTC))  # yesterday's last
    await ledger.refund(storage, name, hold, running("0.5"), f"{name}:c")  # given back: negative
    await charged_at(storage, f"{name}:c", datetime(2026, 12, 3, 9, 0, tzinfo=UTC))
    await ledger.cover(storage, name, hold, Charge("Boot", Decimal(60), Decimal(1), Decimal("7"), True), f"{name}:d")
    await charged_at(storage, f"{name}:d", datetime(2026, 12, 3, 9, 0, tzinfo=UTC))  # Nodus paid: not spend
    await ledger.charge(
        storage, name, name, Charge("Storage", Decimal(3600), Decimal("0.1"), Decimal("0.1")), f"{name}:s"
    )
    await charged_at(storage, f"{name}:s", datetime(2026, 11, 30, 12, 0, tzinfo=UTC))  # last month: not month to date
    spent = await spending.project_spend(storage, name, 5, NOW)
    assert spent.days == [
        (date(2026, 11, 29), Decimal(0)),
        (date(2026, 11, 30), Decimal("0.1")),
        (date(2026, 12, 1), Decimal(0)),
        (date(2026, 12, 2), Decimal("2")),
        (date(2026, 12, 3), Decimal("0.75")),
    ]
    assert spent.month_to_date == Decimal("2.75")


async def test_the_month_so_far_does_not_depend_on_the_window(storage: Storage) -> None:
    name = await funded(storage)
    await ledger.capture(storage, name, f"{name}-h", running("3"), f"{name}:early")
    await charged_at(storage, f"{name}:early", datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    one_day = await spending.project_spend(storage, name, 1, NOW)
    assert one_day.days == [(date(2026, 12, 3), Decimal(0))]
    assert one_day.month_to_date == Decimal("3")
    year = await spending.project_spend(storage, name, spending.MAX_DAYS, NOW)
    assert len(year.days) == spending.MAX_DAYS and year.days[-1][0] == date(2026, 12, 3)
    assert sum((amount for _, amount in year.days), Decimal(0)) == Decimal("3")


async def test_other_projects_charges_are_not_counted(storage: Storage) -> None:
    mine, theirs = await funded(storage), await funded(storage)
    await ledger.capture(storage, theirs, f"{theirs}-h", running("9"), f"{theirs}:x")
    await charged_at(storage, f"{theirs}:x", NOW)
    spent = await spending.project_spend(storage, mine, 2, NOW)
    assert spent.days == [(date(2026, 12, 2), Decimal(0)), (date(2026, 12, 3), Decimal(0))]
    assert spent.month_to_date == 0


@pytest.mark.parametrize("days", [0, -1, spending.MAX_DAYS + 1])
async def test_a_window_outside_a_day_and_a_leap_year_is_refused(storage: Storage, days: int) -> None:
    with pytest.raises(ValueError, match="days must be from 1 to 366"):
        await spending.project_spend(storage, "any", days, NOW)
