"""The watch log's retention window: watches and continue tokens older than it get 410 Expired.

This module runs its own database and server so that compacting the log cannot disturb the
watches of other tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_project
from tests.support import cluster as clusters
from tests.support import databases
from tests.support.objects import job, jobs_path
from tests.support.watching import events

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def private_cluster(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[clusters.Cluster]:
    with clusters.on_own_database(database_server, tmp_path_factory.mktemp("retention")) as running:
        yield running


async def test_old_watch_and_continue_token_get_410(private_cluster: clusters.Cluster, tmp_path: Path) -> None:
    with private_cluster.client() as admin:
        project = make_project(admin)
        for i in range(5):
            admin.post(jobs_path(project), json=job(f"r{i}")).raise_for_status()
        first_page = admin.get(jobs_path(project), params={"limit": 2}).json()
        token = first_page["metadata"]["continue"]
        old_rv = first_page["metadata"]["resourceVersion"]
        admin.post(jobs_path(project), json=job("later")).raise_for_status()
        await databases.compact_watch_log(private_cluster.database_url)

        expired = admin.get(jobs_path(project), params={"limit": 2, "continue": token})
        assert expired.status_code == 410
        assert expired.json()["reason"] == "Expired"
        assert expired.json()["docs"].endswith("/docs/reasons/Expired")
        listed = admin.get(jobs_path(project), params={"resourceVersion": old_rv, "resourceVersionMatch": "Exact"})
        assert listed.status_code == 410

    async with private_cluster.async_client() as client:
        received = [e async for e in events(client, jobs_path(project), resourceVersion=old_rv)]
    assert len(received) == 1 and received[0]["type"] == "ERROR"
    status = received[0]["object"]
    assert status["code"] == 410 and status["reason"] == "Expired" and status["kind"] == "Status"
    async with private_cluster.async_client() as client:
        fresh = (await client.get(jobs_path(project))).json()["metadata"]["resourceVersion"]
        watch = asyncio.create_task(_first(client, jobs_path(project), fresh))
        await asyncio.sleep(0.2)
        (await client.post(jobs_path(project), json=job("after-compaction"))).raise_for_status()
        event = await asyncio.wait_for(watch, 10)
    assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "after-compaction"


async def _first(client: httpx.AsyncClient, path: str, rv: str) -> dict[str, object]:
    async for event in events(client, path, resourceVersion=rv):
        return event
    raise AssertionError("the watch ended without an event")
