"""WATCH: a stream of ADDED, MODIFIED, DELETED, BOOKMARK and ERROR events, one JSON object per line.

The stream reads the process's watch cache (``nodus.storage.watchcache``): each event's bytes are
shared by every watcher, so the work per watcher is a filter and a write. Selectors are evaluated
on the object before and after each change, so an object that starts to match is sent as ADDED
and one that stops matching as DELETED, as kube-apiserver does. Errors after the stream began (a
watcher so far behind that its position left the log) arrive as an ERROR event with a Status.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse

from nodus.api import tables
from nodus.api.errors import APIError, expired
from nodus.api.http.lists import _too_large, build_query, open_list
from nodus.api.http.queries import ListOptions
from nodus.api.negotiation import Representation
from nodus.api.registry import API_VERSION, KindInfo
from nodus.api.server import APIServer
from nodus.apimachinery.selectors import FieldRequirement, FieldSelector, LabelSelector
from nodus.storage import errors as storage_errors
from nodus.storage.watchcache import Event

INITIAL_EVENTS_END = "k8s.io/initial-events-end"


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


def _line(kind: str, obj: Any) -> bytes:
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


class _Encoder:
    """Turns events into bytes for one watch, in JSON or as Tables (headers only on the first)."""

    def __init__(self, info: KindInfo, representation: Representation, include: str) -> None:
        self.info = info
        self.table = representation == "table"
        self.include = include
        self.headers_sent = False

    def event(self, kind: str, event: Event) -> bytes:
        if not self.table and kind == event.type:
            return event.line()
        if not self.table:
            return b'{"type":"' + kind.encode() + b'","object":' + event.body + b"}\n"
        return self.object(kind, event.object())

    def object(self, kind: str, obj: dict[str, Any]) -> bytes:
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
) -> Response:
    cache = server.storage.watch_cache
    fields = options.fields
    if name is not None:
        fields = FieldSelector((*fields.requirements, FieldRequirement("metadata.name", name)))
    options = ListOptions(**{**options.__dict__, "fields": fields})
    watch_filter = WatchFilter(
        info.kind,
        info.namespaced,
        namespace if info.namespaced else None,
        frozenset(readable) if readable is not None else None,
        options.labels,
        fields,
    )
    initial: list[str] = []
    rv = options.resource_version
    if options.send_initial_events or (rv in ("", "0") and options.send_initial_events is None):
        query = await build_query(server, info, namespace, ListOptions(**{**options.__dict__, "limit": None}), readable)
        async with open_list(server, query) as cursor:
            initial = [row[2] async for batch in cursor.batches() for row in batch]
            start = cursor.resource_version
    else:
        start = int(rv) if rv not in ("", "0") else await server.storage.current_rv()
        if start > cache.head and not await cache.wait_for_head(start, 3.0):
            raise _too_large(start, cache.head)
    stream_error: APIError | None = None
    try:
        await cache.check(start)
    except storage_errors.Expired as exc:
        stream_error = expired(f"too old resource version: {exc.requested_rv} ({exc.oldest_rv})")
    if start > cache.head:
        await cache.wait_for_head(start, 3.0)

    timeout = (
        float(options.timeout_seconds)
        if options.timeout_seconds
        else server.settings.default_watch_timeout * (1 + random.random())
    )
    interval = server.settings.bookmark_interval
    encoder = _Encoder(info, representation, options.include_object)
    metrics = server.metrics

    async def body() -> AsyncIterator[bytes]:
        if stream_error is not None:
            yield _line("ERROR", stream_error.status_body(request_id, docs_base))
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        metrics.watchers.labels(info.plural).inc()
        try:
            for text in initial:
                yield (
                    encoder.object("ADDED", orjson.loads(text))
                    if encoder.table
                    else (b'{"type":"ADDED","object":' + text.encode() + b"}\n")
                )
            if options.send_initial_events:
                yield encoder.bookmark(start, initial_end=True)
            position, last_bookmark = start, loop.time()
            idle = max(0.05, min(timeout, interval if options.allow_bookmarks else timeout))
            async for event in cache.stream(start, idle):
                now = loop.time()
                if now >= deadline:
                    return
                if event is not None:
                    position = event.rv
                    kind = watch_filter.classify(event)
                    if kind is not None:
                        metrics.watch_events.labels(info.plural).inc()
                        yield encoder.event(kind, event)
                        continue
                if options.allow_bookmarks and now - last_bookmark >= interval:
                    last_bookmark = now
                    yield encoder.bookmark(position)
        except storage_errors.Expired as exc:
            yield _line(
                "ERROR",
                expired(f"too old resource version: {exc.requested_rv} ({exc.oldest_rv})").status_body(
                    request_id, docs_base
                ),
            )
        finally:
            metrics.watchers.labels(info.plural).dec()

    return StreamingResponse(body(), media_type="application/json")
