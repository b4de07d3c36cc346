"""Fixtures shared by the agent's tests: a real bubblewrap sandbox, an attempt's directory, checkpoint state and
its mirror, and a client of the session's API server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodus.agent import runtime
from nodus.agent.layout import AttemptLayout
from nodus.agent.snapshots import Mirror
from nodus.client import Client, ClientConfig
from tests.agent.trees import STATE
from tests.support import cluster as clusters
from tests.support import images


@pytest.fixture
def sandbox() -> runtime.Runtime:
    """The bubblewrap runtime; skips, with bwrap's own reason, only where bwrap cannot create namespaces."""
    try:
        return runtime.select_runtime("bubblewrap")
    except runtime.RuntimeUnavailable as error:
        pytest.skip(f"bubblewrap cannot run on this machine: {error}")


@pytest.fixture(scope="session")
def containers(tmp_path_factory: pytest.TempPathFactory) -> runtime.Runtime:
    """The podman runtime with the agent's own engine configuration (ADR 0040)."""
    from nodus.agent.podman import PodmanRuntime

    return PodmanRuntime.probed(tmp_path_factory.mktemp("engine"))


@pytest.fixture(scope="session")
def base_image() -> runtime.ContainerImage:
    """The development base image (Debian + python3), built and imported once."""
    reference = images.base_image()
    return runtime.ContainerImage(reference, reference)


@pytest.fixture
def layout(tmp_path: Path) -> AttemptLayout:
    return AttemptLayout.create(tmp_path / "attempts", "train-0-1")


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """The checkpoint root ``/nodus/state`` of the snapshot, manifest and restore tests, on the host."""
    root = tmp_path / "state"
    root.mkdir()
    return root


@pytest.fixture
def mirror(tmp_path: Path, state: Path) -> Mirror:
    return Mirror(tmp_path / "mirror", {STATE: state})


@pytest.fixture
async def api(cluster: clusters.Cluster) -> AsyncIterator[Client]:
    """An administrator's client of the session's API server (the agent's own credentials)."""
    async with Client(ClientConfig.from_kubeconfig(cluster.kubeconfig("admin"))) as client:
        yield client
