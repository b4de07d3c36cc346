"""Group commit: every write gets the next resourceVersion, and commit order equals that order.

A bare sequence cannot promise commit order (two transactions may commit out of order), and a
watcher that saw resourceVersion N must never later receive an event below N. So every write
transaction first locks the single ``counters['rv']`` row; writers from every API server process
are serialised on it and each batch's resourceVersions are higher than the last committed batch's.

Serialising commits would cap throughput at one fsync per write, so each process gathers the writes
that arrive while a batch is committing into the next batch: one lock, one transaction, one fsync,
one NOTIFY for many writes. A write that fails its precondition (exists, not found, stale
resourceVersion) is simply not applied and takes no resourceVersion; an unexpected database error
aborts the batch, whose writes are then retried one by one so that only the faulty one fails.

A batch commits in one round trip (ADR 0056): a single statement, ``SELECT ... FROM nodus_commit_batch(...)``
(migration 0013), sent outside any explicit transaction, so that the rv lock is held from that call to its
own commit and never across a round trip to this process. The function locks the counter row, takes each
write in batch order, gives the next resourceVersion to each write it applies (and none to a rejected one),
updates ``objects`` and appends the ``events`` row as separate statements did before, sets the counter to the
last resourceVersion taken and sends the NOTIFY (also when nothing was applied, as before). It returns, per
write, whether it was applied and else why (with the current resourceVersion for a conflict).

A body embeds its own resourceVersion, which only the function knows (it depends on which earlier writes of
the batch are rejected). So the body is encoded here with a fresh random sentinel as its resourceVersion, and
the text is cut around the sentinel's single occurrence: the function stores ``prefix || rv || suffix``, byte
for byte the text this process would have encoded with the real version. Nothing a tenant writes into a body
can move that cut: the sentinel is a uuid4 (122 random bits) drawn for this write, checked to occur exactly
once. A write that is not applied gets its body's resourceVersion back as the caller passed it.

A write may carry companions (:class:`Companion`): rows of other tables that belong to this write, such as
a Job's progress sample (ADR 0054). Each is written by this process right after its write is applied, in the
same transaction, and only if it was applied: they commit or fail together. That needs the transaction open
between statements, so a batch holding any write with companions commits as before, in an explicit
transaction with one statement per write (the whole batch, in order, not split around that write).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import asyncpg

from nodus.storage import rows
from nodus.storage.errors import AlreadyExists, Conflict, Key, NotFound, StorageError
from nodus.storage.schema import NOTIFY_CHANNEL

log = logging.getLogger(__name__)

_LOCK_RV = "SELECT value FROM counters WHERE key = 'rv' FOR UPDATE"

_CREATE = """
WITH ins AS (
    INSERT INTO objects (kind, namespace, name, uid, rv, labels, phase, owner_uids, deleting, body)
    VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8::text[], $9, $10)
    ON CONFLICT (kind, namespace, name) DO NOTHING
    RETURNING rv
)
INSERT INTO events (rv, kind, namespace, name, type, body, labels, phase)
SELECT $5, $1, $2, $3, 'ADDED', $10, $6::jsonb, $7 FROM ins
RETURNING rv
"""

_UPDATE = """
WITH old AS (
    SELECT rv, body, labels, phase FROM objects WHERE kind = $1 AND namespace = $2 AND name = $3
), upd AS (
    UPDATE objects SET rv = $4, labels = $5::jsonb, phase = $6, owner_uids = $7::text[],
                       deleting = $8, body = $9
    WHERE kind = $1 AND namespace = $2 AND name = $3 AND ($10::bigint IS NULL OR rv = $10)
    RETURNING 1
), ev AS (
    INSERT INTO events (rv, kind, namespace, name, type, body, labels, phase,
                        prev_body, prev_labels, prev_phase)
    SELECT $4, $1, $2, $3, 'MODIFIED', $9, $5::jsonb, $6, old.body, old.labels, old.phase
    FROM old, upd
    RETURNING 1
)
SELECT (SELECT rv FROM old) AS current_rv, (SELECT count(*) FROM ev) AS written
"""

_DELETE = """
WITH old AS (
    SELECT rv, body, labels, phase FROM objects WHERE kind = $1 AND namespace = $2 AND name = $3
), del AS (
    DELETE FROM objects
    WHERE kind = $1 AND namespace = $2 AND name = $3 AND ($6::bigint IS NULL OR rv = $6)
    RETURNING 1
), ev AS (
    INSERT INTO events (rv, kind, namespace, name, type, body, labels, phase,
                        prev_body, prev_labels, prev_phase)
    SELECT $4, $1, $2, $3, 'DELETED', $5, old.labels, old.phase, old.body, old.labels, old.phase
    FROM old, del
    RETURNING 1
)
SELECT (SELECT rv FROM old) AS current_rv, (SELECT count(*) FROM ev) AS written
"""

_FINISH = """
WITH bump AS (UPDATE counters SET value = $1 WHERE key = 'rv')
SELECT pg_notify($2, $1::text)
"""

# A batch without companions, in one statement (ADR 0056); migration 0013 states the function's contract.
_COMMIT_BATCH = """
SELECT outcomes, rvs FROM nodus_commit_batch(
    $1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::boolean[],
    $10::text[], $11::text[], $12::bigint[], $13::text
)
"""

_MISSING = object()  # a body without metadata.resourceVersion, to restore as it was

Operation = Literal["create", "update", "delete"]


class Companion(Protocol):
    """A row that belongs to one write, written in its transaction once the write is applied."""

    async def write(self, conn: asyncpg.Connection, stored: dict[str, Any]) -> None:
        """Write the row for ``stored`` (the body as stored, with its new resourceVersion). An error
        fails the write it belongs to (and is isolated from the rest of its batch)."""


@dataclass(slots=True)
class Write:
    """One write: the full new body (create, update) or the final body (delete), and its companions."""

    operation: Operation
    key: Key
    body: dict[str, Any]
    expected_rv: int | None = None
    companions: tuple[Companion, ...] = ()
    done: asyncio.Future[dict[str, Any]] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class _Rejected(Exception):
    """A precondition failed: this write is skipped; the batch goes on."""

    def __init__(self, error: StorageError) -> None:
        self.error = error


ConnectionFactory = Callable[[], Any]  # an async context manager yielding an asyncpg connection


class Committer:
    """Applies writes in batches on one connection; see the module docstring for the guarantees."""

    def __init__(self, connection: ConnectionFactory, max_batch: int = 256) -> None:
        self._connection = connection
        self._max_batch = max_batch
        self._queue: asyncio.Queue[Write] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        self.writes = 0
        # The newest resourceVersion committed here, per kind (Storage.written_rv): recorded before any writer
        # resumes, also for one whose caller went away meanwhile.
        self.written: dict[str, int] = {}

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="nodus-committer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while not self._queue.empty():
            write = self._queue.get_nowait()
            if not write.done.done():
                write.done.set_exception(StorageError("storage is shutting down"))

    async def submit(self, write: Write) -> dict[str, Any]:
        """Queue a write and wait until it is committed; returns the stored body (with its rv)."""
        if self._task is None:
            raise StorageError("storage is not started")
        self._queue.put_nowait(write)
        return await write.done

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            batch = [first]
            while len(batch) < self._max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._commit(batch)
            except asyncio.CancelledError:
                for write in batch:
                    if not write.done.done():
                        write.done.set_exception(StorageError("storage is shutting down"))
                raise
            except Exception as exc:  # isolate the write that broke the batch
                if len(batch) == 1:
                    log.exception("write to %s failed", batch[0].key)
                    if not batch[0].done.done():
                        batch[0].done.set_exception(StorageError(f"database error: {type(exc).__name__}"))
                    continue
                log.warning("batch of %d writes failed (%s); retrying them one by one", len(batch), exc)
                for write in batch:
                    try:
                        await self._commit([write])
                    except Exception as single:
                        log.exception("write to %s failed", write.key)
                        if not write.done.done():
                            write.done.set_exception(StorageError(f"database error: {type(single).__name__}"))

    async def _commit(self, batch: list[Write]) -> None:
        if any(write.companions for write in batch):
            outcomes = await self._commit_in_statements(batch)
        else:
            outcomes = await self._commit_in_one_call(batch)
        self.batches += 1
        self.writes += len(batch)
        written = self.written
        for write, outcome in outcomes:
            if not isinstance(outcome, StorageError):
                written[write.key.kind] = int(outcome["metadata"]["resourceVersion"])  # batches commit in rv order
            if write.done.done():
                continue
            if isinstance(outcome, StorageError):
                write.done.set_exception(outcome)
            else:
                write.done.set_result(outcome)

    async def _commit_in_one_call(self, batch: list[Write]) -> list[tuple[Write, dict[str, Any] | StorageError]]:
        """The batch in one statement, ``nodus_commit_batch`` (ADR 0056): its own implicit transaction. A
        rejected write, or every write when the call fails, gets back the resourceVersion its body had."""
        originals = [write.body["metadata"].get("resourceVersion", _MISSING) for write in batch]
        try:
            cuts = [_cut(write.body) for write in batch]
            written = [write.operation != "delete" for write in batch]
            async with self._connection() as conn:
                record = await conn.fetchrow(
                    _COMMIT_BATCH,
                    [write.operation for write in batch],
                    [write.key.kind for write in batch],
                    [write.key.namespace for write in batch],
                    [write.key.name for write in batch],
                    [str(w.body["metadata"]["uid"]) if w.operation == "create" else None for w in batch],
                    [rows.encode_labels(w.body) if new else None for w, new in zip(batch, written, strict=True)],
                    [rows.phase_of(w.body) if new else None for w, new in zip(batch, written, strict=True)],
                    [rows.encode_owner_uids(w.body) if new else None for w, new in zip(batch, written, strict=True)],
                    [rows.deleting(w.body) if new else None for w, new in zip(batch, written, strict=True)],
                    [prefix for prefix, _ in cuts],
                    [suffix for _, suffix in cuts],
                    [write.expected_rv for write in batch],
                    NOTIFY_CHANNEL,
                )
        except BaseException:
            for write, original in zip(batch, originals, strict=True):
                _restore(write.body, original)
            raise
        outcomes: list[tuple[Write, dict[str, Any] | StorageError]] = []
        for write, original, outcome, rv in zip(batch, originals, record["outcomes"], record["rvs"], strict=True):
            if outcome == "applied":
                write.body["metadata"]["resourceVersion"] = str(rv)
                outcomes.append((write, write.body))
                continue
            _restore(write.body, original)
            if outcome == "exists":
                outcomes.append((write, AlreadyExists(write.key)))
            elif outcome == "missing":
                outcomes.append((write, NotFound(write.key)))
            elif outcome == "conflict":
                outcomes.append((write, Conflict(write.key, rv)))
            else:  # pragma: no cover - the function returns nothing else
                outcomes.append((write, StorageError(f"unexpected outcome {outcome!r}")))
        return outcomes

    async def _commit_in_statements(self, batch: list[Write]) -> list[tuple[Write, dict[str, Any] | StorageError]]:
        """The batch in an explicit transaction, one statement per write, each followed by its companions."""
        outcomes: list[tuple[Write, dict[str, Any] | StorageError]] = []
        async with self._connection() as conn, conn.transaction():
            last_rv: int = await conn.fetchval(_LOCK_RV)
            next_rv = last_rv + 1
            for write in batch:
                try:
                    stored = await self._apply(conn, write, next_rv)
                except _Rejected as rejected:
                    outcomes.append((write, rejected.error))
                    continue
                for companion in write.companions:
                    await companion.write(conn, stored)
                outcomes.append((write, stored))
                last_rv = next_rv
                next_rv += 1
            await conn.fetchval(_FINISH, last_rv, NOTIFY_CHANNEL)
        return outcomes

    @staticmethod
    async def _apply(conn: asyncpg.Connection, write: Write, rv: int) -> dict[str, Any]:
        key, body = write.key, write.body
        body["metadata"]["resourceVersion"] = str(rv)
        text = rows.encode(body)
        if write.operation == "create":
            created = await conn.fetchval(
                _CREATE,
                key.kind,
                key.namespace,
                key.name,
                body["metadata"]["uid"],
                rv,
                rows.encode_labels(body),
                rows.phase_of(body),
                rows.owner_uids_of(body),
                rows.deleting(body),
                text,
            )
            if created is None:
                raise _Rejected(AlreadyExists(key))
            return body
        if write.operation == "update":
            result = await conn.fetchrow(
                _UPDATE,
                key.kind,
                key.namespace,
                key.name,
                rv,
                rows.encode_labels(body),
                rows.phase_of(body),
                rows.owner_uids_of(body),
                rows.deleting(body),
                text,
                write.expected_rv,
            )
        else:
            result = await conn.fetchrow(_DELETE, key.kind, key.namespace, key.name, rv, text, write.expected_rv)
        current_rv, written = result["current_rv"], result["written"]
        if current_rv is None:
            raise _Rejected(NotFound(key))
        if not written:
            raise _Rejected(Conflict(key, current_rv))
        return body


def _sentinel() -> str:
    return uuid.uuid4().hex


def _cut(body: dict[str, Any]) -> tuple[str, str]:
    """``body`` encoded, cut around its resourceVersion's value: ``prefix + str(rv) + suffix`` is the body encoded
    with ``rv`` (ADR 0056). The value is a fresh random sentinel, drawn again should the text hold it anywhere else
    (a chance of about 2**-122 per string a tenant wrote), so that no text of the body can be taken for it."""
    metadata = body["metadata"]
    for _ in range(8):
        sentinel = _sentinel()
        metadata["resourceVersion"] = sentinel
        text = rows.encode(body)
        at = text.find(sentinel)
        if at >= 0 and at == text.rfind(sentinel):
            return text[:at], text[at + len(sentinel) :]
    raise StorageError("could not mark the resourceVersion of a body")


def _restore(body: dict[str, Any], original: object) -> None:
    if original is _MISSING:
        body["metadata"].pop("resourceVersion", None)
    else:
        body["metadata"]["resourceVersion"] = original
