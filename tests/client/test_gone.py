"""A watch from a resourceVersion that has left the watch log raises Gone.

This module runs its own database and server (as tests/e2e/test_retention.py does), so that
compacting the log cannot disturb the watches of other tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from nodus.client import Client, ClientConfig, Gone
from tests.conftest import make_project
from tests.support import cluster as clusters
from tests.support import databases
from tests.support.objects import job


@pytest.fixture(scope="module")
def private_cluster(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[clusters.Cluster]:
    with clusters.on_own_database(database_server, tmp_path_factory.mktemp("client-gone")) as running:
        yield running


async def test_watch_from_a_compacted_version_raises_gone(private_cluster: clusters.Cluster) -> None:
    with private_cluster.client() as admin:
        project = make_project(admin)
    async with Client(ClientConfig.from_kubeconfig(private_cluster.kubeconfig())) as client:
        old = (await client.list("jobs", project))["metadata"]["resourceVersion"]
        await client.create("jobs", job("later"), project)
        await databases.compact_watch_log(private_cluster.database_url)
        with pytest.raises(Gone) as gone:
            async with contextlib.aclosing(client.watch("jobs", project, resource_version=old)) as events:
                async for _ in events:
                    pass
        assert gone.value.status == 410 and gone.value.reason == "Expired"

        fresh = await client.list("jobs", project)
        assert [j["metadata"]["name"] for j in fresh["items"]] == ["later"]
