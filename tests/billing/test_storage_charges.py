"""Post-paid charges (storage by the hour) against the real PostgreSQL: once per key, never below zero."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from nodus.billing import ledger, money
from nodus.storage import ledger as tables
from nodus.storage.ledger import Charge, KeyReused, Overdrawn
from nodus.storage.objects import Storage


@pytest.fixture
async def storage(database_url: str) -> AsyncIterator[Storage]:
    store = Storage(database_url, pool_size=4, compaction_interval=3600)
    await store.start()
    yield store
    await store.stop()


def usd(text: str) -> Decimal:
    return money.parse(text)


def hour(amount: str) -> Charge:
    return Charge("Storage", Decimal(3600), usd(amount), money.charge(usd(amount), Decimal(3600)))


async def test_each_hour_is_charged_once_from_available_credit(storage: Storage) -> None:
    project, job = f"p-{uuid.uuid4().hex[:10]}", str(uuid.uuid4())
    await ledger.grant(storage, project, usd("1"), f"grant:{project}")
    revenue = (await tables.balances(storage, "nodus")).get("revenue", Decimal(0))

    first = await ledger.charge(storage, project, job, hour("0.4"), f"storage:{job}:0", memo="hour 0")
    replay = await ledger.charge(storage, project, job, hour("0.4"), f"storage:{job}:0", memo="hour 0")
    assert replay.replayed and replay.transaction_id == first.transaction_id  # a retry or a crash: charged once
    with pytest.raises(KeyReused):
        await ledger.charge(storage, project, job, hour("0.5"), f"storage:{job}:0")
    await ledger.charge(storage, project, job, hour("0.4"), f"storage:{job}:1")

    assert await ledger.credits(storage, project) == {"available": usd("0.2"), "held": usd("0"), "balance": usd("0.2")}
    assert await tables.numbered_charges(storage, job, "Storage") == tables.NumberedCharges(2, usd("0.8"), 1)
    assert await tables.charged(storage, job) == {"Storage": usd("0.8")}
    assert (await tables.balances(storage, "nodus"))["revenue"] - revenue >= usd("0.8")


async def test_an_hour_the_project_cannot_pay_is_refused_and_charged_once_credit_allows(storage: Storage) -> None:
    project, job = f"p-{uuid.uuid4().hex[:10]}", str(uuid.uuid4())
    await ledger.grant(storage, project, usd("0.5"), f"grant:{project}")
    await ledger.charge(storage, project, job, hour("0.3"), f"storage:{job}:0")
    with pytest.raises(Overdrawn) as refused:
        await ledger.charge(storage, project, job, hour("0.3"), f"storage:{job}:1")
    assert refused.value.account == "available"
    assert (refused.value.balance, refused.value.change) == (usd("0.2"), -usd("0.3"))
    # Nothing was charged: the hour is still owed, and available credit never went below zero.
    assert (await ledger.credits(storage, project))["available"] == usd("0.2")
    assert await tables.numbered_charges(storage, job, "Storage") == tables.NumberedCharges(1, usd("0.3"), 0)

    await ledger.grant(storage, project, usd("1"), f"grant:{project}:top-up")
    await ledger.charge(storage, project, job, hour("0.3"), f"storage:{job}:1")
    assert (await ledger.credits(storage, project))["available"] == usd("0.9")
    assert await tables.numbered_charges(storage, job, "Storage") == tables.NumberedCharges(2, usd("0.6"), 1)

    now = datetime.now(UTC)
    lines = [
        line
        async for line in tables.statement(storage, project, now - timedelta(minutes=5), now + timedelta(minutes=5))
    ]
    storage_lines = [line for line in lines if line.segment == "Storage"]
    assert [(line.kind, line.key, line.amount, line.seconds) for line in storage_lines] == [
        ("Charge", f"storage:{job}:0", usd("0.3"), Decimal(3600)),
        ("Charge", f"storage:{job}:1", usd("0.3"), Decimal(3600)),
    ]
    assert all(line.subject == job for line in storage_lines)
    assert [b for b in await tables.breaches(storage) if project in b.detail] == []


async def test_a_charge_must_be_more_than_zero(storage: Storage) -> None:
    project, job = f"p-{uuid.uuid4().hex[:10]}", str(uuid.uuid4())
    await ledger.grant(storage, project, usd("1"), f"grant:{project}")
    with pytest.raises(money.InvalidAmount):
        await ledger.charge(storage, project, job, Charge("Storage", Decimal(3600), usd("0"), usd("0")), "k")
    assert await tables.numbered_charges(storage, job, "Storage") == tables.NumberedCharges(0, usd("0"), None)
