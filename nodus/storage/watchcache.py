"""The watch cache: one LISTEN connection per process, a ring buffer of events, many cursors.

Every write appends an event row and NOTIFYs in its transaction. This process's pump wakes on the
notification (or a periodic poll, in case one is lost), reads the new rows in resourceVersion
order, turns each into an :class:`Event` whose bytes are serialised at most once whatever the
number of watchers, appends it to the buffer and wakes the watchers. A watcher is only a cursor
into the buffer: nothing is copied per watcher, and a slow watcher costs no memory. A watcher
whose cursor falls behind the buffer reads the log table instead; one behind the log's compaction
point gets Expired (410).

The pump itself can fall behind the compaction point: one that could not read the log for longer than
the retention window (the database unreachable from this process) while another process compacted it.
Its next read then starts past a gap, or finds nothing (all of it compacted). Resource versions are
contiguous (``committing`` gives every applied write the next one), so only then is the compaction point read:
the buffer is dropped, so that every cursor below the gap gets Expired from the log, and every
subscriber is told (:meth:`Subscriber.lost`) and dropped, never fed across events it did not see.

Commit order equals resourceVersion order (see ``committing``), so reading ``rv > head`` after a
notification can never skip an event that commits later with a lower version.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg
import orjson

from nodus.storage import database
from nodus.storage.errors import Expired
from nodus.storage.schema import NOTIFY_CHANNEL
from nodus.storage.subscribers import Subscribers

log = logging.getLogger(__name__)

_READ = """
SELECT rv, kind, namespace, name, type, body, labels, phase, prev_labels, prev_phase
FROM events WHERE rv > $1 AND rv <= $2 ORDER BY rv LIMIT $3
"""


@dataclass(slots=True, eq=False)
class Event:
    """One committed write, shared read-only by every watcher."""

    rv: int
    type: str
    kind: str
    namespace: str
    name: str
    body: bytes
    labels: dict[str, str]
    phase: str | None
    prev_labels: dict[str, str] | None
    prev_phase: str | None
    _object: dict[str, Any] | None = None
    _line: bytes | None = None
    _chunk: bytes | None = None

    def object(self) -> dict[str, Any]:
        """The object, decoded once. Callers must not mutate it."""
        if self._object is None:
            self._object = orjson.loads(self.body)
        return self._object

    def line(self) -> bytes:
        """The watch event as a JSON line, serialised once."""
        if self._line is None:
            self._line = b'{"type":"' + self.type.encode() + b'","object":' + self.body + b"}\n"
        return self._line

    def chunk(self) -> bytes:
        """:meth:`line` framed as an HTTP/1.1 chunk, built once for every watcher that writes it."""
        if self._chunk is None:
            line = self.line()
            self._chunk = b"%x\r\n%s\r\n" % (len(line), line)
        return self._chunk


def _event(record: asyncpg.Record) -> Event:
    return Event(
        rv=record["rv"],
        type=record["type"],
        kind=record["kind"],
        namespace=record["namespace"],
        name=record["name"],
        body=record["body"].encode(),
        labels=record["labels"],
        phase=record["phase"],
        prev_labels=record["prev_labels"],
        prev_phase=record["prev_phase"],
    )


ConnectionFactory = Callable[[], Any]


class Subscriber(Protocol):
    """A live watcher fed synchronously by the pump (see :meth:`WatchCache.subscribe`)."""

    kind: str
    index: tuple[str, str] | None
    """What it selects, for :class:`~nodus.storage.subscribers.Subscribers` to offer it only the events it could
    see (``subscribers.index_of``), or None for every event of its kind."""

    def deliver(self, event: Event) -> bool:
        """Take one event of ``kind``; return False to be unsubscribed (the watcher is gone or too slow)."""

    def lost(self) -> None:
        """The cache missed events (it read past the log's compaction point): this subscriber is dropped and
        must start again from a list. Called in the pump's loop; must not block."""


class WatchCache:
    """See the module docstring. ``head`` is the newest resourceVersion every cursor can reach; ``read_at`` the
    monotonic time the pump last read the log to its end (it does at least every ``poll_interval``), so a
    reader can tell a cache that is current from one whose pump is failing."""

    def __init__(
        self,
        dsn: str,
        connection: ConnectionFactory,
        capacity: int = 20_000,
        poll_interval: float = 1.0,
        read_batch: int = 1000,
    ) -> None:
        self._dsn = dsn
        self._connection = connection
        self._capacity = capacity
        self._poll_interval = poll_interval
        self._read_batch = read_batch
        self._events: list[Event] = []
        self._rvs: list[int] = []
        self._start_rv = 0  # every event above this is in the buffer or not yet read
        self.head = 0
        self._wake = asyncio.Event()
        self._changed: asyncio.Future[None] | None = None
        self._listener: asyncpg.Connection | None = None
        self._subscribers: dict[str, Subscribers] = {}
        self._task: asyncio.Task[None] | None = None
        self.events_read = 0
        self.read_at = 0.0
        self._checked_at = 0.0  # when the pump last read the compaction point
        self.losses = 0  # reads that started past the compaction point (see the module docstring)

    async def start(self) -> None:
        self._changed = asyncio.get_running_loop().create_future()
        await self._listen()
        # Read the head only once listening, so that nothing committed in between is missed.
        async with self._connection() as conn:
            self.head = await conn.fetchval("SELECT value FROM counters WHERE key = 'rv'")
        self._start_rv = self.head
        self.read_at = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._pump(), name="nodus-watch-pump")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
        if self._changed is not None:
            self._changed.cancel()

    async def _listen(self) -> asyncpg.Connection:
        self._listener = await asyncpg.connect(self._dsn, server_settings={"application_name": "nodus-watch"})
        await database.setup_connection(self._listener)
        await self._listener.add_listener(NOTIFY_CHANNEL, self._on_notify)
        return self._listener

    def _on_notify(self, *_: Any) -> None:
        self._wake.set()

    async def _pump(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._poll_interval):
                    await self._wake.wait()
            self._wake.clear()
            try:
                listener = self._listener
                if listener is None or listener.is_closed():
                    listener = await self._listen()
                await self._read_new(listener)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("watch cache could not read the event log; retrying")
                self._listener = None
                await asyncio.sleep(self._poll_interval)

    async def _read_new(self, conn: asyncpg.Connection) -> None:
        """Read every event after ``head`` on ``conn``, the pump's own LISTEN connection: the hot path
        takes no connection from the pool, and the statement stays prepared on it."""
        while True:
            records = await conn.fetch(_READ, self.head, 2**62, self._read_batch)
            # Not the next version, or nothing new (looked into once a poll interval, not on every wake): the
            # events after the head may have been compacted away.
            if records:
                suspect = records[0]["rv"] != self.head + 1
            else:
                suspect = time.monotonic() - self._checked_at >= self._poll_interval
            if suspect:
                await self._check_gap(conn)
            if not records:
                self.read_at = time.monotonic()
                return
            for record in records:
                event = _event(record)
                self._events.append(event)
                self._rvs.append(event.rv)
                self._deliver(event)
            self.head = self._rvs[-1]
            self.events_read += len(records)
            self._trim()
            self._signal()
            if len(records) < self._read_batch:
                self.read_at = time.monotonic()
                return

    async def _check_gap(self, conn: asyncpg.Connection) -> None:
        """Before reading on past a gap: if the events in it were compacted away, the cache has lost them."""
        self._checked_at = time.monotonic()
        compacted: int = await conn.fetchval("SELECT value FROM counters WHERE key = 'compacted_rv'")
        if compacted <= self.head:
            return  # a gap nothing was lost in (no write took those versions)
        log.warning(
            "the watch cache read up to %d but the log was compacted to %d: events were lost; every watcher "
            "starts again from a list",
            self.head,
            compacted,
        )
        self.losses += 1
        # Every cursor below the gap now reads the log, and gets Expired from it.
        self._events.clear()
        self._rvs.clear()
        self.head = self._start_rv = compacted
        subscribers = [s for kind in self._subscribers.values() for s in kind]
        self._subscribers = {}
        for subscriber in subscribers:
            try:
                subscriber.lost()
            except Exception:
                log.exception("a watcher failed to take the loss of events")
        self._signal()  # streams waiting for events look again, and find their cursor below the gap

    def _deliver(self, event: Event) -> None:
        subscribers = self._subscribers.get(event.kind)
        if subscribers is None:
            return
        for subscriber in subscribers.candidates(event):
            try:
                keep = subscriber.deliver(event)
            except Exception:
                log.exception("a watcher failed to take an event; dropping it")
                keep = False
            if not keep:
                subscribers.discard(subscriber)

    def subscribe(self, subscriber: Subscriber, position: int) -> bool:
        """Feed ``subscriber`` every later event of its kind, synchronously as the pump reads them.

        Only a watcher that has caught up may subscribe: ``position`` (the last event it saw) must be the
        head, which is checked and registered in one step so that no event can fall in between. Returns
        False (and subscribes nothing) when the watcher is behind; it should read on with :meth:`stream`.
        This is the fan-out path: one loop over the subscribers that could see the event (those indexed under
        its name or labels, and the unindexed), no task woken per watcher.
        """
        if position != self.head:
            return False
        kind = self._subscribers.get(subscriber.kind)
        if kind is None:
            kind = self._subscribers[subscriber.kind] = Subscribers()
        kind.add(subscriber)
        return True

    def unsubscribe(self, subscriber: Subscriber) -> None:
        kind = self._subscribers.get(subscriber.kind)
        if kind is not None:
            kind.discard(subscriber)

    def _trim(self) -> None:
        excess = len(self._events) - self._capacity
        if excess > self._capacity // 4:  # trim in steps, not on every event
            self._start_rv = self._rvs[excess - 1]
            del self._events[:excess]
            del self._rvs[:excess]

    def _signal(self) -> None:
        changed = self._changed
        self._changed = asyncio.get_running_loop().create_future()
        if changed is not None and not changed.done():
            changed.set_result(None)

    async def wait_for_head(self, rv: int, timeout: float) -> bool:
        """Wait until the cache has read up to ``rv``; False if it has not within ``timeout``."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.head < rv:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            self._wake.set()
            assert self._changed is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._changed), min(remaining, 0.05))
        return True

    async def _read_log(self, after: int, upto: int) -> list[Event]:
        async with self._connection() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            compacted = await conn.fetchval("SELECT value FROM counters WHERE key = 'compacted_rv'")
            if after < compacted:
                raise Expired(after, compacted)
            records = await conn.fetch(_READ, after, upto, self._read_batch)
        return [_event(r) for r in records]

    async def check(self, after: int) -> None:
        """Raise Expired if a watch from ``after`` is older than the log's retention window, even when
        this process still holds those events in memory: every server must answer alike."""
        async with self._connection() as conn:
            compacted = await conn.fetchval("SELECT value FROM counters WHERE key = 'compacted_rv'")
        if after < compacted:
            raise Expired(after, compacted)

    async def stream(self, after: int, idle: float) -> AsyncIterator[Event | None]:
        """Every event above ``after``, in order, forever. Yields None after ``idle`` seconds without
        events, once caught up, so the caller can send bookmarks or end the watch."""
        cursor = after
        while True:
            if cursor < self._start_rv:
                upto = self._start_rv
                events = await self._read_log(cursor, upto)
                for event in events:
                    yield event
                    cursor = event.rv
                if len(events) < self._read_batch:
                    cursor = max(cursor, upto)
                continue
            index = bisect.bisect_right(self._rvs, cursor)
            if index < len(self._events):
                event = self._events[index]
                cursor = event.rv
                yield event
                continue
            assert self._changed is not None
            try:
                await asyncio.wait_for(asyncio.shield(self._changed), idle)
            except TimeoutError:
                yield None
