"""WATCH: a stream of ADDED, MODIFIED, DELETED, BOOKMARK and ERROR events, one JSON object per line.

The stream reads the process's watch cache (:class:`~nodus.api.listwatch.ListWatch`): each event's bytes are
shared by every watcher, so the work per watcher is a filter and a write. Selectors are evaluated
on the object before and after each change, so an object that starts to match is sent as ADDED
and one that stops matching as DELETED, as kube-apiserver does. Errors after the stream began (a
watcher so far behind that its position left the log) arrive as an ERROR event with a Status.

A kind whose stored object is not what clients see (``KindInfo.served``: Secret) never gets the shared
bytes: its encoder decodes each event and serialises the served form for each watcher.

A user's watch is authorized again every two seconds while it streams (``watchaccess``, ADR 0035): one
removed from the project it watches gets an ERROR event with a 403 Status and the stream ends.

No watch lasts forever (ADR 0033): without ``timeoutSeconds`` it lasts between ``--min-request-timeout``
and twice that, as in kube-apiserver, and a longer ``timeoutSeconds`` is cut to twice that; clients
reconnect from their last resourceVersion. Each watch holds one of its user's slots
(``streaming.StreamLimits``) until it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response

from nodus.api import tables
from nodus.api.auth import authorization
from nodus.api.errors import APIError, expired
from nodus.api.http import streaming, watchaccess
from nodus.api.http.lists import build_query
from nodus.api.http.queries import ListOptions
from nodus.api.http.streaming import Slot
from nodus.api.listwatch import Event, index_of, too_large
from nodus.api.metrics import Tally
from nodus.api.negotiation import Representation
from nodus.api.registry import API_VERSION, KindInfo
from nodus.api.server import APIServer
from nodus.apimachinery.selectors import FieldRequirement, FieldSelector, LabelSelector, Operator

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WatchFilter:
    kind: str
    namespaced: bool
    namespace: str | None
    readable: frozenset[str] | None
    labels: LabelSelector
    fields: FieldSelector

    def _matches(self, namespace: str, name: str, labels: dict[str, str] | None, phase: str | None) -> bool:
        if not self.labels.empty and not self.labels.matches(labels):
            return False
        if not self.fields.empty:
            values = {"metadata.name": name, "metadata.namespace": namespace or None, "status.phase": phase}
            return self.fields.matches(values)
        return True

    def index(self) -> tuple[str, str] | None:
        """What the watch cache may offer this watcher events by (``Subscribers`` in the storage layer): the one
        name it selects, or the first label it requires to equal one value; None when it selects neither."""
        names = {r.value for r in self.fields.requirements if r.field == "metadata.name" and not r.negated}
        equalities = [
            (r.key, r.values[0])
            for r in self.labels.requirements
            if r.operator in (Operator.EQUALS, Operator.IN) and len(r.values) == 1
        ]
        return index_of(names, equalities)

    def classify(self, event: Event) -> str | None:
        """The event type this watcher sees for ``event``, or None when it sees nothing."""
        if event.kind != self.kind:
            return None
        if self.namespace is not None and event.namespace != self.namespace:
            return None
        if self.readable is not None and (event.namespace if self.namespaced else event.name) not in self.readable:
            return None
        now_matches = self._matches(event.namespace, event.name, event.labels, event.phase)
        if event.type != "MODIFIED":
            return event.type if now_matches else None
        before = self._matches(event.namespace, event.name, event.prev_labels, event.prev_phase)
        if now_matches and before:
            return "MODIFIED"
        if now_matches:
            return "ADDED"
        return "DELETED" if before else None


_Chunk = Callable[[bytes], Awaitable[None]]
"""Sends one piece of the response body (more follows)."""


def _line(kind: str, obj: Any) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


class _Encoder:
    """Turns events into bytes for one watch, in JSON or as Tables (headers only on the first)."""

    def __init__(self, info: KindInfo, representation: Representation, include: str) -> None:
        self.info = info
        self.table = representation == "table"
        self.include = include
        self.headers_sent = False
        # The stored bytes may be sent as they are: JSON, of a kind served as stored.
        self.shares_bytes = not self.table and info.served is None

    def event(self, kind: str, event: Event) -> bytes:
        if self.shares_bytes and kind == event.type:
            return event.line()
        if self.shares_bytes:
            return b'{"type":"' + kind.encode() + b'","object":' + event.body + b"}\n"
        return self.object(kind, event.object())

    def initial(self, text: bytes) -> bytes:
        """An ADDED event for a stored object of the initial list."""
        if self.shares_bytes:
            return b'{"type":"ADDED","object":' + text + b"}\n"
        return self.object("ADDED", orjson.loads(text))

    def object(self, kind: str, obj: dict[str, Any]) -> bytes:
        if self.info.served is not None:
            obj = self.info.served(obj)
        if not self.table:
            return _line(kind, obj)
        table = tables.table(self.info, [obj], self.include, headers=not self.headers_sent)  # type: ignore[arg-type]
        table["metadata"] = {"resourceVersion": obj.get("metadata", {}).get("resourceVersion", "")}
        self.headers_sent = True
        return _line(kind, table)

    def bookmark(self, rv: int, initial_end: bool = False) -> bytes:
        metadata: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            metadata["annotations"] = {INITIAL_EVENTS_END: "true"}
        if self.table:
            return _line(
                "BOOKMARK",
                {
                    "kind": "Table",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": metadata,
                    "columnDefinitions": [],
                    "rows": [],
                },
            )
        return _line("BOOKMARK", {"kind": self.info.kind, "apiVersion": API_VERSION, "metadata": metadata})


class _LiveWatcher:
    """A caught-up watcher that the watch cache feeds directly: each event it sees is framed as an HTTP
    chunk and written to the connection's transport in the pump's own loop, with no task woken per
    watcher. A client that stops reading is cut off once its unsent bytes pass ``MAX_BUFFERED``."""

    MAX_BUFFERED = 16 * 1024 * 1024

    def __init__(self, kind: str, watch_filter: WatchFilter, encoder: _Encoder, transport: Any, sent: Tally) -> None:
        self.kind = kind
        self.index = watch_filter.index()
        self._filter = watch_filter
        self._encoder = encoder
        self._transport = transport
        self._sent = sent
        self.gone = asyncio.Event()
        self.expired = False  # the cache lost events it would have fed this watcher

    def write(self, data: bytes) -> bool:
        return self._write_chunk(b"%x\r\n%s\r\n" % (len(data), data))  # HTTP/1.1 chunk, as uvicorn frames them

    def _write_chunk(self, chunk: bytes) -> bool:
        transport = self._transport
        if transport.is_closing():
            self.gone.set()
            return False
        if transport.get_write_buffer_size() > self.MAX_BUFFERED:
            transport.abort()  # a watcher that does not read must not hold the server's memory
            self.gone.set()
            return False
        transport.write(chunk)
        return True

    def deliver(self, event: Event) -> bool:
        kind = self._filter.classify(event)
        if kind is None:
            return True
        self._sent.count += 1
        if kind == event.type and self._encoder.shares_bytes:  # the common case: bytes framed once for all
            return self._write_chunk(event.chunk())
        return self.write(self._encoder.event(kind, event))

    def lost(self) -> None:
        self.expired = True
        self.gone.set()


class WatchResponse(Response):
    """An ASGI response that streams a watch until its timeout, the client leaving, or an error.

    The stream starts with the initial events (if any), then reads the watch cache from the start version
    until it has caught up. On a real connection (uvicorn with Nodus's protocol, which exposes the transport)
    a caught-up JSON watch then subscribes to the cache and is fed in the pump's loop; otherwise (Tables,
    in-process test transports) it keeps reading the cache itself.
    """

    def __init__(self, watch: _Watch, slot: Slot) -> None:
        super().__init__(status_code=200, media_type="application/json")
        self._watch = watch
        self._slot = slot

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        transport = scope.get("state", {}).get("transport")
        headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-cache, private")]
        try:
            await streaming.stream(
                receive, send, headers, lambda: self._watch.run(send, transport), f"watch {self._watch.request_id}"
            )
        finally:
            self._slot.release()


@dataclass
class _Watch:
    server: APIServer
    info: KindInfo
    watch_filter: WatchFilter
    options: ListOptions
    encoder: _Encoder
    initial: list[bytes]
    start: int
    timeout: float
    error: APIError | None
    docs_base: str
    request_id: str
    recheck: watchaccess.Recheck | None = None

    async def _refused(self, loop: asyncio.AbstractEventLoop, due: float) -> tuple[APIError | None, float]:
        """The Status that ends the watch when its caller may no longer see it (checked once ``due``), and when
        to check next."""
        if self.recheck is None or loop.time() < due:
            return None, due
        return await self.recheck(), loop.time() + watchaccess.RECHECK_SECONDS

    async def run(self, send: Any, transport: Any) -> None:
        """Stream the watch to ``send`` until its timeout, the client leaving, a refusal or an error: the initial
        events, then the cache read from ``start`` until caught up, then (on a real ``transport``, JSON) events
        fed by the cache itself. A watch opened with ``error`` sends only that ERROR event."""

        async def chunk(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        if self.error is not None:
            await chunk(self._error_event(self.error))
            return
        server = self.server
        cache = server.listwatch
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        sent = server.metrics.watch_events.labels(self.info.plural)
        watchers = server.metrics.watchers.labels(self.info.plural)
        watchers.inc()
        live: _LiveWatcher | None = None
        try:
            await self._send_initial_events(chunk)
            live, due = await self._catch_up(chunk, transport, loop, deadline, sent)
            if live is not None:
                await self._follow_live(live, loop, deadline, due)
        except APIError as error:
            if error.reason != "Expired":
                raise
            # The watch fell out of the retention window: the stream ends with the 410 as its last event.
            await chunk(self._error_event(error))
        finally:
            if live is not None:
                cache.unsubscribe(live)
            watchers.dec()

    def _error_event(self, error: APIError) -> bytes:
        """The ERROR event that ends the stream with ``error``'s Status."""
        return _line("ERROR", error.status_body(self.request_id, self.docs_base))

    async def _send_initial_events(self, chunk: _Chunk) -> None:
        """The initial list as ADDED events, then (``sendInitialEvents``) the bookmark that marks its end."""
        for text in self.initial:
            await chunk(self.encoder.initial(text))
        if self.options.send_initial_events:
            await chunk(self.encoder.bookmark(self.start, initial_end=True))

    async def _catch_up(
        self, chunk: _Chunk, transport: Any, loop: asyncio.AbstractEventLoop, deadline: float, sent: Tally
    ) -> tuple[_LiveWatcher | None, float]:
        """Read the cache from ``start``, sending each event this watcher sees (counted in ``sent``) and a bookmark
        every interval, until the ``deadline``, a refusal (sent as an ERROR event), or, when ``transport`` can
        take a :class:`_LiveWatcher`, the head. Returns the live watcher subscribed there (None when the watch
        ended here) and when access is next due for a recheck."""
        options, encoder, cache = self.options, self.encoder, self.server.listwatch
        interval = self.server.settings.bookmark_interval
        position, last_bookmark = self.start, loop.time()
        idle = max(0.05, min(self.timeout, interval if options.allow_bookmarks else self.timeout))
        if self.recheck is not None:
            idle = min(idle, watchaccess.RECHECK_SECONDS)
        due = loop.time() + watchaccess.RECHECK_SECONDS
        fast = transport is not None and not encoder.table
        async for event in cache.stream(self.start, idle):
            now = loop.time()
            if now >= deadline:
                return None, due
            refused, due = await self._refused(loop, due)
            if refused is not None:
                await chunk(self._error_event(refused))
                return None, due
            if event is not None:
                position = event.rv
                kind = self.watch_filter.classify(event)
                if kind is not None:
                    sent.count += 1
                    await chunk(encoder.event(kind, event))
            if options.allow_bookmarks and now - last_bookmark >= interval:
                last_bookmark = now
                await chunk(encoder.bookmark(position))
            if fast and position == cache.head:
                candidate = _LiveWatcher(self.info.kind, self.watch_filter, encoder, transport, sent)
                if cache.subscribe(candidate, position):
                    return candidate, due
        return None, due

    async def _follow_live(
        self, live: _LiveWatcher, loop: asyncio.AbstractEventLoop, deadline: float, due: float
    ) -> None:
        """Wait while the cache feeds ``live``, until the ``deadline`` or the client leaving; write a bookmark
        every interval, and end the stream with an ERROR event when a recheck (next ``due``) refuses the
        caller, or with a 410 when the cache lost events it should have fed (``_LiveWatcher.lost``)."""
        options, cache = self.options, self.server.listwatch
        interval = self.server.settings.bookmark_interval
        while not live.gone.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            wait = min(remaining, interval) if options.allow_bookmarks else remaining
            if self.recheck is not None:
                wait = min(wait, max(due - loop.time(), 0.05))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.gone.wait(), wait)
            refused, due = await self._refused(loop, due)
            if refused is not None and not live.gone.is_set():
                live.write(self._error_event(refused))
                return
            if options.allow_bookmarks and not live.gone.is_set() and loop.time() < deadline:
                live.write(self.encoder.bookmark(cache.head))
        if live.expired:  # the cache lost events this watch should have sent: its client must list again
            live.write(self._error_event(expired("too old resource version: later events were compacted away")))


async def respond_watch(
    server: APIServer,
    info: KindInfo,
    namespace: str | None,
    name: str | None,
    options: ListOptions,
    readable: list[str] | None,
    representation: Representation,
    docs_base: str,
    request_id: str,
    slot: Slot,
    recheck: watchaccess.Recheck | None = None,
) -> WatchResponse:
    """The watch response; it releases ``slot`` when the stream ends (the caller releases it if this raises)."""
    cache = server.listwatch
    fields = options.fields
    if name is not None:
        fields = FieldSelector((*fields.requirements, FieldRequirement("metadata.name", name)))
    options = dataclasses.replace(options, fields=fields)
    watch_filter = WatchFilter(
        info.kind,
        info.namespaced,
        namespace if info.namespaced else None,
        frozenset(readable) if readable is not None and authorization.narrowed_by_project(info) else None,
        options.labels,
        fields,
    )
    initial: list[bytes] = []
    rv = options.resource_version
    if options.send_initial_events or (rv in ("", "0") and options.send_initial_events is None):
        query = await build_query(server, info, namespace, dataclasses.replace(options, limit=None), readable)
        async with cache.open_list(query) as cursor:
            initial = [row[2] async for batch in cursor.batches() for row in batch]
            start = cursor.resource_version
    else:
        start = int(rv) if rv not in ("", "0") else await cache.current_rv()
        if start > cache.head and not await cache.wait_for_head(start, 3.0):
            raise too_large(start, cache.head)
    error: APIError | None = None
    try:
        await cache.check(start)
    except APIError as too_old:  # said as the stream's first event, as kube-apiserver does
        error = too_old
    if start > cache.head:
        await cache.wait_for_head(start, 3.0)
    encoder = _Encoder(info, representation, options.include_object)
    timeout = watch_timeout(server.settings.min_request_timeout, options.timeout_seconds)
    watch = _Watch(
        server, info, watch_filter, options, encoder, initial, start, timeout, error, docs_base, request_id, recheck
    )
    return WatchResponse(watch, slot)


def watch_timeout(min_request_timeout: float, asked: int | None) -> float:
    """How long a watch lasts: ``asked`` seconds (``timeoutSeconds``) up to twice ``min_request_timeout``;
    when not asked, a random time between one and two ``min_request_timeout``, as kube-apiserver spreads
    reconnects."""
    longest = 2 * min_request_timeout
    if asked:
        return float(min(asked, longest))  # compared as numbers first: asked may be too large for a float
    return min_request_timeout * (1 + random.random())
