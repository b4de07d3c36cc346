"""Fixtures shared by every test: a database server, a running API server, kubectl, clients."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from nodus.storage import database
from tests.support import cluster as clusters
from tests.support import databases
from tests.tools import kubectl as kubectl_tool

E2E_TESTS = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/e2e drives real server and agent processes, so it is an ``e2e`` test whether or not
    its module says so: ``make test-fast`` (``-m 'not slow and not e2e'``) leaves it out."""
    for item in items:
        if item.path.is_relative_to(E2E_TESTS):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def database_server() -> Iterator[str]:
    yield databases.server_url()
    databases.stop()


@pytest.fixture(scope="session")
def database_url(database_server: str) -> Iterator[str]:
    """A fresh, migrated database for this test run."""
    url = asyncio.run(database.create_database(database_server))
    database.migrate(url)
    yield url
    asyncio.run(database.drop_database(url))


@pytest.fixture(scope="session")
def cluster(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[clusters.Cluster]:
    running = clusters.start(
        tmp_path_factory.mktemp("cluster"), database_url, extra_args=("--watch-bookmark-interval", "1s"), migrate=False
    )
    yield running
    running.stop()


@pytest.fixture(scope="session")
def kubectl_binary() -> Path:
    return kubectl_tool.ensure()


@pytest.fixture
def admin(cluster: clusters.Cluster) -> Iterator[httpx.Client]:
    with cluster.client("admin") as client:
        yield client


@pytest.fixture
async def admin_async(cluster: clusters.Cluster) -> AsyncIterator[httpx.AsyncClient]:
    async with cluster.async_client("admin") as client:
        yield client


def make_project(
    client: httpx.Client, members: list[dict[str, str]] | None = None, prefix: str = "p", credit: str | None = "1000"
) -> str:
    """A new project with ``members`` and ``credit`` USD granted (None: none); ``client`` must be an administrator."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Project",
        "metadata": {"name": name},
        "spec": {"displayName": name, "members": members or []},
    }
    response = client.post("/apis/nodus.dev/v1/projects", json=body)
    assert response.status_code == 201, response.text
    # Creating a Job needs credit for its first hold (issue 5): test projects start with some.
    if credit is not None:
        granted = client.post(f"/apis/nodus.dev/v1/projects/{name}/credits", json={"amountUSD": credit, "key": "start"})
        assert granted.status_code == 201, granted.text
    return name


@pytest.fixture
def project(admin: httpx.Client) -> str:
    """A fresh project where alice is Owner, bob Editor and carol Viewer (dave is not a member)."""
    return make_project(
        admin,
        [
            {"name": "alice", "role": "Owner"},
            {"name": "bob", "role": "Editor"},
            {"name": "carol", "role": "Viewer"},
        ],
    )
