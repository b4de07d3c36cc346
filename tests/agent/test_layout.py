"""An attempt's directory, made again by an agent restarted mid-attempt: what the program left is never followed."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from nodus.agent import hostfiles
from nodus.agent.layout import AttemptLayout


def test_a_restart_replaces_a_link_left_at_the_progress_file(tmp_path: Path) -> None:
    layout = AttemptLayout.create(tmp_path / "attempts", "train-0-1")
    host = tmp_path / "host-file"
    host.write_text("host file")
    layout.progress.unlink()
    layout.progress.symlink_to(host)
    AttemptLayout.create(tmp_path / "attempts", "train-0-1")
    assert layout.progress.is_file() and not layout.progress.is_symlink()
    assert host.read_text() == "host file"


def test_a_restart_refuses_a_link_where_a_private_directory_belongs(tmp_path: Path) -> None:
    layout = AttemptLayout.create(tmp_path / "attempts", "train-0-1")
    host = tmp_path / "host-dir"
    host.mkdir(mode=0o755)
    layout.secrets.rmdir()
    layout.secrets.symlink_to(host)
    with pytest.raises(hostfiles.UnsafePath, match="secrets is a symbolic link"):
        AttemptLayout.create(tmp_path / "attempts", "train-0-1")
    assert stat.S_IMODE(host.stat().st_mode) == 0o755  # never chmod-ed through the link
