"""The agent's reading of EC2's spot interruption notice: IMDSv2 against a real HTTP metadata service, and the
decision on each answer (no notice, a notice, something else)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from nodus.agent import spotnotice
from nodus.agent.spotnotice import MetadataClient, MetadataError, Notice
from tests.support.metadata import MetadataServer


@pytest.fixture
def metadata() -> Iterator[MetadataServer]:
    server = MetadataServer()
    yield server
    server.close()


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        pytest.param(404, b"", None, id="no-notice"),
        pytest.param(
            200,
            b'{"action": "terminate", "time": "2026-11-02T08:22:00Z"}',
            Notice("terminate", "2026-11-02T08:22:00Z"),
            id="terminate",
        ),
        pytest.param(
            200,
            b'{"action": "stop", "time": "2026-11-02T08:22:00+00:00"}',
            Notice("stop", "2026-11-02T08:22:00Z"),
            id="stop-with-offset",
        ),
    ],
)
def test_an_answer_is_a_notice_or_none(status: int, body: bytes, expected: Notice | None) -> None:
    assert spotnotice.read_notice(status, body) == expected


@pytest.mark.parametrize(
    ("status", "body"),
    [
        pytest.param(500, b"", id="server-error"),
        pytest.param(200, b"<html>", id="not-json"),
        pytest.param(200, b'{"action": "terminate"}', id="no-time"),
        pytest.param(200, b'{"action": "terminate", "time": "soon"}', id="not-a-time"),
    ],
)
def test_anything_else_is_an_error(status: int, body: bytes) -> None:
    with pytest.raises(MetadataError):
        spotnotice.read_notice(status, body)


async def test_reads_with_a_session_token_and_renews_a_refused_one(metadata: MetadataServer) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        reader = MetadataClient(metadata.url, client)
        assert await reader.notice() is None
        metadata.notice = {"action": "terminate", "time": "2026-11-02T08:22:00Z"}
        metadata.tokens.clear()  # the service forgot the session: the reader takes a new one
        assert await reader.notice() == Notice("terminate", "2026-11-02T08:22:00Z")
        assert metadata.reads == 2


async def test_watch_reports_each_notice_once(metadata: MetadataServer) -> None:
    reports: list[dict[str, str]] = []

    async def report(notice: dict[str, str]) -> None:
        reports.append(notice)

    watching = asyncio.create_task(spotnotice.watch(metadata.url, report, interval=0.05))
    try:
        while metadata.reads < 3:
            await asyncio.sleep(0.05)
        assert reports == []
        metadata.notice = {"action": "terminate", "time": "2026-11-02T08:22:00Z"}
        reads = metadata.reads
        while metadata.reads < reads + 4:
            await asyncio.sleep(0.05)
    finally:
        watching.cancel()
    assert len(reports) == 1
    assert reports[0]["time"] == "2026-11-02T08:22:00Z"
    assert (reports[0]["action"], reports[0]["source"]) == ("terminate", "aws-spot")
