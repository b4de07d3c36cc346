"""Output sinks: load one output file into a table of the customer's PostgreSQL database.

:func:`load` reads a CSV, JSON Lines or Parquet file and ``COPY``s its rows into a table, all or nothing:

* **One transaction.** ``Append`` adds the rows; ``Replace`` first runs ``DELETE FROM`` (not
  ``TRUNCATE``, whose exclusive lock would block readers) in the same transaction, so readers see the
  old rows until the commit and the new ones after it. Any failure (a bad row, a value of the wrong
  type, a column the table lacks, a lost connection) rolls back: the table is exactly as it was, and a
  table this load created does not exist. The error is a :class:`SinkError` whose message names the
  file and the table and carries PostgreSQL's explanation, never the DSN or a password.
* **Streaming.** Rows are read a batch at a time in a worker thread, rendered as PostgreSQL CSV and
  sent with ``COPY ... FROM STDIN (FORMAT csv)`` as about :data:`CHUNK`-byte pieces. PostgreSQL parses
  every value with the column's own input function, so any column type whose text form the file holds
  works (``date``, ``uuid``, ``numeric``...), and a bad value is reported with its line and column.
  ``COPY`` line *n* is the file's *n*-th data row (CSV: not counting the header).

Formats, by extension (``.csv``, ``.jsonl``/``.ndjson``, ``.parquet``) or else by content (Parquet's
``PAR1`` magic, a first line starting with ``{``, otherwise CSV):

* CSV (UTF-8, comma, ``"`` quoting): the header row names the columns; an empty field is NULL.
* JSON Lines: one object per line (blank lines skipped); the columns are the union of the keys of the
  first :data:`INFER_ROWS` rows, in order of appearance. A later row with another key fails the load;
  a missing key is NULL.
* Parquet: read a row group at a time; the columns are the file's.

``table`` is ``name`` or ``schema.name``, taken literally (no case folding) and quoted. A missing table
is created with text columns for CSV, and for JSON Lines and Parquet with types inferred from the
values (JSON: from the first :data:`INFER_ROWS` rows): integers ``bigint`` (``numeric`` past 64 bits),
floats ``double precision`` (``numeric`` for Parquet decimals), booleans ``boolean``, strings and
all-null columns ``text``, objects and arrays ``jsonb``, and, for Parquet only, timestamps
``timestamp``/``timestamptz``, dates ``date``, binary ``bytea``. Mixed JSON types widen to
``double precision`` (integers and floats), ``jsonb`` (anything with an object or array) or ``text``.
An existing table must have every column of the file; its other columns get their defaults.

The database is reached only at a destination the policy allows, through ``nodus.agent.dsns``: the
DSN is read without touching the agent's host files, and connected to a checked address (ADR 0032).
"""

from __future__ import annotations

import asyncio
import csv
import datetime
import decimal
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import asyncpg

from nodus.agent import dsns
from nodus.apimachinery import destinations

Mode = Literal["Append", "Replace"]
CHUNK = 1 << 20
BATCH_ROWS = 4096
INFER_ROWS = 1000
_INT64 = range(-(2**63), 2**63)
_COPY_LINE = re.compile(r"\bline (\d+)\b")


class SinkError(Exception):
    """The load failed and the table is unchanged; the message is safe to show to the Job's owner."""


@dataclass
class Source:
    """A file's columns, the types to create them with, and a way to read its rows in batches."""

    columns: list[str]
    types: list[str]
    batches: Callable[[], Iterator[list[list[Any]]]]


async def load(dsn: str, table: str, path: Path, mode: Mode, *, policy: destinations.Policy) -> int:
    """Load the rows of ``path`` into ``table`` of the database at ``dsn``; return how many were loaded.

    See the module docstring for formats, table creation and the all-or-nothing guarantee. A database
    ``policy`` refuses, or a DSN ``dsns.parse`` refuses, is a SinkError that says why.
    """
    if mode not in ("Append", "Replace"):
        raise SinkError(f"mode must be Append or Replace, not {mode!r}")
    schema, name = split_table(table)
    qualified = quote_ident(name) if schema is None else f"{quote_ident(schema)}.{quote_ident(name)}"
    source = await asyncio.to_thread(open_source, path)
    try:
        connection = await dsns.connect(dsn, policy)
    except (dsns.DSNError, destinations.Refused) as exc:
        raise SinkError(f"the database for table {table} is refused: {exc}") from None
    except Exception as exc:
        raise SinkError(f"could not connect to the database for table {table}: {_scrub(exc, dsn)}") from None
    try:
        async with connection.transaction():
            existing = await _existing_columns(connection, qualified)
            if existing is None:
                spec = ", ".join(f"{quote_ident(c)} {t}" for c, t in zip(source.columns, source.types, strict=True))
                await connection.execute(f"CREATE TABLE {qualified} ({spec})")
                targets = dict(zip(source.columns, source.types, strict=True))
            else:
                missing = [column for column in source.columns if column not in existing]
                if missing:
                    raise SinkError(
                        f"table {table} has no column {', '.join(map(repr, missing))} of {path.name}"
                        f" (its columns: {', '.join(existing)})"
                    )
                targets = existing
            if mode == "Replace":
                await connection.execute(f"DELETE FROM {qualified}")
            renderers = [_renderer(targets[column]) for column in source.columns]
            status = await connection.copy_to_table(
                name,
                schema_name=schema,
                columns=source.columns,
                format="csv",
                source=_chunks(source, renderers),
            )
    except asyncpg.PostgresError as exc:
        raise SinkError(f"loading {path.name} into {table} failed: {_describe(exc)}") from None
    except (OSError, asyncpg.InterfaceError) as exc:
        raise SinkError(f"loading {path.name} into {table} failed: {_scrub(exc, dsn)}") from None
    finally:
        await connection.close()
    return int(str(status).rsplit(" ", 1)[-1])


def split_table(table: str) -> tuple[str | None, str]:
    """``"name"`` -> ``(None, "name")``, ``"schema.name"`` -> ``("schema", "name")``; SinkError otherwise."""
    parts = table.split(".")
    if len(parts) > 2 or any(not part or "\0" in part or len(part.encode()) > 63 for part in parts):
        raise SinkError(f"{table!r} is not a table name: use name or schema.name (at most 63 bytes each)")
    return (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier (``a"b`` -> ``"a""b"``)."""
    return '"' + name.replace('"', '""') + '"'


def open_source(path: Path) -> Source:
    """Detect the format of ``path`` and read what :func:`load` needs before the rows (blocking)."""
    try:
        kind = _detect(path)
        if kind == "parquet":
            return _parquet(path)
        return _jsonl(path) if kind == "jsonl" else _csv(path)
    except OSError as exc:
        raise SinkError(f"cannot read {path.name}: {exc.strerror or exc}") from None


def _detect(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".csv", ".parquet"):
        return suffix[1:]
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    with path.open("rb") as file:
        head = file.read(4096)
    if head.startswith(b"PAR1"):
        return "parquet"
    return "jsonl" if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{") else "csv"


def _csv(path: Path) -> Source:
    with path.open(newline="", encoding="utf-8-sig") as file:
        header = next(csv.reader(file), None)
    if not header:
        raise SinkError(f"{path.name} has no header row")
    _check_columns(path, header)

    def batches() -> Iterator[list[list[Any]]]:
        with path.open(newline="", encoding="utf-8-sig") as file:
            reader = csv.reader(file)
            next(reader)
            batch: list[list[Any]] = []
            for row in reader:
                if len(row) != len(header):
                    raise SinkError(
                        f"{path.name} line {reader.line_num}: {len(row)} fields, the header has {len(header)}"
                    )
                batch.append([value if value != "" else None for value in row])
                if len(batch) >= BATCH_ROWS:
                    yield batch
                    batch = []
            if batch:
                yield batch

    return Source(header, ["text"] * len(header), batches)


def _jsonl(path: Path) -> Source:
    kinds: dict[str, set[str]] = {}
    for _, row in zip(range(INFER_ROWS), _json_rows(path), strict=False):
        for key, value in row.items():
            kinds.setdefault(key, set()).add(_json_kind(value))
    if not kinds:
        raise SinkError(f"{path.name} has no rows")
    columns = list(kinds)
    _check_columns(path, columns)
    index = {column: i for i, column in enumerate(columns)}

    def batches() -> Iterator[list[list[Any]]]:
        batch: list[list[Any]] = []
        for number, row in enumerate(_json_rows(path), start=1):
            values: list[Any] = [None] * len(columns)
            for key, value in row.items():
                if key not in index:
                    raise SinkError(
                        f"{path.name} row {number}: key {key!r} is not a column"
                        f" (the columns are the keys of the first {INFER_ROWS} rows)"
                    )
                values[index[key]] = value
            batch.append(values)
            if len(batch) >= BATCH_ROWS:
                yield batch
                batch = []
        if batch:
            yield batch

    return Source(columns, [_widen(kinds[column] - {"null"}) for column in columns], batches)


def _json_rows(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8-sig") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise SinkError(f"{path.name} line {number}: not JSON ({exc})") from None
            if not isinstance(row, dict):
                raise SinkError(f"{path.name} line {number}: not a JSON object")
            yield row


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint" if value in _INT64 else "numeric"
    if isinstance(value, float):
        return "double precision"
    return "text" if isinstance(value, str) else "jsonb"


def _widen(kinds: set[str]) -> str:
    if not kinds:
        return "text"
    if len(kinds) == 1:
        return next(iter(kinds))
    if "jsonb" in kinds:
        return "jsonb"
    if kinds <= {"bigint", "numeric"}:
        return "numeric"
    if kinds <= {"bigint", "numeric", "double precision"}:
        return "double precision"
    return "text"


def _parquet(path: Path) -> Source:
    # Imported here: pyarrow takes a fifth of a second to load, and an agent restarting within its Node's
    # heartbeat grace should not pay for it before any Job has a Parquet output to load.
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    schema = pq.read_schema(path)
    columns = [str(name) for name in schema.names]
    _check_columns(path, columns)

    def batches() -> Iterator[list[list[Any]]]:
        parquet = pq.ParquetFile(path)
        for group in range(parquet.num_row_groups):
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=[group]):
                by_column = [batch.column(i).to_pylist() for i in range(len(columns))]
                yield [list(row) for row in zip(*by_column, strict=True)]

    return Source(columns, [_arrow_type(schema.field(i).type) for i in range(len(columns))], batches)


def _arrow_type(kind: Any) -> str:
    from pyarrow import types  # see _parquet

    if types.is_boolean(kind):
        return "boolean"
    if types.is_integer(kind):
        return "numeric" if types.is_uint64(kind) else "bigint"
    if types.is_floating(kind):
        return "double precision"
    if types.is_decimal(kind):
        return "numeric"
    if types.is_timestamp(kind):
        return "timestamptz" if kind.tz else "timestamp"
    if types.is_date(kind):
        return "date"
    if types.is_binary(kind) or types.is_large_binary(kind) or types.is_fixed_size_binary(kind):
        return "bytea"
    if types.is_nested(kind):
        return "jsonb"
    return "text"


def _check_columns(path: Path, columns: list[str]) -> None:
    for column in columns:
        if not column or "\0" in column or len(column.encode()) > 63:
            raise SinkError(f"{path.name}: {column!r} is not a usable column name (1 to 63 bytes)")
    if len(set(columns)) != len(columns):
        raise SinkError(f"{path.name}: column names repeat: {', '.join(columns)}")


async def _existing_columns(connection: Any, qualified: str) -> dict[str, str] | None:
    """The table's columns and their types, or None when there is no such table."""
    oid = await connection.fetchval("SELECT to_regclass($1)::oid", qualified)
    if oid is None:
        return None
    rows = await connection.fetch(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        oid,
    )
    return {str(row[0]): str(row[1]) for row in rows}


Renderer = Callable[[Any], str]


def _renderer(column_type: str) -> Renderer:
    """How a value becomes the text PostgreSQL parses for a column of ``column_type``."""
    if column_type in ("json", "jsonb"):
        return lambda value: json.dumps(value, ensure_ascii=False, default=str)
    return _text


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, decimal.Decimal)):
        return str(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return "\\x" + value.hex()
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _encoded(source: Source, renderers: list[Renderer]) -> Iterator[bytes]:
    """The rows as PostgreSQL CSV (every value quoted; NULL unquoted and empty), in ~CHUNK pieces."""
    pending: list[str] = []
    size = 0
    for batch in source.batches():
        for row in batch:
            line = ",".join(
                "" if value is None else '"' + render(value).replace('"', '""') + '"'
                for render, value in zip(renderers, row, strict=True)
            )
            pending.append(line)
            size += len(line) + 1
            if size >= CHUNK:
                yield ("\n".join(pending) + "\n").encode()
                pending, size = [], 0
    if pending:
        yield ("\n".join(pending) + "\n").encode()


async def _chunks(source: Source, renderers: list[Renderer]) -> AsyncIterator[bytes]:
    pieces = _encoded(source, renderers)
    done = b""
    while chunk := await asyncio.to_thread(next, pieces, done):
        yield chunk


def _describe(exc: asyncpg.PostgresError) -> str:
    message = str(getattr(exc, "message", None) or exc)
    for extra in (getattr(exc, "detail", None), getattr(exc, "context", None)):
        if extra:
            message += f" ({_COPY_LINE.sub(lambda m: f'data row {m.group(1)}', str(extra))})"
    return message


def _scrub(exc: BaseException, dsn: str) -> str:
    message = f"{type(exc).__name__}: {exc}"
    for secret in {dsn, *re.findall(r"(?<=:)[^:@/]+(?=@)", dsn), *re.findall(r"password=([^&\s]+)", dsn)}:
        if secret:
            message = message.replace(secret, "***")
    return message
