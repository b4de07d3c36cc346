"""The ASGI application: routes, the request-id and metrics middleware, and error rendering."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nodus.api import openapi
from nodus.api.errors import APIError, internal
from nodus.api.http import (
    billing,
    blobs,
    console,
    consolepages,
    credits,
    discovery,
    drain,
    jointokens,
    logs,
    nodecredentials,
    outputs,
    progress,
    resources,
    secrets,
    serverinfo,
    spend,
    streaming,
    system,
    workspaces,
)
from nodus.api.http.responses import error_response, request_id
from nodus.api.server import APIServer
from nodus.storage.errors import StorageError

log = logging.getLogger("nodus.api")


class RequestMiddleware:
    """Gives every request an id (``X-Request-Id``, logs, error bodies) and records metrics."""

    def __init__(self, app: ASGIApp, server: APIServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = rid
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append("X-Request-Id", rid)
                verb, resource = state.get("metrics", (scope["method"].lower(), "-"))
                metrics = self.server.metrics
                metrics.requests.labels(verb, resource, str(message["status"])).inc()
                metrics.latency.labels(verb, resource).observe(time.perf_counter() - started)
            await send(message)

        started_response = False

        async def tracking(message: Message) -> None:
            nonlocal started_response
            if message["type"] == "http.response.start":
                started_response = True
            await send_with_id(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:  # the last line of defence: a Status, never a stack trace
            if started_response:
                log.exception("request %s failed after its response started", rid)
                return
            response = await _unexpected(Request(scope, receive), exc)
            await response(scope, receive, send_with_id)


PREFIX = "/apis/nodus.dev/v1/"
_RESOURCE_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})


class _ResourceEndpoint:
    """``resources.handle`` as a plain ASGI callable, with the error rendering FastAPI's exception handlers
    give it: an APIError, or the database being unavailable, before the response starts becomes a Status."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            response = await resources.handle(request)
            await response(scope, receive, tracking)
        except (APIError, StorageError, OSError, TimeoutError) as exc:
            if started:
                raise
            error = error_response(request, exc) if isinstance(exc, APIError) else await _unexpected(request, exc)
            await error(scope, receive, send)


class NodusApp(FastAPI):
    """FastAPI, with the resource endpoint of ``/apis/nodus.dev/v1`` served on a short path (ADR 0058).

    A request for any resource there (what the catch-all route would get) goes straight to
    :class:`RequestMiddleware` and ``resources.handle``: no route matching over every route, no FastAPI or
    Starlette middleware layers. Everything else (the subresources with handlers of their own, discovery,
    the console, lifespan) takes FastAPI's ordinary path. Set up by :func:`create_app`."""

    fast_path: ASGIApp | None = None
    own_routes: tuple[re.Pattern[str], ...] = ()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        fast = self.fast_path
        if fast is not None and scope["type"] == "http" and self.serves_directly(scope["method"], scope["path"]):
            scope["app"] = self
            scope["path_params"] = {"path": scope["path"][len(PREFIX) :]}
            await fast(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    def serves_directly(self, method: str, path: str) -> bool:
        """Whether a ``method`` request for ``path`` takes the short path (the catch-all's requests only)."""
        return (
            path.startswith(PREFIX)
            and method in _RESOURCE_METHODS
            and not self.root_path
            and not any(route.match(path) for route in self.own_routes)
        )


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return error_response(request, exc)


async def _unexpected(request: Request, exc: Exception) -> Response:
    rid = request_id(request)
    if isinstance(exc, StorageError | OSError | TimeoutError):
        log.error("request %s: storage unavailable: %s", rid, exc)
        error = APIError(
            "ServiceUnavailable",
            "the database is unavailable; the request was not applied",
            details={"retryAfterSeconds": 1},
            headers={"Retry-After": "1"},
        )
        return error_response(request, error)
    log.exception("request %s failed", rid)
    return error_response(request, internal(rid))


def create_app(server: APIServer) -> NodusApp:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await server.start()
        try:
            yield
        finally:
            await server.stop()

    app = NodusApp(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None, title="Nodus")
    app.state.server = server
    app.state.streams = streaming.StreamLimits(
        server.settings.max_watches_per_user, server.settings.max_log_follows_per_user
    )
    router: Any = app.router
    for path, endpoint in (
        ("/version", system.get_version),
        ("/serverinfo", serverinfo.server_info),
        ("/healthz", system.livez),
        ("/livez", system.livez),
        ("/readyz", system.readyz),
        ("/metrics", system.metrics),
        ("/docs/reasons", system.reasons_index),
        ("/docs/reasons/{code}", system.reason_page),
        ("/api", discovery.api_versions),
        ("/api/v1", discovery.core_resources),
        ("/apis", discovery.api_groups),
        ("/apis/nodus.dev", discovery.api_group),
        ("/apis/nodus.dev/v1", discovery.api_resources),
        ("/openapi/v2", openapi.serve_v2),
        ("/openapi/v3", openapi.serve_v3_index),
        ("/openapi/v3/apis/nodus.dev/v1", openapi.serve_v3_group),
    ):
        router.add_route(path, endpoint, methods=["GET"])
    for path, endpoint, methods in console.ROUTES:  # the web console (ADR 0053)
        router.add_route(path, endpoint, methods=methods)
    # Before the catch-all: the log and secret values subresources are served by their own handlers.
    every_method = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    router.add_route("/apis/nodus.dev/v1/projects/{name}/credits", credits.credits, every_method)
    router.add_route("/apis/nodus.dev/v1/nodecredentials", nodecredentials.create, every_method)
    pool = "/apis/nodus.dev/v1/namespaces/{namespace}/pools/{name}"
    router.add_route(f"{pool}/jointokens", jointokens.join_tokens, every_method)
    router.add_route(f"{pool}/jointokens/{{id}}", jointokens.join_token, every_method)
    router.add_route("/apis/nodus.dev/v1/nodes/{name}/drain", drain.drain, every_method)
    router.add_route("/apis/nodus.dev/v1/namespaces/{namespace}/ledger/holds/{hold}", billing.hold_state, every_method)
    router.add_route("/apis/nodus.dev/v1/namespaces/{namespace}/ledger/postings", billing.postings, every_method)
    router.add_route(
        "/apis/nodus.dev/v1/namespaces/{namespace}/ledger/budgets/{budget}", billing.budget_state, every_method
    )
    router.add_route(
        "/apis/nodus.dev/v1/namespaces/{namespace}/ledger/storage/{subject}", billing.storage_state, every_method
    )
    router.add_route("/apis/nodus.dev/v1/namespaces/{namespace}/ledger/statement", billing.statement, every_method)
    router.add_route("/apis/nodus.dev/v1/namespaces/{namespace}/ledger/spend", spend.project_spend, every_method)
    router.add_route("/apis/nodus.dev/v1/ledger/verify", billing.verification, every_method)
    router.add_route("/apis/nodus.dev/v1/namespaces/{namespace}/attempts/{name}/log", logs.attempt_log, every_method)
    router.add_route("/apis/nodus.dev/v1/namespaces/{namespace}/jobs/{name}/log", logs.job_log, every_method)
    # Raw bytes (blobs, job outputs, volume revisions): streamed, never decoded as objects.
    namespaced = "/apis/nodus.dev/v1/namespaces/{namespace}"
    with_head = [*every_method, "HEAD"]
    router.add_route(f"{namespaced}/blobs", blobs.upload, every_method)
    router.add_route(f"{namespaced}/blobs/{{digest}}", blobs.download, with_head)
    router.add_route(f"{namespaced}/jobs/{{name}}/outputs/{{output}}", outputs.job_output, with_head)
    router.add_route(f"{namespaced}/jobs/{{name}}/progress", progress.job_progress, every_method)
    router.add_route(f"{namespaced}/volumes/{{name}}/revisions", blobs.volume_revision, every_method)
    router.add_route(f"{namespaced}/workspaces/{{name}}/revisions", workspaces.revisions, every_method)
    router.add_route(f"{namespaced}/workspaces/{{name}}/revisions/{{number}}", workspaces.revision, with_head)
    router.add_route(
        "/apis/nodus.dev/v1/namespaces/{namespace}/secrets/{name}/values", secrets.secret_values, every_method
    )
    # Every route above under the prefix has a handler of its own; the short path must not take them.
    app.own_routes = tuple(route.path_regex for route in router.routes if getattr(route, "path", "").startswith(PREFIX))
    router.add_route(f"{PREFIX}{{path:path}}", resources.handle, methods=sorted(_RESOURCE_METHODS))
    app.fast_path = RequestMiddleware(_ResourceEndpoint(), server)
    app.add_exception_handler(APIError, _api_error)
    for unavailable in (StorageError, OSError, TimeoutError):
        app.add_exception_handler(unavailable, _unexpected)
    app.add_middleware(RequestMiddleware, server=server)
    # Outermost: the console's security headers reach its error responses too.
    app.add_middleware(consolepages.SecurityHeaders)
    return app
