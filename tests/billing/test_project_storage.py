"""A project's own storage charges against the real PostgreSQL (ADR 0034): each ended hour sampled once from
the blobs no Job bills, charged once, in order, never below zero, and the same amount however late."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from decimal import Decimal

import pytest

from nodus.billing import ledger, money
from nodus.billing import storage as charging
from nodus.storage import ledger as tables
from nodus.storage import storagehours
from nodus.storage.objects import Storage
from nodus.storage.storagehours import Hour

GIB = 2**30
PRICE = charging.Price(Decimal("7300"), 730)  # 10 USD per GiB-hour
HOUR = timedelta(hours=1)


@pytest.fixture
async def storage(database_url: str) -> AsyncIterator[Storage]:
    store = Storage(database_url, pool_size=4, compaction_interval=3600)
    await store.start()
    yield store
    await store.stop()


async def blob(
    storage: Storage, namespace: str, size: int, created: datetime, attributed: datetime | None = None
) -> str:
    """A blob row as ``blobs.put`` registers it, created at ``created``."""
    digest = f"sha256:{uuid.uuid4().hex}{uuid.uuid4().hex}"
    async with storage._connection() as conn:
        await conn.execute(
            "INSERT INTO blobs (namespace, digest, size, media_type, upload_id, created_at, referenced_at, "
            "attributed_until) VALUES ($1, $2, $3, 'application/octet-stream', $4, $5, $5, $6)",
            namespace,
            digest,
            size,
            uuid.uuid4(),
            created,
            attributed,
        )
        # As a registration moves it: other tests' `nodus billing verify` checks the counter against the rows.
        await conn.execute(
            "INSERT INTO blob_usage (namespace, bytes) VALUES ($1, $2) "
            "ON CONFLICT (namespace) DO UPDATE SET bytes = blob_usage.bytes + EXCLUDED.bytes",
            namespace,
            size,
        )
    return digest


def usd(text: str) -> Decimal:
    return money.parse(text)


@pytest.mark.parametrize(
    ("size", "amount"),
    [
        pytest.param(GIB, "10", id="a-gib"),
        pytest.param(2**20, "0.009766", id="a-mib-rounded-half-up"),
        pytest.param(53, "0", id="rounds-to-nothing"),
    ],
)
def test_an_hour_costs_its_bytes_at_the_rate(size: int, amount: str) -> None:
    assert PRICE.hour(size) == usd(amount)


async def test_each_ended_hour_is_sampled_once_from_the_bytes_no_job_bills(storage: Storage) -> None:
    namespace, uid = f"p-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    origin = await storagehours.now(storage) - 5 * HOUR
    clock = charging.Clock(origin, HOUR)
    await blob(storage, namespace, GIB, origin + HOUR / 2)  # kept from hour 0
    await blob(storage, namespace, GIB, origin + 2 * HOUR + HOUR / 2)  # from hour 2
    # A Job's output, billed to the Job past the end of hour 3: the project's from hour 4.
    await blob(storage, namespace, GIB, origin + HOUR / 2, attributed=origin + 4 * HOUR + HOUR / 60)
    await charging.sample(storage, namespace, uid, clock, PRICE, origin + 5 * HOUR + HOUR / 2)
    unpaid = await storagehours.unpaid(storage, uid)
    assert [(h.hour, h.bytes // GIB, h.amount) for h in unpaid] == [
        (0, 1, usd("10")),
        (1, 1, usd("10")),
        (2, 2, usd("20")),
        (3, 2, usd("20")),
        (4, 3, usd("30")),
    ]
    # A later pass samples nothing again: the amounts of sampled hours never change.
    await blob(storage, namespace, GIB, origin + HOUR / 2)
    await charging.sample(storage, namespace, uid, clock, PRICE, origin + 5 * HOUR + HOUR / 2)
    assert await storagehours.unpaid(storage, uid) == unpaid


async def test_sampled_hours_are_charged_in_order_until_credit_runs_short_then_once_it_allows(
    storage: Storage,
) -> None:
    namespace, uid = f"p-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    await storagehours.record(storage, namespace, uid, [Hour(n, GIB, usd("10")) for n in range(3)])
    await ledger.grant(storage, namespace, usd("25"), f"grant:{namespace}:1")
    charged, unpaid = await charging.charge_owed(storage, namespace, uid)
    assert charged == 2 and unpaid is not None
    assert (unpaid.hour.hour, unpaid.available) == (2, usd("5"))
    assert (await ledger.credits(storage, namespace))["available"] == usd("5")  # never below zero
    assert await storagehours.owed(storage, uid) == usd("10")
    assert (namespace, uid) in await storagehours.owing(storage)

    await ledger.grant(storage, namespace, usd("10"), f"grant:{namespace}:2")
    assert await charging.charge_owed(storage, namespace, uid) == (1, None)
    assert await charging.charge_owed(storage, namespace, uid) == (0, None)  # nothing twice
    assert await tables.numbered_charges(storage, uid, "Storage") == tables.NumberedCharges(3, usd("30"), 2)
    assert (namespace, uid) not in await storagehours.owing(storage)
    assert not [d for d in await storagehours.disagreements(storage, "storage") if d["project_uid"] == uid]


async def test_a_charge_posted_before_a_crash_is_replayed_not_charged_again(storage: Storage) -> None:
    namespace, uid = f"p-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    await storagehours.record(storage, namespace, uid, [Hour(0, GIB, usd("10"))])
    await ledger.grant(storage, namespace, usd("100"), f"grant:{namespace}")
    # The charge reached the ledger, then the collector died before marking the hour charged.
    charge = tables.Charge("Storage", Decimal(3600), usd("10"), usd("10"))
    await ledger.charge(storage, namespace, uid, charge, charging.hour_key(uid, 0), "hour 0")
    assert [d["hour"] for d in await storagehours.disagreements(storage, "storage") if d["project_uid"] == uid] == [0]
    assert await charging.charge_owed(storage, namespace, uid) == (1, None)
    assert (await ledger.credits(storage, namespace))["available"] == usd("90")
    assert not [d for d in await storagehours.disagreements(storage, "storage") if d["project_uid"] == uid]


async def test_hours_with_nothing_to_charge_are_forgotten_but_the_latest(storage: Storage) -> None:
    namespace, uid = f"p-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    hours = [Hour(0, 0, usd("0")), Hour(1, GIB, usd("10")), Hour(2, 0, usd("0")), Hour(3, 0, usd("0"))]
    await storagehours.record(storage, namespace, uid, hours)
    await storagehours.prune(storage, uid)
    async with storage._connection() as conn:
        kept = [
            r["hour"]
            for r in await conn.fetch(
                "SELECT hour FROM project_storage_hours WHERE project_uid = $1 ORDER BY hour", uid
            )
        ]
    assert kept == [1, 3]
    assert await storagehours.last_hour(storage, uid) == 3
