"""Attempt logs: the stdout/stderr lines agents ship, kept per attempt in order, bounded.

Each line gets ``seq``, its position in its attempt's log (1, 2, 3, ...). An append takes a
per-attempt transaction lock before it numbers its lines, so appends to one attempt commit in seq
order: a reader that continues after the last seq it saw (``read(after_seq=...)``, as a follower
does) never skips a line that commits later with a lower seq.

Bounds, enforced here on every append so that no caller can exceed them:

* at most ``MAX_LINES`` (200,000) lines per attempt: an append that goes past it drops the oldest
  lines in the same statement (seq keeps counting; the first kept line no longer has seq 1);
* at most ``MAX_LINE_BYTES`` (16 KiB, UTF-8) per line: a longer line is cut at a character
  boundary and ends with ``TRUNCATED_MARKER`` naming its original size, within the same 16 KiB.

Each line names its container: '' for the main program, otherwise an init command or a sidecar
(``init``, ``sidecar-proxy``). Numbering is per attempt across containers, so one seq order
interleaves every program of the attempt as the agent read them.

PostgreSQL text cannot hold NUL characters or lone surrogates: they are stored as U+FFFD and ``?``.
Lines of a deleted attempt stay until a sweep removes them (their rows keep namespace and name);
the line cap bounds what one attempt can hold meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodus.storage.objects import Storage

MAX_LINES = 200_000
MAX_LINE_BYTES = 16 * 1024
TRUNCATED_MARKER = " [line truncated: {size} bytes]"
STREAMS = ("stdout", "stderr")

# The two-key advisory lock space (class, hash of the uid) never meets the one-key locks used for
# migrations, compaction and leadership.
_LOCK_CLASS = 7262023

_LOCK = "SELECT pg_advisory_xact_lock($1::int, hashtext($2))"

# One statement numbers and inserts every entry, then drops what the cap no longer admits.
_APPEND = """
WITH base AS (
    SELECT coalesce(max(seq), 0) AS last FROM attempt_logs WHERE attempt_uid = $1
), added AS (
    INSERT INTO attempt_logs (attempt_uid, seq, namespace, name, stream, time, line, container)
    SELECT $1, base.last + e.n, $2, $3, e.stream, e.time, e.line, e.container
    FROM base, unnest($4::text[], $5::timestamptz[], $6::text[], $8::text[])
        WITH ORDINALITY AS e(stream, time, line, container, n)
    RETURNING seq
), dropped AS (
    DELETE FROM attempt_logs WHERE attempt_uid = $1 AND seq <= (SELECT max(seq) FROM added) - $7
    RETURNING seq
)
SELECT (SELECT max(seq) FROM added) AS last, (SELECT count(*) FROM dropped) AS dropped
"""


@dataclass(frozen=True)
class LogEntry:
    """A line to append: its stream (``stdout`` or ``stderr``), when it was read (aware), its text,
    and its container ('' for the main program)."""

    stream: str
    time: datetime
    line: str
    container: str = ""


@dataclass(frozen=True)
class LogLine:
    """A stored line: its position in the attempt's log, stream, time (microseconds), text and
    container ('' for the main program)."""

    seq: int
    stream: str
    time: datetime
    line: str
    container: str = ""


def bounded(line: str, max_bytes: int = MAX_LINE_BYTES) -> str:
    """``line`` as it is stored: NUL and lone surrogates replaced, cut to ``max_bytes`` with a marker."""
    if "\x00" in line:
        line = line.replace("\x00", "\ufffd")
    try:
        encoded = line.encode()
    except UnicodeEncodeError:
        encoded = line.encode(errors="replace")
        line = encoded.decode()
    if len(encoded) <= max_bytes:
        return line
    marker = TRUNCATED_MARKER.format(size=len(encoded))
    keep = max(0, max_bytes - len(marker.encode()))
    return encoded[:keep].decode(errors="ignore") + marker


class AttemptLogs:
    """The log lines of attempts, in the database (and through the connection pool) of ``storage``."""

    def __init__(self, storage: Storage, max_lines: int = MAX_LINES, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        # The object store's pool: logs share its connections and its start/stop.
        self._connection: Callable[[], contextlib.AbstractAsyncContextManager[Any]] = storage._connection
        self.max_lines = max_lines
        self.max_line_bytes = max_line_bytes

    async def append(self, attempt_uid: str, namespace: str, name: str, entries: Sequence[LogEntry]) -> int:
        """Append ``entries`` in order, in one transaction; returns the seq of the attempt's last line
        (0 when there are none). Streams must be ``stdout`` or ``stderr`` (the table refuses others);
        lines are bounded as the module says. Never raises for a line's content."""
        if not entries:
            return await self.last_seq(attempt_uid)
        streams = [e.stream for e in entries]
        times = [e.time for e in entries]
        lines = [bounded(e.line, self.max_line_bytes) for e in entries]
        containers = [e.container for e in entries]
        async with self._connection() as conn, conn.transaction():
            await conn.execute(_LOCK, _LOCK_CLASS, attempt_uid)
            record = await conn.fetchrow(
                _APPEND, attempt_uid, namespace, name, streams, times, lines, self.max_lines, containers
            )
        last: int = record["last"]
        return last

    async def read(
        self,
        attempt_uid: str,
        *,
        after_seq: int = 0,
        since_time: datetime | None = None,
        tail_lines: int | None = None,
        stream: str | None = None,
        container: str | None = None,
        limit: int = 1000,
    ) -> list[LogLine]:
        """Lines after ``after_seq``, oldest first, at most ``limit`` of them.

        ``since_time`` keeps lines read at or after it; ``stream`` keeps one stream (None: both);
        ``container`` keeps one container ('' the main program; None: every container);
        ``tail_lines`` keeps only the newest that many of the lines that pass the other filters; when
        it exceeds ``limit`` the oldest ``limit`` of those come back, and the caller continues with
        ``after_seq`` set to the last seq it got (and no ``tail_lines``)."""
        args: list[Any] = [attempt_uid, after_seq]
        where = "attempt_uid = $1 AND seq > $2"
        if since_time is not None:
            args.append(since_time)
            where += f" AND time >= ${len(args)}"
        if stream is not None:
            args.append(stream)
            where += f" AND stream = ${len(args)}"
        if container is not None:
            args.append(container)
            where += f" AND container = ${len(args)}"
        columns = "seq, stream, time, line, container"
        args.append(limit)
        limit_arg = f"${len(args)}"
        if tail_lines is None:
            sql = f"SELECT {columns} FROM attempt_logs WHERE {where} ORDER BY seq LIMIT {limit_arg}"
        else:
            args.append(tail_lines)
            sql = (
                f"SELECT {columns} FROM (SELECT {columns} FROM attempt_logs WHERE {where} "
                f"ORDER BY seq DESC LIMIT ${len(args)}) AS tail ORDER BY seq LIMIT {limit_arg}"
            )
        async with self._connection() as conn:
            records = await conn.fetch(sql, *args)
        return [LogLine(r["seq"], r["stream"], r["time"], r["line"], r["container"]) for r in records]

    async def last_seq(self, attempt_uid: str) -> int:
        """The seq of the attempt's newest line; 0 when it has none."""
        async with self._connection() as conn:
            value: int = await conn.fetchval(
                "SELECT coalesce(max(seq), 0) FROM attempt_logs WHERE attempt_uid = $1", attempt_uid
            )
        return value
