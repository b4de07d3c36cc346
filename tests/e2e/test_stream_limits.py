"""Watches and followed logs are capped per user and no watch lives forever (issue 15 §4, ADR 0033).

This module runs its own server with small caps (3 watches and 2 followed logs per user) and a short
``--min-request-timeout`` (5 s: a watch lasts at most 10 s), so that the caps and the clamp show in seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.conftest import make_project
from tests.support import cluster as clusters
from tests.support.objects import API, jobs_path

pytestmark = pytest.mark.e2e
WATCHES, FOLLOWS, MIN_REQUEST_TIMEOUT = 3, 2, 5.0
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture(scope="module")
def capped(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[clusters.Cluster]:
    flags = ("--max-watches-per-user", str(WATCHES), "--max-log-follows-per-user", str(FOLLOWS))
    flags += ("--min-request-timeout", f"{MIN_REQUEST_TIMEOUT:.0f}s")
    with clusters.on_own_database(database_server, tmp_path_factory.mktemp("capped"), flags) as running:
        yield running


@pytest.fixture(scope="module")
def shared_project(capped: clusters.Cluster) -> str:
    with capped.client() as admin:
        return make_project(admin, [{"name": "alice", "role": "Owner"}, {"name": "bob", "role": "Viewer"}])


@contextlib.asynccontextmanager
async def opened(client: httpx.AsyncClient, path: str, **params: str) -> AsyncIterator[httpx.Response]:
    """A streaming GET whose status line has arrived; closed on exit."""
    async with client.stream("GET", path, params=params) as response:
        yield response


def refused_for_too_many(response: httpx.Response, flag: str) -> None:
    assert response.status_code == 429, response.status_code
    assert response.headers["retry-after"] == "5"
    body = response.json()
    assert body["kind"] == "Status" and body["reason"] == "TooManyRequests" and body["code"] == 429
    assert body["details"]["retryAfterSeconds"] == 5
    assert f"{flag}=" in body["message"] and "alice" in body["message"] and body["fix"]


async def test_a_user_over_the_watch_cap_gets_429_and_others_are_unaffected(
    capped: clusters.Cluster, shared_project: str
) -> None:
    path = jobs_path(shared_project)
    async with contextlib.AsyncExitStack() as stack:
        alice = await stack.enter_async_context(capped.async_client("alice"))
        for _ in range(WATCHES):
            held = await stack.enter_async_context(opened(alice, path, watch="1", timeoutSeconds="60"))
            assert held.status_code == 200
        async with opened(alice, path, watch="1") as over:
            await over.aread()
            refused_for_too_many(over, "--max-watches-per-user")
        # The cap is alice's: bob watches, and administrators (the controllers, the agents) are never counted.
        bob = await stack.enter_async_context(capped.async_client("bob"))
        async with opened(bob, path, watch="1", timeoutSeconds="60") as other:
            assert other.status_code == 200
        admin = await stack.enter_async_context(capped.async_client("admin"))
        for _ in range(WATCHES + 2):
            held = await stack.enter_async_context(opened(admin, path, watch="1", timeoutSeconds="60"))
            assert held.status_code == 200
        # Lists and gets are not streams: alice still reads.
        assert (await alice.get(path)).status_code == 200


async def test_a_closed_watch_frees_its_slot(capped: clusters.Cluster, shared_project: str) -> None:
    path = jobs_path(shared_project)
    async with capped.async_client("alice") as alice, contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(opened(alice, path, watch="1", timeoutSeconds="60"))
        for _ in range(WATCHES - 1):
            await stack.enter_async_context(opened(alice, path, watch="1", timeoutSeconds="60"))
        await first.aclose()  # the client leaves: the server sees the disconnect and releases the slot
        deadline = time.monotonic() + 10
        while True:
            async with opened(alice, path, watch="1", timeoutSeconds="60") as again:
                if again.status_code == 200 or time.monotonic() > deadline:
                    break
            await asyncio.sleep(0.1)
        assert again.status_code == 200


async def test_a_user_over_the_follow_cap_gets_429(capped: clusters.Cluster, shared_project: str) -> None:
    with capped.client() as admin:
        names = [_running_attempt(admin, shared_project) for _ in range(FOLLOWS + 1)]
    async with capped.async_client("alice") as alice, contextlib.AsyncExitStack() as stack:
        for name in names[:FOLLOWS]:
            log = f"{API}/namespaces/{shared_project}/attempts/{name}/log"
            held = await stack.enter_async_context(opened(alice, log, follow="true"))
            assert held.status_code == 200
        log = f"{API}/namespaces/{shared_project}/attempts/{names[-1]}/log"
        async with opened(alice, log, follow="true") as over:
            await over.aread()
            refused_for_too_many(over, "--max-log-follows-per-user")
        # Reading a log without following it holds nothing.
        assert (await alice.get(log)).status_code == 200


def _running_attempt(admin: httpx.Client, project: str) -> str:
    """An Attempt in phase Running (a followed log of it goes on until it ends)."""
    name = f"f-{uuid.uuid4().hex[:6]}-0-1"
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Attempt",
        "metadata": {"name": name},
        "spec": {"job": "f", "jobUID": str(uuid.uuid4()), "index": 0, "number": 1},
    }
    assert admin.post(f"{API}/namespaces/{project}/attempts", json=body).status_code == 201
    status = admin.patch(
        f"{API}/namespaces/{project}/attempts/{name}/status", json={"status": {"phase": "Running"}}, headers=MERGE
    )
    assert status.status_code == 200, status.text
    return name


async def test_no_watch_outlives_twice_the_min_request_timeout(capped: clusters.Cluster, shared_project: str) -> None:
    async with capped.async_client("alice") as alice:

        async def lasted(**params: str) -> float:
            started = time.monotonic()
            async with opened(alice, jobs_path(shared_project), watch="1", **params) as watch:
                assert watch.status_code == 200
                async for _ in watch.aiter_bytes():
                    pass
            return time.monotonic() - started

        # Unpatched, a watch asked for 10^9 s lasted 10^9 s: this wait is the test's failure then.
        both = asyncio.gather(lasted(), lasted(timeoutSeconds="1000000000"))
        durations = await asyncio.wait_for(both, 2 * MIN_REQUEST_TIMEOUT + 20)
    for duration in durations:
        assert MIN_REQUEST_TIMEOUT - 1 <= duration <= 2 * MIN_REQUEST_TIMEOUT + 5, durations
