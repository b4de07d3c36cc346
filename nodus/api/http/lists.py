"""LIST: one consistent snapshot, paged with continue tokens, streamed for large results.

An unpaged JSON list is streamed in batches straight from the database cursor, its items as the
stored bytes, so memory per list stays at one batch however many items there are and however many
lists run at once. Paged lists, Tables, YAML and metadata-only lists are built whole (a page is
bounded by ``limit``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.responses import Response, StreamingResponse

from nodus.api import tables
from nodus.api.auth import authorization
from nodus.api.http import queries
from nodus.api.http.queries import ListOptions
from nodus.api.http.responses import respond
from nodus.api.listwatch import ListCursor, ListQuery, too_large
from nodus.api.negotiation import Representation
from nodus.api.registry import API_VERSION, KindInfo
from nodus.api.server import APIServer


async def build_query(
    server: APIServer, info: KindInfo, namespace: str | None, options: ListOptions, readable: list[str] | None
) -> ListQuery:
    at_rv: int | None = None
    after: tuple[str, str] | None = None
    if options.continue_from is not None:
        at_rv, ns, name = options.continue_from
        after = (ns, name)
    elif options.resource_version and options.resource_version != "0":
        wanted = int(options.resource_version)
        if options.resource_version_match == "Exact":
            at_rv = wanted
        else:  # NotOlderThan (the default for a set resourceVersion): any state at least as new
            current = await server.listwatch.current_rv()
            if wanted > current:
                raise too_large(wanted, current)
    namespaces = names = None
    if readable is not None and authorization.narrowed_by_project(info):
        if info.namespaced:
            namespaces = tuple(readable)
        else:  # Project: the projects themselves
            names = tuple(readable)
    return ListQuery(
        kind=info.kind,
        namespace=namespace if info.namespaced else None,
        namespaces=namespaces,
        names=names,
        labels=options.labels,
        fields=options.fields,
        limit=options.limit,
        after=after,
        at_rv=at_rv,
    )


def _list_metadata(cursor: ListCursor) -> dict[str, Any]:
    metadata: dict[str, Any] = {"resourceVersion": str(cursor.resource_version)}
    if cursor.continue_after is not None:
        metadata["continue"] = queries.encode_continue(cursor.resource_version, *cursor.continue_after)
        if cursor.remaining is not None:
            metadata["remainingItemCount"] = cursor.remaining
    return metadata


async def respond_list(
    server: APIServer, info: KindInfo, query: ListQuery, representation: Representation, include: str
) -> Response:
    """The list response. Stored bytes are streamed as they are, except for a kind with a served form
    (``KindInfo.served``: Secret), whose items are each decoded and served."""
    if representation == "json" and query.limit is None and info.served is None:
        return await _stream(server, info, query)
    async with server.listwatch.open_list(query) as cursor:
        rows = [row async for batch in cursor.batches() for row in batch]
        metadata = _list_metadata(cursor)
    objects = [orjson.loads(row[2]) for row in rows]
    if info.served is not None:
        objects = [info.served(obj) for obj in objects]
    if representation == "table":
        return respond(tables.table(info, objects, include, list_metadata=metadata))  # type: ignore[arg-type]
    if representation == "metadata":
        items = [tables.row_object(obj, "Metadata") for obj in objects]
        return respond(
            {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "items": items}
        )
    body = {"kind": info.list_kind, "apiVersion": API_VERSION, "metadata": metadata, "items": objects}
    return respond(body, representation=representation)


async def _stream(server: APIServer, info: KindInfo, query: ListQuery) -> Response:
    stack = contextlib.AsyncExitStack()
    cursor = await stack.enter_async_context(server.listwatch.open_list(query))
    head = (
        b'{"kind":"'
        + info.list_kind.encode()
        + b'","apiVersion":"'
        + API_VERSION.encode()
        + b'","metadata":{"resourceVersion":"'
        + str(cursor.resource_version).encode()
        + b'"},"items":['
    )

    async def body() -> AsyncIterator[bytes]:
        yield head
        first = True
        async for batch in cursor.batches():
            if not first:
                yield b","
            first = False
            yield b",".join(row[2] for row in batch)
        yield b"]}"

    return ClosingStreamingResponse(body(), stack, media_type="application/json")


class ClosingStreamingResponse(StreamingResponse):
    """A streaming response that releases its resources (a database cursor) however it ends,
    including when the client goes away before the first byte."""

    def __init__(self, content: AsyncIterator[bytes], resources: contextlib.AsyncExitStack, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._resources = resources

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._resources.aclose()
