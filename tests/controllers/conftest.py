from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nodus.client import Client, ClientConfig
from tests.support import cluster as clusters


@pytest.fixture
async def client(cluster: clusters.Cluster) -> AsyncIterator[Client]:
    """An administrator's API client of the session's cluster."""
    async with Client(ClientConfig.from_kubeconfig(cluster.kubeconfig("admin"))) as api:
        yield api
