"""The resource endpoint's short path (ADR 0058): it takes only the catch-all's requests, and renders
errors as FastAPI's exception handlers do."""

from __future__ import annotations

import re

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from nodus.api import app as application
from nodus.api.app import PREFIX, NodusApp, create_app
from nodus.api.errors import APIError
from nodus.api.server import APIServer
from nodus.api.settings import ServerSettings
from nodus.storage.errors import StorageError


@pytest.fixture
def app(database_url: str) -> NodusApp:
    return create_app(APIServer(ServerSettings(database_url=database_url)))


def _sample(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


def test_every_route_with_a_handler_of_its_own_keeps_it(app: NodusApp) -> None:
    own = [
        r.path for r in app.router.routes if getattr(r, "path", "").startswith(PREFIX) and "{path:path}" not in r.path
    ]
    assert len(own) > 15  # logs, blobs, outputs, ledger, credits, join tokens, drain, ...
    for path in own:
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            assert not app.serves_directly(method, _sample(path)), path


@pytest.mark.parametrize(
    "path",
    [
        f"{PREFIX}namespaces/p/jobs",
        f"{PREFIX}namespaces/p/jobs/j",
        f"{PREFIX}namespaces/p/jobs/j/status",
        f"{PREFIX}namespaces/p/jobs/j/log/extra",  # not the log route: the resource endpoint answers 404
        f"{PREFIX}projects/p",
        f"{PREFIX}watch/namespaces/p/jobs",
    ],
)
def test_resource_requests_take_the_short_path(app: NodusApp, path: str) -> None:
    assert app.serves_directly("POST", path)
    assert not app.serves_directly("HEAD", path)  # not a resource verb: FastAPI answers


def test_discovery_and_other_groups_do_not(app: NodusApp) -> None:
    for path in ("/apis/nodus.dev/v1", "/apis/nodus.dev/v1x/jobs", "/api/v1/namespaces", "/console/jobs"):
        assert not app.serves_directly("GET", path)


@pytest.mark.parametrize(
    ("failure", "code", "reason"),
    [
        (RuntimeError("secret internal detail"), 500, "InternalError"),
        (StorageError("connection refused"), 503, "ServiceUnavailable"),
        (APIError("Conflict", "it changed", fix="Read it again."), 409, "Conflict"),
    ],
)
async def test_errors_on_the_short_path_are_statuses_with_a_request_id(
    app: NodusApp, monkeypatch: pytest.MonkeyPatch, failure: Exception, code: int, reason: str
) -> None:
    async def failing(request: Request) -> Response:
        assert request.path_params == {"path": "namespaces/p/jobs"}
        raise failure

    monkeypatch.setattr(application.resources, "handle", failing)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.post(f"{PREFIX}namespaces/p/jobs", json={})
    assert response.status_code == code, response.text
    body = response.json()
    assert body["kind"] == "Status" and body["reason"] == reason
    assert body["requestId"] == response.headers["x-request-id"]
    assert "secret internal detail" not in response.text
