"""Output sinks against a real PostgreSQL: appends, replaces, inferred tables, and all-or-nothing loads."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from nodus.agent import sinks
from nodus.storage import database


@pytest.fixture(scope="module")
async def dsn(database_server: str) -> AsyncIterator[str]:
    """A throwaway database on the tests' PostgreSQL server (a customer's database), dropped afterwards."""
    url = await database.create_database(database_server)
    yield database.asyncpg_dsn(url)
    await database.drop_database(url)


async def rows(dsn: str, query: str) -> list[tuple[object, ...]]:
    connection = await asyncpg.connect(dsn)
    try:
        return [tuple(record) for record in await connection.fetch(query)]
    finally:
        await connection.close()


def table_name() -> str:
    return f"t_{uuid.uuid4().hex[:8]}"


async def test_csv_append_twice_doubles_the_rows(dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "scores.csv"
    path.write_text('name,score,note\nada,10,"hello, ""world"""\nbob,,\n')
    table = table_name()
    assert await sinks.load(dsn, table, path, "Append") == 2
    assert await sinks.load(dsn, table, path, "Append") == 2
    assert await rows(dsn, f"SELECT name, score, note FROM {table} ORDER BY name") == [
        ("ada", "10", 'hello, "world"'),
        ("ada", "10", 'hello, "world"'),
        ("bob", None, None),
        ("bob", None, None),
    ]


async def test_jsonl_replace_swaps_the_rows(dsn: str, tmp_path: Path) -> None:
    table = table_name()
    first = tmp_path / "first.jsonl"
    first.write_text("\n".join(json.dumps({"id": i, "ok": True}) for i in range(5)) + "\n")
    second = tmp_path / "second.ndjson"
    second.write_text('{"id": 10, "ok": false}\n\n{"id": 11}\n')
    assert await sinks.load(dsn, table, first, "Append") == 5
    assert await sinks.load(dsn, table, second, "Replace") == 2
    assert await rows(dsn, f"SELECT id, ok FROM {table} ORDER BY id") == [(10, False), (11, None)]


async def test_jsonl_column_types_are_inferred(dsn: str, tmp_path: Path) -> None:
    table = table_name()
    path = tmp_path / "rows.jsonl"
    lines = [
        {"id": 7, "ok": False, "loss": 0.5, "tags": ["a"], "name": "x", "mixed": 1},
        {"id": 8, "loss": 1, "tags": {"k": 1}, "mixed": "one"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert await sinks.load(dsn, table, path, "Replace") == 2
    assert await rows(dsn, f"SELECT id, ok, loss, tags, name, mixed FROM {table} ORDER BY id") == [
        (7, False, 0.5, '["a"]', "x", "1"),
        (8, None, 1.0, '{"k": 1}', None, "one"),
    ]
    types = await rows(
        dsn,
        f"SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
        f" WHERE attrelid = '{table}'::regclass AND attnum > 0 ORDER BY attnum",
    )
    assert [kind for (kind,) in types] == ["bigint", "boolean", "double precision", "jsonb", "text", "text"]


async def test_parquet_loads_by_row_groups_into_a_schema(dsn: str, tmp_path: Path) -> None:
    connection = await asyncpg.connect(dsn)
    await connection.execute('CREATE SCHEMA IF NOT EXISTS "Results"')
    await connection.close()
    data = pa.table(
        {
            "step": pa.array(range(10_000), pa.int64()),
            "loss": pa.array([i / 7 for i in range(10_000)], pa.float64()),
            "label": pa.array([f"l{i}" for i in range(10_000)]),
            "meta": pa.array([{"i": i} for i in range(10_000)]),
        }
    )
    path = tmp_path / "metrics.parquet"
    pq.write_table(data, path, row_group_size=3000)
    assert await sinks.load(dsn, "Results.Metrics", path, "Append") == 10_000
    assert await rows(dsn, 'SELECT count(*), sum(step), max(label) FROM "Results"."Metrics"') == [
        (10_000, sum(range(10_000)), "l9999")
    ]
    assert await rows(dsn, """SELECT meta->>'i' FROM "Results"."Metrics" WHERE step = 42""") == [("42",)]


async def test_a_bad_value_leaves_the_table_unchanged(dsn: str, tmp_path: Path) -> None:
    table = table_name()
    connection = await asyncpg.connect(dsn)
    await connection.execute(f"CREATE TABLE {table} (id integer, name text)")
    await connection.execute(f"INSERT INTO {table} VALUES (1, 'kept')")
    await connection.close()
    path = tmp_path / "bad.csv"
    path.write_text("id,name\n2,fine\nthree,bad\n")
    for mode in ("Append", "Replace"):
        with pytest.raises(sinks.SinkError) as caught:
            await sinks.load(dsn, table, path, mode)  # type: ignore[arg-type]
        assert 'invalid input syntax for type integer: "three"' in str(caught.value)
        assert "data row 2" in str(caught.value)
        assert await rows(dsn, f"SELECT id, name FROM {table}") == [(1, "kept")]


async def test_a_missing_column_fails_clearly_and_changes_nothing(dsn: str, tmp_path: Path) -> None:
    table = table_name()
    path = tmp_path / "a.csv"
    path.write_text("id\n1\n")
    await sinks.load(dsn, table, path, "Append")
    other = tmp_path / "b.csv"
    other.write_text("id,extra\n2,x\n")
    with pytest.raises(sinks.SinkError, match="has no column 'extra'"):
        await sinks.load(dsn, table, other, "Replace")
    assert await rows(dsn, f"SELECT id FROM {table}") == [("1",)]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        pytest.param("ragged.csv", "a,b\n1,2\n3\n", "line 3: 1 fields, the header has 2", id="ragged-csv"),
        pytest.param("bad.jsonl", '{"a": 1}\nnot json\n', "line 2: not JSON", id="bad-json"),
        pytest.param("late.jsonl", '{"a": 1}\n' * 1000 + '{"b": 2}\n', "row 1001: key 'b'", id="late-key"),
    ],
)
async def test_a_bad_file_creates_no_table(dsn: str, tmp_path: Path, name: str, content: str, message: str) -> None:
    table = table_name()
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(sinks.SinkError, match=message):
        await sinks.load(dsn, table, path, "Append")
    assert await rows(dsn, f"SELECT to_regclass('{table}')") == [(None,)]


async def test_errors_never_show_the_password(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("id\n1\n")
    with pytest.raises(sinks.SinkError) as caught:
        await sinks.load("postgresql://postgres:hunter2@127.0.0.1:1/none", "t", path, "Append")
    assert "hunter2" not in str(caught.value)


def test_format_is_detected_by_content(tmp_path: Path) -> None:
    path = tmp_path / "output"
    path.write_text('{"a": 1, "b": "x"}\n')
    source = sinks.open_source(path)
    assert (source.columns, source.types) == (["a", "b"], ["bigint", "text"])
