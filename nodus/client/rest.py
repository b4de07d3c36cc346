"""The REST client: CRUD, lists that follow ``continue``, watches and raw streams of ``nodus.dev/v1``.

Connections are kept alive and reused (HTTP/1.1): requests go out on at most ``REQUEST_CONNECTIONS``
connections, each an ``httpx.AsyncClient`` of its own, and streams on a pool of ``max_connections`` (a watch
holds one connection for as long as it runs). Every call is a
single request: the client never retries on its own, because only the caller knows whether a
write may be repeated. Errors are :mod:`nodus.client.errors` classes; transport failures stay
``httpx.TransportError``.

Addressing: ``plural`` is the resource (``"jobs"``), ``namespace`` the project, and ``None`` for
cluster-scoped kinds (``projects``, ``nodes``, ``leases``) or to list and watch across projects.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from nodus.client import errors, watching
from nodus.client.config import ClientConfig

API_PREFIX = "/apis/nodus.dev/v1"
Object = dict[str, Any]
_JSON = "application/json"
# Requests in flight per Client; more wait their turn (Client.__init__; docs/benchmarks.md §13.2).
REQUEST_CONNECTIONS = 32
_MERGE_PATCH = "application/merge-patch+json"


def path(plural: str, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    """The URL path of a collection, an object or an object's subresource."""
    parts = [API_PREFIX]
    if namespace is not None:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
        if subresource is not None:
            parts.append(subresource)
    return "/".join(parts)


class _Bearer(httpx.Auth):
    """The bearer token of every request, read when the request is sent: a node agent's credential rotates
    while its watches and uploads go on (:meth:`Client.set_token`)."""

    def __init__(self, token: str | None) -> None:
        self.token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self.token:
            request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


class RequestTally:
    """What a Client's requests have taken so far: how many were sent, the seconds they waited for one of the
    ``REQUEST_CONNECTIONS`` slots and the seconds from sending to the whole response. Plain numbers bumped on the
    event loop's thread and read when metrics are scraped (``nodus.controllers.metrics``)."""

    __slots__ = ("count", "sending", "waiting")

    def __init__(self) -> None:
        self.count = 0
        self.waiting = 0.0
        self.sending = 0.0


class Client:
    """An async API client; use as ``async with Client(config) as client:`` or call :meth:`aclose`.

    Returned objects are fresh dicts the caller owns.
    """

    def __init__(
        self,
        config: ClientConfig,
        *,
        user_agent: str = "nodus",
        timeout: float = 30.0,
        max_connections: int = 64,
    ) -> None:
        self.config = config
        self._timeout = timeout
        headers = {"User-Agent": user_agent, "Accept": _JSON}
        self._auth = _Bearer(config.token)
        # One TLS context for every pool of this client: building one per pool would load the CA bundle each time.
        verify = config.ssl_context() if config.server.startswith("https:") else httpx.create_ssl_context()

        def pool(connections: int) -> httpx.AsyncClient:
            return httpx.AsyncClient(
                base_url=config.server,
                headers=headers,
                auth=self._auth,
                verify=verify,
                timeout=httpx.Timeout(timeout),
                limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            )

        # Requests queue here rather than inside httpcore, and each goes out on a pool of one connection taken from
        # a stack of idle ones (made as needed, at most REQUEST_CONNECTIONS): on every request httpcore's pool
        # scans all its connections and queued requests, checking each socket. That took 28-50 % of a busy
        # controllers process with one pool of 64 (docs/benchmarks.md §13) and still 16 % with one of 16 (§13.2);
        # a pool of one has one connection to check. The stack hands out the connection used last, so few stay
        # open when few are needed. Streams (watches, followed logs) hold their connection, in a pool of their
        # own: they never wait behind requests.
        self._new_connection = functools.partial(pool, 1)
        self._connections: list[httpx.AsyncClient] = []  # every request connection made, for aclose
        self._idle: list[httpx.AsyncClient] = []
        self._slots = asyncio.Semaphore(min(REQUEST_CONNECTIONS, max_connections))
        self._closed = False
        self.requests = RequestTally()
        self._streams = pool(max_connections)

    def set_token(self, token: str) -> None:
        """Send ``token`` from the next request on (requests already sent keep the one they had)."""
        self._auth.token = token

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection; each is closed even when closing another fails (the first failure is raised)."""
        self._closed = True
        pools, self._connections, self._idle = [*self._connections, self._streams], [], []
        for outcome in await asyncio.gather(*(pool.aclose() for pool in pools), return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    # Raw requests

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send one request (``kwargs`` as for ``httpx.AsyncClient.request``); raises APIError on >= 400."""
        asked = time.perf_counter()
        async with self._slots:
            if self._closed:
                raise RuntimeError("the client is closed")
            http = self._idle.pop() if self._idle else self._connect()
            sent = time.perf_counter()
            try:
                response = await http.request(method, path, **kwargs)
            finally:
                self._idle.append(http)
                tally = self.requests
                tally.count += 1
                tally.waiting += sent - asked
                tally.sending += time.perf_counter() - sent
        if response.status_code >= 400:
            raise errors.from_response(response.status_code, response.reason_phrase, response.content)
        return response

    def _connect(self) -> httpx.AsyncClient:
        http = self._new_connection()
        self._connections.append(http)
        return http

    async def stream_lines(self, path: str, params: dict[str, Any] | None = None) -> AsyncGenerator[str, None]:
        """The lines of a text stream such as ``.../attempts/{name}/log?follow=true`` (no read timeout).

        Close it with ``contextlib.aclosing`` when stopping early, so the connection is released at once.
        """
        timeout = httpx.Timeout(self._timeout, read=None)
        async with self._streams.stream("GET", path, params=params, headers={"Accept": "*/*"}, timeout=timeout) as r:
            if r.status_code >= 400:
                raise errors.from_response(r.status_code, r.reason_phrase, await r.aread())
            async for line in watching.lines(r):
                yield line.decode("utf-8", "replace").removesuffix("\r")

    @asynccontextmanager
    async def open_download(self, path: str, params: dict[str, Any] | None = None) -> AsyncIterator[httpx.Response]:
        """A GET of raw bytes (a blob, a Job output), opened: the response's headers are there and its
        body is read with ``response.aiter_bytes()``. Raises APIError on >= 400. No read timeout
        between chunks beyond the client's."""
        async with self._streams.stream("GET", path, params=params, headers={"Accept": "*/*"}) as response:
            if response.status_code >= 400:
                raise errors.from_response(response.status_code, response.reason_phrase, await response.aread())
            yield response

    async def download(self, path: str, params: dict[str, Any] | None = None) -> AsyncGenerator[bytes, None]:
        """The bytes of ``path`` (for example ``.../blobs/sha256:<hex>`` or ``.../jobs/J/outputs/O``) as
        they arrive; raises APIError on >= 400. Close it with ``contextlib.aclosing`` when stopping early."""
        async with self.open_download(path, params) as response:
            async for chunk in response.aiter_bytes():
                yield chunk

    async def upload_blob(
        self,
        namespace: str,
        chunks: AsyncIterator[bytes] | bytes,
        media_type: str = "application/octet-stream",
        digest: str | None = None,
    ) -> Object:
        """Store ``chunks`` (streamed as they come, or one ``bytes``) as a blob of the project; returns
        ``{"kind": "Blob", "digest": "sha256:<hex>", "size": ..., "mediaType": ...}``. With ``digest``
        the server refuses (:class:`Invalid`, nothing stored) bytes that hash otherwise."""
        params = {"digest": digest} if digest is not None else None
        return await self._raw_post(path("blobs", namespace), chunks, media_type, params)

    async def upload_volume_revision(
        self,
        namespace: str,
        name: str,
        chunks: AsyncIterator[bytes] | bytes,
        media_type: str,
        filename: str | None = None,
        digest: str | None = None,
    ) -> Object:
        """Add a revision to Volume ``name``: a tar (``application/x-tar``), a tar.zst
        (``application/vnd.nodus.tar+zstd``) or one file (any other type, named by ``filename``).
        Returns ``{"kind": "VolumeRevision", "revision": {"revision": N, "sha256": ..., ...}, ...}``."""
        params: dict[str, str] = {}
        if filename is not None:
            params["filename"] = filename
        if digest is not None:
            params["digest"] = digest
        return await self._raw_post(path("volumes", namespace, name, "revisions"), chunks, media_type, params)

    async def _raw_post(
        self, url: str, chunks: AsyncIterator[bytes] | bytes, media_type: str, params: dict[str, str] | None
    ) -> Object:
        # An upload may take long: no write timeout per chunk beyond the client's, none for the answer
        # (the server hashes and registers the blob after the last byte).
        timeout = httpx.Timeout(self._timeout, read=None)
        headers = {"Content-Type": media_type}
        return await self._json("POST", url, content=chunks, headers=headers, params=params, timeout=timeout)

    async def _json(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Object:
        if body is not None:
            kwargs["content"] = orjson.dumps(body)
            kwargs.setdefault("headers", {}).setdefault("Content-Type", _JSON)
        response = await self.request(method, path, **kwargs)
        value = orjson.loads(response.content) if response.content else {}
        if not isinstance(value, dict):
            raise errors.APIError(response.status_code, "UnexpectedResponse", "the response is not a JSON object")
        return value

    # Verbs

    async def get(self, plural: str, name: str, namespace: str | None = None) -> Object:
        return await self._json("GET", path(plural, namespace, name))

    async def list(
        self,
        plural: str,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
    ) -> Object:
        """Every matching object, fetched ``limit`` at a time; all pages are one snapshot.

        Returns the first page's envelope with every item and no ``continue``:
        ``{"items": [...], "metadata": {"resourceVersion": ...}, ...}``. A continue token that expires
        mid-way raises :class:`Gone`; list again.
        """
        params: dict[str, str] = {"limit": str(limit)}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        result: Object | None = None
        items: list[Object] = []
        while True:
            page = await self._json("GET", path(plural, namespace), params=params)
            items.extend(page.get("items") or [])
            if result is None:
                result = page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
            params["continue"] = token
        metadata = dict(result.get("metadata") or {})
        metadata.pop("continue", None)
        metadata.pop("remainingItemCount", None)
        return {**result, "metadata": metadata, "items": items}

    async def create(self, plural: str, body: Object, namespace: str | None = None) -> Object:
        return await self._json("POST", path(plural, namespace), body)

    async def update(
        self, plural: str, body: Object, namespace: str | None = None, *, subresource: str | None = None
    ) -> Object:
        """PUT ``body`` (named by ``metadata.name``); its ``metadata.resourceVersion`` is a precondition:
        a stale one raises :class:`Conflict`."""
        name = (body.get("metadata") or {}).get("name")
        if not name:
            raise ValueError("update needs metadata.name in the body")
        return await self._json("PUT", path(plural, namespace, str(name), subresource), body)

    async def patch(
        self, plural: str, name: str, patch: Object, namespace: str | None = None, *, subresource: str | None = None
    ) -> Object:
        """A JSON merge patch (RFC 7386). A ``metadata.resourceVersion`` in the patch is a precondition
        (stale: :class:`Conflict`); without one the server applies it to the latest version."""
        headers = {"Content-Type": _MERGE_PATCH}
        return await self._json("PATCH", path(plural, namespace, name, subresource), patch, headers=headers)

    async def delete(
        self,
        plural: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str | None = None,
        uid: str | None = None,
    ) -> Object | None:
        """Delete; returns the object as deleted (or, with finalizers, as now marked for deletion).

        ``uid`` is a precondition: a different object of the same name is not deleted (:class:`Conflict`).
        A missing object raises :class:`NotFound`.
        """
        options: Object = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        result = await self._json("DELETE", path(plural, namespace, name), options)
        return result or None

    async def watch(
        self,
        plural: str,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
    ) -> AsyncGenerator[watching.WatchEvent, None]:
        """Changes after ``resource_version``; without one, first an ADDED event for every current object.

        Ends when the server ends the stream (after ``timeout_seconds``, or its default of 30-60
        minutes). Raises :class:`Gone` when ``resource_version`` has left the watch log, and
        :class:`APIError` for any other ERROR event. The read timeout is ``timeout_seconds`` plus
        the client timeout, so a silently dead connection ends with ``httpx.ReadTimeout`` when a
        timeout is given. Close with ``contextlib.aclosing`` when stopping early.
        """
        params: dict[str, str] = {"watch": "true", "allowWatchBookmarks": "true" if allow_bookmarks else "false"}
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        read: float | None = None
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(timeout_seconds)
            read = timeout_seconds + self._timeout
        timeout = httpx.Timeout(self._timeout, read=read)
        async with self._streams.stream("GET", path(plural, namespace), params=params, timeout=timeout) as response:
            if response.status_code >= 400:
                raise errors.from_response(response.status_code, response.reason_phrase, await response.aread())
            async for event in watching.events(response):
                yield event
