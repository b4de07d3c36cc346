"""Consistent lists: one snapshot across every page, streamed without holding the whole result.

The first page reads the live table and the resourceVersion counter in one REPEATABLE READ
transaction, so the list's resourceVersion is exactly the state it shows. A later page (a continue
token) or a list at an exact older resourceVersion rebuilds the state at that version from the live
table and the watch log: an object changed after it is shown as it was before its first later
change (``prev_body`` of that event); an object added after it is not shown. That needs every event
after the version, so a version older than the log's retention window is refused with Expired.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from nodus.apimachinery.selectors import FieldSelector, LabelSelector
from nodus.storage.errors import Expired, TooLarge
from nodus.storage.selecting import Params, field_predicate, label_predicate

STREAM_BATCH = 128


@dataclass(frozen=True)
class ListQuery:
    """What to list. ``namespaces``/``names`` restrict the result to what the caller may read."""

    kind: str
    namespace: str | None = None
    namespaces: tuple[str, ...] | None = None
    names: tuple[str, ...] | None = None
    labels: LabelSelector = field(default_factory=LabelSelector)
    fields: FieldSelector = field(default_factory=FieldSelector)
    limit: int | None = None
    after: tuple[str, str] | None = None
    at_rv: int | None = None


Row = tuple[str, str, bytes]  # namespace, name, body (the stored JSON, as UTF-8 bytes ready to send)


class ListCursor:
    """An open list: ``resource_version`` first, then the rows in batches, then the continuation.

    ``continue_after`` and ``remaining`` are known once the rows have been consumed.
    """

    def __init__(self, conn: asyncpg.Connection, query: ListQuery, close: Callable[[], Any]) -> None:
        self._conn = conn
        self._query = query
        self._close = close
        self.resource_version = 0
        self.continue_after: tuple[str, str] | None = None
        self.remaining: int | None = None

    async def open(self) -> None:
        conn, query = self._conn, self._query
        counters = dict(await conn.fetch("SELECT key, value FROM counters"))
        current, compacted = counters["rv"], counters["compacted_rv"]
        if query.at_rv is None:
            self.resource_version = current
            return
        if query.at_rv < compacted:
            raise Expired(query.at_rv, compacted)
        if query.at_rv > current:
            raise TooLarge(query.at_rv, current)
        self.resource_version = query.at_rv

    def _source(self, params: Params) -> str:
        """A relation (namespace, name, body, labels, phase) holding the state at the list's version."""
        query = self._query
        kind = params.add(query.kind)
        scope = scope_o = ""
        if query.namespace is not None:
            namespace = params.add(query.namespace)
            scope, scope_o = f" AND namespace = {namespace}", f" AND o.namespace = {namespace}"
        if query.at_rv is None:
            return f"(SELECT namespace, name, body, labels, phase FROM objects WHERE kind = {kind}{scope}) AS s"
        at = params.add(query.at_rv)
        return f"""(
            WITH later AS (
                SELECT DISTINCT ON (namespace, name) namespace, name, type, prev_body, prev_labels, prev_phase
                FROM events WHERE kind = {kind} AND rv > {at}{scope}
                ORDER BY namespace, name, rv
            )
            SELECT o.namespace, o.name, o.body, o.labels, o.phase FROM objects o
            WHERE o.kind = {kind}{scope_o}
              AND NOT EXISTS (SELECT 1 FROM later l WHERE l.namespace = o.namespace AND l.name = o.name)
            UNION ALL
            SELECT namespace, name, prev_body, prev_labels, prev_phase FROM later WHERE type <> 'ADDED'
        ) AS s"""

    def _where(self, params: Params, after: tuple[str, str] | None) -> str:
        query = self._query
        clauses = label_predicate(query.labels, params) + field_predicate(query.fields, params)
        if query.namespaces is not None:
            clauses.append(f"namespace = ANY({params.add(list(query.namespaces))}::text[])")
        if query.names is not None:
            clauses.append(f"name = ANY({params.add(list(query.names))}::text[])")
        if after is not None:
            clauses.append(f"(namespace, name) > ({params.add(after[0])}, {params.add(after[1])})")
        return " AND ".join(clauses) if clauses else "true"

    def _statement(self, after: tuple[str, str] | None, limit: int | None) -> tuple[str, list[Any]]:
        params = Params()
        source = self._source(params)
        where = self._where(params, after)
        # Bodies leave the database as bytes (bytea), so a streamed list joins them without re-encoding.
        sql = f"SELECT namespace, name, convert_to(body, 'UTF8') FROM {source} WHERE {where} ORDER BY namespace, name"
        if limit is not None:
            sql += f" LIMIT {params.add(limit)}"
        return sql, params.values

    async def batches(self) -> AsyncIterator[list[Row]]:
        conn, query = self._conn, self._query
        if query.limit is not None:
            sql, args = self._statement(query.after, query.limit + 1)
            records = await conn.fetch(sql, *args)
            rows: list[Row] = [(r[0], r[1], r[2]) for r in records[: query.limit]]
            if len(records) > query.limit and rows:
                self.continue_after = (rows[-1][0], rows[-1][1])
                params = Params()
                source = self._source(params)
                where = self._where(params, self.continue_after)
                self.remaining = await conn.fetchval(f"SELECT count(*) FROM {source} WHERE {where}", *params.values)
            if rows:
                yield rows
            return
        sql, args = self._statement(query.after, None)
        batch: list[Row] = []
        async for record in conn.cursor(sql, *args, prefetch=STREAM_BATCH):
            batch.append((record[0], record[1], record[2]))
            if len(batch) >= STREAM_BATCH:
                yield batch
                batch = []
        if batch:
            yield batch

    async def close(self) -> None:
        await self._close()
