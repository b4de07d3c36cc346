"""Output sinks against a real PostgreSQL: appends, replaces, inferred tables, and all-or-nothing loads.

The customer's database is the tests' PostgreSQL server reached through a forwarder on 127.0.0.1
(``tests.support.forwarding``), with the policy of an agent started with ``--allow-loopback-endpoints``
whose control plane's database is the server's own address: the destination tests play DSNs that aim
at the control plane (ADR 0032).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from nodus.agent import sinks
from nodus.apimachinery import destinations
from nodus.storage import database
from tests.support.forwarding import Forwarder

# An agent started with --allow-loopback-endpoints; the control plane's database is forbidden to it.
LOCAL = destinations.Policy(allow_loopback=True)


@pytest.fixture(scope="module")
def forwarder(database_server: str) -> Iterator[Forwarder]:
    with Forwarder(database_server) as relay:
        yield relay


@pytest.fixture(scope="module")
async def dsn(database_server: str, forwarder: Forwarder) -> AsyncIterator[str]:
    """A throwaway database on the tests' PostgreSQL server, at an address of its own (a customer's database)."""
    url = await database.create_database(database_server)
    yield forwarder.url(url)
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
    assert await sinks.load(dsn, table, path, "Append", policy=LOCAL) == 2
    assert await sinks.load(dsn, table, path, "Append", policy=LOCAL) == 2
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
    assert await sinks.load(dsn, table, first, "Append", policy=LOCAL) == 5
    assert await sinks.load(dsn, table, second, "Replace", policy=LOCAL) == 2
    assert await rows(dsn, f"SELECT id, ok FROM {table} ORDER BY id") == [(10, False), (11, None)]


async def test_jsonl_column_types_are_inferred(dsn: str, tmp_path: Path) -> None:
    table = table_name()
    path = tmp_path / "rows.jsonl"
    lines = [
        {"id": 7, "ok": False, "loss": 0.5, "tags": ["a"], "name": "x", "mixed": 1},
        {"id": 8, "loss": 1, "tags": {"k": 1}, "mixed": "one"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    assert await sinks.load(dsn, table, path, "Replace", policy=LOCAL) == 2
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
    assert await sinks.load(dsn, "Results.Metrics", path, "Append", policy=LOCAL) == 10_000
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
            await sinks.load(dsn, table, path, mode, policy=LOCAL)  # type: ignore[arg-type]
        assert 'invalid input syntax for type integer: "three"' in str(caught.value)
        assert "data row 2" in str(caught.value)
        assert await rows(dsn, f"SELECT id, name FROM {table}") == [(1, "kept")]


async def test_a_missing_column_fails_clearly_and_changes_nothing(dsn: str, tmp_path: Path) -> None:
    table = table_name()
    path = tmp_path / "a.csv"
    path.write_text("id\n1\n")
    await sinks.load(dsn, table, path, "Append", policy=LOCAL)
    other = tmp_path / "b.csv"
    other.write_text("id,extra\n2,x\n")
    with pytest.raises(sinks.SinkError, match="has no column 'extra'"):
        await sinks.load(dsn, table, other, "Replace", policy=LOCAL)
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
        await sinks.load(dsn, table, path, "Append", policy=LOCAL)
    assert await rows(dsn, f"SELECT to_regclass('{table}')") == [(None,)]


async def test_errors_never_show_the_password(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("id\n1\n")
    with pytest.raises(sinks.SinkError) as caught:
        await sinks.load("postgresql://postgres:hunter2@127.0.0.1:1/none", "t", path, "Append", policy=LOCAL)
    assert "hunter2" not in str(caught.value)


# --- Destinations (ADR 0032): a DSN is the tenant's to write, so it may aim at the control plane.


def control_plane(database_server: str) -> destinations.Policy:
    """LOCAL, with the tests' server forbidden as the control plane's database (as nodus dev forbids its own)."""
    parts = urlsplit(database_server)
    if not parts.hostname:
        return LOCAL  # the embedded server: a unix socket, refused whatever the policy
    return LOCAL.forbid(destinations.Endpoint.parse(f"{parts.hostname}:{parts.port or 5432}"))


def aimed(database_server: str, dsn: str, how: str) -> str:
    """A DSN for the customer's database rewritten to aim at the server another way (``how``)."""
    server, customer = urlsplit(database_server), urlsplit(dsn)
    name, user = customer.path.lstrip("/"), customer.username or "postgres"
    host, port = server.hostname or "127.0.0.1", server.port or 5432
    return {
        "socket-keywords": f"host=/var/run/postgresql dbname={name} user={user}",
        "socket-uri-query": f"postgresql://{user}@/{name}?host=/var/run/postgresql",
        "socket-uri-encoded": f"postgresql://{user}@%2Fvar%2Frun%2Fpostgresql/{name}",
        "socket-abstract": f"host=@pg dbname={name} user={user}",
        "no-host": f"dbname={name} user={user}",
        "control-plane": f"postgresql://{user}@{host}:{port}/{name}",
        "control-plane-other-loopback": f"host=127.0.0.2 port={port} dbname={name} user={user}",
        "control-plane-localhost": f"host=localhost port={port} dbname={name} user={user}",
        "control-plane-decimal": f"postgresql://{user}@2130706433:{port}/{name}",
        "hostaddr": f"host=db.example.com hostaddr={host} port={port} dbname={name} user={user}",
        "several-hosts": f"postgresql://{user}@db.example.com,{host}:{port}/{name}",
        "service": f"service=nodus dbname={name}",
        "passfile": f"host=db.example.com passfile=/root/.pgpass dbname={name} user={user}",
        "sslkey": f"host=db.example.com sslcert=/etc/ssl/cert.pem sslkey=/etc/ssl/key.pem user={user}",
        "sslrootcert-file": f"host=db.example.com sslrootcert=/etc/nodus/ca.pem sslmode=verify-ca user={user}",
        "metadata-service": f"host=169.254.169.254 dbname={name} user={user}",
    }[how]


@pytest.mark.parametrize(
    ("how", "message"),
    [
        pytest.param("socket-keywords", "is a unix socket or path on the agent's host: refused", id="socket-keywords"),
        pytest.param("socket-uri-query", "is a unix socket", id="socket-uri-query"),
        pytest.param("socket-uri-encoded", "is a unix socket", id="socket-uri-encoded"),
        pytest.param("socket-abstract", "is a unix socket", id="socket-abstract"),
        pytest.param("no-host", "names no host", id="no-host"),
        pytest.param("control-plane", "the control plane's own endpoint", id="control-plane"),
        pytest.param("control-plane-other-loopback", "the control plane's own endpoint", id="other-loopback"),
        pytest.param("control-plane-localhost", "the control plane's own endpoint", id="localhost"),
        pytest.param("control-plane-decimal", "the control plane's own endpoint", id="decimal"),
        pytest.param("hostaddr", "hostaddr connects to an address other than the host named", id="hostaddr"),
        pytest.param("several-hosts", "names several hosts", id="several-hosts"),
        pytest.param("service", "service reads a service file of the agent's host", id="service"),
        pytest.param("passfile", "passfile reads a password file of the agent's host", id="passfile"),
        pytest.param("sslkey", "reads a client certificate file", id="sslkey"),
        pytest.param("sslrootcert-file", "sslrootcert names a file of the agent's host", id="sslrootcert-file"),
        pytest.param("metadata-service", "169.254.169.254 is link-local (the cloud metadata service)", id="metadata"),
    ],
)
async def test_a_dsn_aimed_at_the_host_or_control_plane_loads_nothing(
    database_server: str, dsn: str, tmp_path: Path, how: str, message: str
) -> None:
    if how.startswith("control-plane") and not urlsplit(database_server).hostname:
        pytest.skip("the embedded server listens on a unix socket only")
    path = tmp_path / "stolen.csv"
    path.write_text("id\n1\n")
    table = table_name()
    with pytest.raises(sinks.SinkError) as caught:
        await sinks.load(aimed(database_server, dsn, how), table, path, "Append", policy=control_plane(database_server))
    assert f"the database for table {table} is refused: " in str(caught.value)
    assert message in str(caught.value)
    assert await rows(dsn, f"SELECT to_regclass('{table}')") == [(None,)]


async def test_a_customer_database_on_loopback_is_refused_without_the_flag(dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("id\n1\n")
    table = table_name()
    with pytest.raises(sinks.SinkError, match=r"127\.0\.0\.1 is loopback \(this host\): refused"):
        await sinks.load(dsn, table, path, "Append", policy=destinations.Policy())
    assert await rows(dsn, f"SELECT to_regclass('{table}')") == [(None,)]


async def test_the_jobs_egress_allow_list_governs_the_sink(dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("id\n1\n")
    with pytest.raises(sinks.SinkError, match=r"127\.0\.0\.1 is not in the Job.s egress allow list"):
        await sinks.load(dsn, table_name(), path, "Append", policy=LOCAL.with_egress("AllowList", ["pypi.org"]))
    assert await sinks.load(dsn, table_name(), path, "Append", policy=LOCAL.with_egress("AllowList", ["127.0.0.1"]))


async def test_a_keyword_dsn_loads_like_a_uri(dsn: str, tmp_path: Path) -> None:
    parts = urlsplit(dsn)
    password = f" password='{parts.password}'" if parts.password else ""
    keywords = (
        f"host={parts.hostname} port={parts.port} dbname={parts.path.lstrip('/')} user={parts.username}{password}"
        " sslmode=prefer application_name='nodus sink'"
    )
    path = tmp_path / "a.csv"
    path.write_text("id\n1\n2\n")
    table = table_name()
    assert await sinks.load(keywords, table, path, "Append", policy=LOCAL) == 2
    assert await rows(dsn, f"SELECT id FROM {table} ORDER BY id") == [("1",), ("2",)]


def test_format_is_detected_by_content(tmp_path: Path) -> None:
    path = tmp_path / "output"
    path.write_text('{"a": 1, "b": "x"}\n')
    source = sinks.open_source(path)
    assert (source.columns, source.types) == (["a", "b"], ["bigint", "text"])
