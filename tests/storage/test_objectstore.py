"""The filesystem object store's leftovers: a crashed upload's temporary file goes, another server's stays."""

from __future__ import annotations

import os
import time
from pathlib import Path

from nodus.storage.objectstore import FilesystemStore


def test_a_start_removes_stale_partials_and_keeps_uploads_in_flight(tmp_path: Path) -> None:
    partial = tmp_path / ".partial"
    partial.mkdir()
    (partial / "crashed").write_bytes(b"x")
    old = time.time() - 7200
    os.utime(partial / "crashed", (old, old))
    (partial / "in-flight").write_bytes(b"y")  # another API server sharing the directory is writing it
    FilesystemStore(tmp_path)
    assert sorted(p.name for p in partial.iterdir()) == ["in-flight"]
