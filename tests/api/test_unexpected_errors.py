"""An unexpected failure is a 500 Status with a request id, never a stack trace."""

from __future__ import annotations

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from nodus.api.app import create_app
from nodus.api.server import APIServer
from nodus.api.settings import ServerSettings


async def _explode(request: Request) -> Response:
    raise RuntimeError("secret internal detail in a stack trace")


@pytest.fixture
def app(database_url: str) -> object:
    server = APIServer(ServerSettings(database_url=database_url))
    application = create_app(server)
    application.router.add_route("/boom", _explode, methods=["GET"])
    return application


async def test_internal_errors_hide_the_details(app: object, caplog: pytest.LogCaptureFixture) -> None:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/boom")
    assert response.status_code == 500
    body = response.json()
    assert body["kind"] == "Status" and body["reason"] == "InternalError" and body["code"] == 500
    assert body["requestId"] == response.headers["x-request-id"]
    assert "secret internal detail" not in response.text and "Traceback" not in response.text
    assert any(body["requestId"] in record.getMessage() for record in caplog.records), "the log names the request"
