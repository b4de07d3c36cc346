from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nodus.client import Client, ClientConfig
from tests.support import cluster as clusters


@pytest.fixture
def admin_config(cluster: clusters.Cluster) -> ClientConfig:
    return ClientConfig.from_kubeconfig(cluster.kubeconfig("admin"))


@pytest.fixture
async def client(admin_config: ClientConfig) -> AsyncIterator[Client]:
    async with Client(admin_config) as api:
        yield api
