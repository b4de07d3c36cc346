"""Fixtures shared by the agent's runtime tests: a real bubblewrap sandbox and an attempt's directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.agent import runtime
from nodus.agent.layout import AttemptLayout
from nodus.agent.snapshots import Mirror
from tests.agent.trees import STATE


@pytest.fixture
def sandbox() -> runtime.Runtime:
    """The bubblewrap runtime; skips, with bwrap's own reason, only where bwrap cannot create namespaces."""
    try:
        return runtime.select_runtime("bubblewrap")
    except runtime.RuntimeUnavailable as error:
        pytest.skip(f"bubblewrap cannot run on this machine: {error}")


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
