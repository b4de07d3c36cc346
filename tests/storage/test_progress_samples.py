"""A Job's progress history in PostgreSQL: recorded with the write it belongs to, thinned, deleted with it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from nodus.storage import database
from nodus.storage.errors import Key, StorageError
from nodus.storage.objects import Storage
from nodus.storage.progresssamples import KEEP_NEWEST, MAX_SAMPLES, Sample, samples
from nodus.storage.schema import metadata
from tests.storage.conftest import job, unique_namespace


async def stored_job(storage: Storage) -> tuple[Key, dict[str, Any]]:
    body = job(unique_namespace(), "train", phase="Running")
    key = Key("Job", body["metadata"]["namespace"], "train")
    return key, await storage.create(key, body)


async def write(storage: Storage, key: Key, current: dict[str, Any], *companions: Sample) -> dict[str, Any]:
    """Update the Job (a new status each time, so the write is a real one) with ``companions``."""
    new = copy.deepcopy(current)
    new["status"]["writes"] = int(new["status"].get("writes", 0)) + 1
    return await storage.update(key, new, int(current["metadata"]["resourceVersion"]), companions)


def completed(kept: list[Sample]) -> list[int | None]:
    return [s.completed for s in kept]


async def test_samples_come_back_oldest_first_with_what_was_recorded(storage: Storage) -> None:
    key, current = await stored_job(storage)
    uid = current["metadata"]["uid"]
    current = await write(storage, key, current, Sample(1, 10, {"loss": "0.9"}, None))
    current = await write(storage, key, current, Sample(5, 10, {"loss": "0.5", "lr": "3e-4"}, "0.012"))
    current = await write(storage, key, current, Sample(None, None, {}, "0.02"))
    kept = await samples(storage, uid)
    assert [(s.completed, s.total, s.metrics, s.cost_usd) for s in kept] == [
        (1, 10, {"loss": "0.9"}, None),
        (5, 10, {"loss": "0.5", "lr": "3e-4"}, "0.012"),
        (None, None, {}, "0.02"),
    ]
    times = [s.time for s in kept]
    assert all(t is not None for t in times)
    assert times == sorted(times)  # type: ignore[type-var]


async def test_a_write_without_companions_records_nothing(storage: Storage) -> None:
    key, current = await stored_job(storage)
    current = await write(storage, key, current)
    assert await samples(storage, current["metadata"]["uid"]) == []


async def test_a_write_that_is_refused_records_no_sample(storage: Storage) -> None:
    key, current = await stored_job(storage)
    stale = copy.deepcopy(current)
    current = await write(storage, key, current, Sample(1, None))
    with pytest.raises(StorageError):  # Conflict: stale resourceVersion
        await write(storage, key, stale, Sample(2, None))
    assert completed(await samples(storage, current["metadata"]["uid"])) == [1]


async def test_a_sample_that_cannot_be_stored_fails_its_write(storage: Storage) -> None:
    key, current = await stored_job(storage)
    # jsonb cannot hold U+0000: the database refuses the sample, and the Job's write with it.
    broken = Sample(1, None, {"loss": "\u0000"})
    with pytest.raises(StorageError):
        await write(storage, key, current, broken)
    assert await storage.get(key) == current
    assert await samples(storage, current["metadata"]["uid"]) == []


async def test_a_create_may_carry_a_sample(storage: Storage) -> None:
    body = job(unique_namespace(), "born-with-progress", phase="Running")
    key = Key("Job", body["metadata"]["namespace"], "born-with-progress")
    await storage.create(key, body, (Sample(3, 4),))
    assert completed(await samples(storage, body["metadata"]["uid"])) == [3]


async def test_histories_are_per_job(storage: Storage) -> None:
    first_key, first = await stored_job(storage)
    second_key, second = await stored_job(storage)
    await write(storage, first_key, first, Sample(1, None))
    await write(storage, second_key, second, Sample(7, None))
    assert completed(await samples(storage, first["metadata"]["uid"])) == [1]
    assert completed(await samples(storage, second["metadata"]["uid"])) == [7]


async def test_the_history_goes_with_the_job(storage: Storage) -> None:
    key, current = await stored_job(storage)
    uid = current["metadata"]["uid"]
    for n in range(3):
        current = await write(storage, key, current, Sample(n, None))
    assert len(await samples(storage, uid)) == 3
    await storage.delete(key, current, int(current["metadata"]["resourceVersion"]))
    async with storage._connection() as conn:
        left = await conn.fetchval("SELECT count(*) FROM progress_samples WHERE job_uid = $1", uid)
    assert left == 0
    # The same name again is another Job, with a history of its own.
    body = job(key.namespace, key.name, phase="Running")
    await storage.create(key, body)
    assert await samples(storage, body["metadata"]["uid"]) == []


async def insert_directly(storage: Storage, uid: str, count: int) -> None:
    """``count`` samples numbered 0.. with resourceVersions below any write's, for a Job history near its cap
    without thousands of writes."""
    async with storage._connection() as conn:
        await conn.execute(
            "INSERT INTO progress_samples (job_uid, rv, time, completed) "
            "SELECT $1, -$2::int + n, now(), n FROM generate_series(0, $2::int - 1) AS n",
            uid,
            count,
        )


async def test_a_history_below_the_cap_is_kept_whole(storage: Storage) -> None:
    key, current = await stored_job(storage)
    uid = current["metadata"]["uid"]
    await insert_directly(storage, uid, MAX_SAMPLES - 2)
    await write(storage, key, current, Sample(MAX_SAMPLES - 2, None))
    kept = completed(await samples(storage, uid))
    assert kept == list(range(MAX_SAMPLES - 1))


async def test_reaching_the_cap_drops_every_other_sample_older_than_the_newest(storage: Storage) -> None:
    key, current = await stored_job(storage)
    uid = current["metadata"]["uid"]
    await insert_directly(storage, uid, MAX_SAMPLES - 1)
    current = await write(storage, key, current, Sample(MAX_SAMPLES - 1, None))  # the 2,000th
    kept = completed(await samples(storage, uid))
    older = MAX_SAMPLES - KEEP_NEWEST
    # The oldest is kept, then every other one up to the newest 200, which stay whole.
    assert kept == list(range(0, older, 2)) + list(range(older, MAX_SAMPLES))
    assert len(kept) == older // 2 + KEEP_NEWEST == 1_100
    # The next write records without thinning again.
    await write(storage, key, current, Sample(MAX_SAMPLES, None))
    again = completed(await samples(storage, uid))
    assert again == [*kept, MAX_SAMPLES]


async def test_a_long_history_never_passes_the_cap(storage: Storage) -> None:
    key, current = await stored_job(storage)
    uid = current["metadata"]["uid"]
    await insert_directly(storage, uid, MAX_SAMPLES - 3)
    sizes = []
    for n in range(5):
        current = await write(storage, key, current, Sample(MAX_SAMPLES + n, None))
        sizes.append(len(await samples(storage, uid)))
    assert sizes == [MAX_SAMPLES - 2, MAX_SAMPLES - 1, 1_100, 1_101, 1_102]
    kept = completed(await samples(storage, uid))
    assert kept[-5:] == [MAX_SAMPLES + n for n in range(5)]
    assert kept == sorted(kept)


async def test_the_migration_matches_the_schema(database_url: str) -> None:
    engine = create_async_engine(database.sqlalchemy_url(database_url))
    try:
        async with engine.connect() as connection:
            diff = await connection.run_sync(lambda sync: compare_metadata(MigrationContext.configure(sync), metadata))
    finally:
        await engine.dispose()
    assert [d for d in diff if "progress_samples" in repr(d)] == []
