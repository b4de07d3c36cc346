from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from nodus.client import Client, ClientConfig
from tests.support import cluster as clusters
from tests.support.proxy import Proxy


@pytest.fixture
def admin_config(cluster: clusters.Cluster) -> ClientConfig:
    return ClientConfig.from_kubeconfig(cluster.kubeconfig("admin"))


@pytest.fixture
async def client(admin_config: ClientConfig) -> AsyncIterator[Client]:
    async with Client(admin_config) as api:
        yield api


@pytest.fixture
async def proxy(cluster: clusters.Cluster) -> AsyncIterator[Proxy]:
    """A proxy to the API server whose connections a test can cut."""
    running = await Proxy(cluster.url).start()
    yield running
    await running.stop()


@pytest.fixture
async def proxied(admin_config: ClientConfig, proxy: Proxy) -> AsyncIterator[Client]:
    """An admin client that reaches the server through ``proxy``."""
    async with Client(dataclasses.replace(admin_config, server=proxy.url), timeout=5) as api:
        yield api
