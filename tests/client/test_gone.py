"""A watch from a resourceVersion that has left the watch log raises Gone.

This module runs its own database and server (as tests/e2e/test_retention.py does), so that
compacting the log cannot disturb the watches of other tests.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from datetime import timedelta

import pytest

from nodus.client import Client, ClientConfig, Gone
from nodus.storage import database
from nodus.storage.objects import Storage
from tests.conftest import make_project
from tests.support import cluster as clusters
from tests.support.objects import job


@pytest.fixture(scope="module")
def private_cluster(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[clusters.Cluster]:
    url = asyncio.run(database.create_database(database_server))
    running = clusters.start(tmp_path_factory.mktemp("client-gone"), url)
    yield running
    running.stop()
    asyncio.run(database.drop_database(url))


async def _compact_everything(url: str) -> None:
    storage = Storage(url, pool_size=2, retention=timedelta(0), compaction_interval=3600)
    await storage.start()
    try:
        await storage.compact()
    finally:
        await storage.stop()


async def test_watch_from_a_compacted_version_raises_gone(private_cluster: clusters.Cluster) -> None:
    with private_cluster.client() as admin:
        project = make_project(admin)
    async with Client(ClientConfig.from_kubeconfig(private_cluster.kubeconfig())) as client:
        old = (await client.list("jobs", project))["metadata"]["resourceVersion"]
        await client.create("jobs", job("later"), project)
        await _compact_everything(private_cluster.database_url)
        with pytest.raises(Gone) as gone:
            async with contextlib.aclosing(client.watch("jobs", project, resource_version=old)) as events:
                async for _ in events:
                    pass
        assert gone.value.status == 410 and gone.value.reason == "Expired"

        fresh = await client.list("jobs", project)
        assert [j["metadata"]["name"] for j in fresh["items"]] == ["later"]
