"""Restoring checkpoints: the roots become exactly the checkpoint, or stay exactly as they were."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nodus.agent import hostfiles, restoring
from nodus.agent.manifests import CHUNK_SIZE, Entry, Manifest, ManifestInvalid
from nodus.agent.restoring import RestoreFailed
from nodus.agent.snapshots import Mirror
from tests.agent.trees import CREATED, STATE, checkpoint, chunks_of, make_tree, tree


def test_restore_makes_the_roots_exactly_the_checkpoint(tmp_path: Path, mirror: Mirror, state: Path) -> None:
    make_tree(state)
    (state / "sub" / "readonly").mkdir()
    (state / "sub" / "readonly" / "weights").write_bytes(os.urandom(2 * CHUNK_SIZE))
    (state / "sub" / "readonly").chmod(0o555)
    manifest = checkpoint(mirror)
    saved = tree(state)

    fresh = tmp_path / "attempt-2" / "state"
    fresh.mkdir(parents=True)
    (fresh / "stale.bin").write_bytes(b"from an earlier attempt")
    (fresh / "model.pt").mkdir()  # was a file in the checkpoint
    (fresh / "latest").write_text("not a link")
    restoring.restore_into(manifest, {STATE: fresh}, chunks_of(mirror))
    assert tree(fresh) == saved
    assert sorted(p.name for p in fresh.parent.iterdir()) == ["state"]  # no sibling left behind

    # Restoring over a tree with read-only directories replaces it too.
    restoring.restore_into(manifest, {STATE: fresh}, chunks_of(mirror))
    assert tree(fresh) == saved


def test_restore_creates_missing_roots_and_files_as_roots(tmp_path: Path) -> None:
    weights = tmp_path / "work" / "weights.bin"
    weights.parent.mkdir()
    weights.write_bytes(os.urandom(CHUNK_SIZE + 3))
    weights.chmod(0o640)
    roots = {"/workspace/weights.bin": weights, "/workspace/gone": tmp_path / "work" / "gone"}
    mirror = Mirror(tmp_path / "mirror", roots)
    manifest = checkpoint(mirror)

    target = tmp_path / "elsewhere"
    into = {"/workspace/weights.bin": target / "a" / "weights.bin", "/workspace/gone": target / "gone"}
    restoring.restore_into(manifest, into, chunks_of(mirror))
    assert tree(target / "a" / "weights.bin") == tree(weights)
    assert tree(target / "gone") == {".": ("dir", 0o755, b"")}  # missing when saved: comes back empty


def test_a_damaged_chunk_leaves_the_roots_untouched(tmp_path: Path, mirror: Mirror, state: Path) -> None:
    make_tree(state)
    manifest = checkpoint(mirror)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "mine.txt").write_text("still here")
    before = tree(fresh)

    def damaged(digest: str) -> bytes:
        data = mirror.chunk_reader(digest).read()
        return data[:-1] + bytes([data[-1] ^ 1])

    with pytest.raises(RestoreFailed, match=r"is damaged: its .* bytes hash to sha256:"):
        restoring.restore_into(manifest, {STATE: fresh}, damaged)
    assert tree(fresh) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".nodus-restore")] == []

    def missing(digest: str) -> bytes:
        raise KeyError(digest)

    with pytest.raises(KeyError):
        restoring.restore_into(manifest, {STATE: fresh}, missing)
    assert tree(fresh) == before


def test_restore_refuses_paths_outside_its_roots(tmp_path: Path, mirror: Mirror, state: Path) -> None:
    (state / "a").write_text("a")
    manifest = checkpoint(mirror)
    with pytest.raises(RestoreFailed, match=r"saved \['/nodus/state'\], which are not among the paths"):
        restoring.restore_into(manifest, {"/workspace": tmp_path / "w"}, chunks_of(mirror))

    escaping = Manifest(
        "Snapshot",
        1,
        [STATE],
        CHUNK_SIZE,
        [Entry(STATE, "dir", 0o755), Entry(f"{STATE}/../../etc/cron.d", "dir", 0o755)],
        CREATED,
    )
    with pytest.raises(ManifestInvalid, match="absolute, normalised"):
        restoring.restore_into(escaping, {STATE: tmp_path / "x"}, chunks_of(mirror))
    through_link = Manifest(
        "Snapshot",
        1,
        [STATE],
        CHUNK_SIZE,
        [
            Entry(STATE, "dir", 0o755),
            Entry(f"{STATE}/etc", "symlink", 0o777, target="/etc"),
            Entry(f"{STATE}/etc/passwd", "file", 0o644),
        ],
        CREATED,
    )
    with pytest.raises(ManifestInvalid, match="parent is not a directory"):
        restoring.restore_into(through_link, {STATE: tmp_path / "x"}, chunks_of(mirror))
    assert not (tmp_path / "x").exists()


def test_a_root_whose_path_leads_through_a_link_is_not_restored_there(
    tmp_path: Path, mirror: Mirror, state: Path
) -> None:
    (state / "a").write_text("checkpointed")
    manifest = checkpoint(mirror)
    host = tmp_path / "host-dir"
    host.mkdir()
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    (workdir / "run").symlink_to(host)  # an earlier run of the program left a link above the root
    into = {STATE: hostfiles.Location(workdir, ("run", "state"), "/workspace")}
    with pytest.raises(RestoreFailed, match="/workspace/run is a symbolic link"):
        restoring.restore_into(manifest, into, chunks_of(mirror))
    assert list(host.iterdir()) == []
