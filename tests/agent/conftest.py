"""Fixtures shared by the agent's runtime tests: a real bubblewrap sandbox and an attempt's directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodus.agent import runtime
from nodus.agent.layout import AttemptLayout


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
