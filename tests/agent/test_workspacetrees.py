"""Workspace trees: a directory scanned without following links, a subdirectory re-rooted, a tree written back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodus.agent import restoring, workspacetrees
from nodus.agent.manifests import ManifestInvalid


def tree(root: Path) -> Path:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "a.py").write_text("a = 1\n")
    (root / "big.bin").write_bytes(b"x" * 10)
    os.symlink("/etc", root / "src" / "etc")  # recorded as a link, never followed
    os.mkfifo(root / "pipe")
    return root


def test_a_scan_records_links_as_links_skips_fifos_and_chunks_files(tmp_path: Path) -> None:
    scanned = workspacetrees.scan(tree(tmp_path / "home"), chunk_size=4)
    entries = {e.path: e for e in scanned.manifest.entries}
    assert sorted(entries) == [
        "/workspace",
        "/workspace/big.bin",
        "/workspace/src",
        "/workspace/src/etc",
        "/workspace/src/pkg",
        "/workspace/src/pkg/a.py",
    ]
    assert entries["/workspace/src/etc"].type == "symlink" and entries["/workspace/src/etc"].target == "/etc"
    assert len(entries["/workspace/big.bin"].chunks) == 3  # 10 bytes in chunks of 4
    assert scanned.skipped == ("/workspace/pipe (not a file, directory or link)",)
    assert set(scanned.chunks) == scanned.manifest.digests()


def test_a_subtree_is_rerooted_and_written_back_exactly(tmp_path: Path) -> None:
    scanned = workspacetrees.scan(tree(tmp_path / "home"))
    sub = workspacetrees.subtree(scanned.manifest, "src/")
    assert [e.path for e in sub.entries] == ["/workspace", "/workspace/etc", "/workspace/pkg", "/workspace/pkg/a.py"]
    target = tmp_path / "out"
    workspacetrees.write(sub, target, lambda digest: scanned.chunks[digest].read())
    assert sorted(os.listdir(target)) == ["etc", "pkg"]
    assert (target / "pkg" / "a.py").read_text() == "a = 1\n" and os.readlink(target / "etc") == "/etc"


@pytest.mark.parametrize(
    ("path", "error"),
    [
        pytest.param("nope", workspacetrees.SubdirectoryMissing, id="missing"),
        pytest.param("big.bin", workspacetrees.SubdirectoryMissing, id="a-file"),
        pytest.param("src/etc", workspacetrees.SubdirectoryMissing, id="a-link"),
        pytest.param("src/../..", ManifestInvalid, id="dot-dot"),
    ],
)
def test_a_subtree_that_is_not_a_directory_of_the_revision_is_refused(
    tmp_path: Path, path: str, error: type[Exception]
) -> None:
    scanned = workspacetrees.scan(tree(tmp_path / "home"))
    with pytest.raises(error):
        workspacetrees.subtree(scanned.manifest, path)


def test_a_damaged_chunk_writes_nothing(tmp_path: Path) -> None:
    scanned = workspacetrees.scan(tree(tmp_path / "home"))
    target = tmp_path / "out"
    with pytest.raises(restoring.RestoreFailed, match="damaged"):
        workspacetrees.write(scanned.manifest, target, lambda digest: b"not the bytes")
    assert not target.exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".nodus-restore")] == []
