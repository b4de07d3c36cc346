"""Attempt logs in PostgreSQL: order, filters, paging, bounds, and concurrent appends."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from nodus.storage import database
from nodus.storage.logs import MAX_LINE_BYTES, AttemptLogs, LogEntry, LogLine, bounded
from nodus.storage.objects import Storage
from nodus.storage.schema import metadata

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def entries(
    count: int, start: int = 0, stream: str = "stdout", step: timedelta = timedelta(seconds=1)
) -> list[LogEntry]:
    return [LogEntry(stream, T0 + step * (start + i), f"line {start + i}") for i in range(count)]


def texts(lines: list[LogLine]) -> list[str]:
    return [line.line for line in lines]


@pytest.fixture
def logs(storage: Storage) -> AttemptLogs:
    return AttemptLogs(storage)


@pytest.fixture
def uid() -> str:
    return str(uuid.uuid4())


async def test_lines_come_back_in_append_order_with_their_stream_and_time(logs: AttemptLogs, uid: str) -> None:
    first = [LogEntry("stdout", T0, "hello"), LogEntry("stderr", T0 + timedelta(microseconds=7), "warn")]
    assert await logs.append(uid, "ns", "a-0-1", first) == 2
    assert await logs.append(uid, "ns", "a-0-1", [LogEntry("stdout", T0, "again")]) == 3
    lines = await logs.read(uid)
    assert [(line.seq, line.stream, line.time, line.line) for line in lines] == [
        (1, "stdout", T0, "hello"),
        (2, "stderr", T0 + timedelta(microseconds=7), "warn"),
        (3, "stdout", T0, "again"),
    ]
    assert await logs.last_seq(uid) == 3


async def test_attempts_do_not_see_each_others_lines(logs: AttemptLogs, uid: str) -> None:
    other = str(uuid.uuid4())
    await logs.append(uid, "ns", "a", entries(2))
    await logs.append(other, "ns", "b", entries(1, start=10))
    assert texts(await logs.read(uid)) == ["line 0", "line 1"]
    assert texts(await logs.read(other)) == ["line 10"]
    assert await logs.read(str(uuid.uuid4())) == []
    assert await logs.last_seq(str(uuid.uuid4())) == 0


async def test_appending_nothing_stores_nothing(logs: AttemptLogs, uid: str) -> None:
    assert await logs.append(uid, "ns", "a", []) == 0
    assert await logs.read(uid) == []


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param({}, [f"line {i}" for i in range(10)], id="all"),
        pytest.param({"tail_lines": 3}, ["line 7", "line 8", "line 9"], id="tail-3"),
        pytest.param({"tail_lines": 0}, [], id="tail-0"),
        pytest.param({"tail_lines": 50}, [f"line {i}" for i in range(10)], id="tail-more-than-stored"),
        pytest.param({"since_time": T0 + timedelta(seconds=8)}, ["line 8", "line 9"], id="since-inclusive"),
        pytest.param({"after_seq": 8}, ["line 8", "line 9"], id="after-seq"),
        pytest.param({"limit": 2}, ["line 0", "line 1"], id="limit"),
        pytest.param({"tail_lines": 4, "limit": 2}, ["line 6", "line 7"], id="tail-then-limit"),
        pytest.param({"since_time": T0 + timedelta(seconds=5), "tail_lines": 2}, ["line 8", "line 9"], id="since-tail"),
    ],
)
async def test_read_filters(logs: AttemptLogs, uid: str, options: dict[str, object], expected: list[str]) -> None:
    await logs.append(uid, "ns", "a", entries(10))
    assert texts(await logs.read(uid, **options)) == expected  # type: ignore[arg-type]


async def test_stream_filter_applies_before_tail(logs: AttemptLogs, uid: str) -> None:
    mixed = [LogEntry("stdout" if i % 2 == 0 else "stderr", T0, f"{i}") for i in range(10)]
    await logs.append(uid, "ns", "a", mixed)
    assert texts(await logs.read(uid, stream="stderr")) == ["1", "3", "5", "7", "9"]
    assert texts(await logs.read(uid, stream="stdout", tail_lines=2)) == ["6", "8"]


async def test_paging_with_after_seq_reads_every_line_once(logs: AttemptLogs, uid: str) -> None:
    await logs.append(uid, "ns", "a", entries(25))
    seen: list[str] = []
    position = 0
    while True:
        page = await logs.read(uid, after_seq=position, limit=10)
        if not page:
            break
        seen += texts(page)
        position = page[-1].seq
    assert seen == [f"line {i}" for i in range(25)]


async def test_oldest_lines_are_dropped_beyond_the_cap(storage: Storage, uid: str) -> None:
    capped = AttemptLogs(storage, max_lines=5)
    await capped.append(uid, "ns", "a", entries(4))
    await capped.append(uid, "ns", "a", entries(3, start=4))
    lines = await capped.read(uid)
    assert texts(lines) == ["line 2", "line 3", "line 4", "line 5", "line 6"]
    assert [line.seq for line in lines] == [3, 4, 5, 6, 7], "seq keeps counting after old lines are dropped"
    await capped.append(uid, "ns", "a", entries(1, start=7))
    assert texts(await capped.read(uid, tail_lines=2)) == ["line 6", "line 7"]


async def test_long_lines_are_cut_with_a_marker_naming_their_size(logs: AttemptLogs, uid: str) -> None:
    long = "é" * MAX_LINE_BYTES  # two bytes each: twice the limit
    await logs.append(uid, "ns", "a", [LogEntry("stdout", T0, long), LogEntry("stdout", T0, "short")])
    stored = texts(await logs.read(uid))
    assert len(stored[0].encode()) <= MAX_LINE_BYTES
    assert stored[0].startswith("éé")
    assert stored[0].endswith(f" [line truncated: {2 * MAX_LINE_BYTES} bytes]")
    assert stored[1] == "short"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        pytest.param("plain", "plain", id="unchanged"),
        pytest.param("a\x00b", "a\ufffdb", id="nul"),
        pytest.param("a\ud800b", "a?b", id="lone-surrogate"),
        pytest.param("x" * 40, "x" * 40, id="at-the-limit"),
        pytest.param("x" * 41, "xxxxxxxxxxxxx [line truncated: 41 bytes]", id="cut"),
        pytest.param("é" * 21, "éééééé [line truncated: 42 bytes]", id="cut-at-character-boundary"),
    ],
)
def test_bounded(line: str, expected: str) -> None:
    assert bounded(line, max_bytes=40) == expected


async def test_text_postgres_cannot_hold_is_stored_anyway(logs: AttemptLogs, uid: str) -> None:
    await logs.append(uid, "ns", "a", [LogEntry("stdout", T0, "nul\x00here")])
    assert texts(await logs.read(uid)) == ["nul\ufffdhere"]


async def test_concurrent_appends_to_one_attempt_number_lines_without_gaps(logs: AttemptLogs, uid: str) -> None:
    batches = [entries(20, start=100 * b) for b in range(12)]
    await asyncio.gather(*(logs.append(uid, "ns", "a", batch) for batch in batches))
    lines = await logs.read(uid, limit=10_000)
    assert [line.seq for line in lines] == list(range(1, 241))
    # Each batch is stored contiguously, in its own order.
    for start in range(0, 240, 20):
        chunk = texts(lines[start : start + 20])
        first = int(chunk[0].split()[1])
        assert chunk == [f"line {first + i}" for i in range(20)]


async def test_the_migration_creates_the_table_schema_py_declares(database_url: str) -> None:
    engine = create_async_engine(database.sqlalchemy_url(database_url))
    try:
        async with engine.connect() as connection:
            diff = await connection.run_sync(lambda sync: compare_metadata(MigrationContext.configure(sync), metadata))
    finally:
        await engine.dispose()
    mine = [d for d in diff if "attempt_logs" in repr(d)]
    assert mine == []
