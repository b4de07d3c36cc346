"""The checkpoint mirror: staging the roots into it, and the manifests and chunks it serves."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from nodus.agent import restoring
from nodus.agent.manifests import CHUNK_SIZE, Entry
from nodus.agent.snapshots import Mirror, TooLarge
from tests.agent.trees import CREATED, STATE, checkpoint, chunks_of, make_tree


def test_stage_copies_only_new_and_changed_files(mirror: Mirror, state: Path) -> None:
    (state / "a.bin").write_bytes(os.urandom(1000))
    (state / "b.bin").write_bytes(os.urandom(2000))
    first = mirror.stage(1 << 30)
    assert (first.files, first.size, first.copied_files, first.copied_bytes) == (2, 3000, 2, 3000)

    again = mirror.stage(1 << 30)
    assert (again.copied_files, again.copied_bytes) == (0, 0)

    (state / "b.bin").write_bytes(os.urandom(2500))
    (state / "c.bin").write_bytes(b"new")
    changed = mirror.stage(1 << 30)
    assert (changed.files, changed.copied_files, changed.copied_bytes) == (3, 2, 2503)
    manifest = mirror.manifest(changed, 1, "Snapshot", CREATED)
    b = next(e for e in manifest.entries if e.path == f"{STATE}/b.bin")
    assert b.chunks == ("sha256:" + hashlib.sha256((state / "b.bin").read_bytes()).hexdigest(),)


def test_a_deleted_file_leaves_the_mirror(mirror: Mirror, state: Path) -> None:
    (state / "keep").write_bytes(b"k")
    (state / "gone").write_bytes(b"g" * 100)
    mirror.stage(1 << 30)
    assert len(list(mirror.files.iterdir())) == 2

    (state / "gone").unlink()
    staged = mirror.stage(1 << 30)
    assert staged.removed_files == 1
    assert [e.path for e in staged.entries] == [STATE, f"{STATE}/keep"]
    assert len(list(mirror.files.iterdir())) == 1


def test_too_large_is_raised_before_anything_is_copied(mirror: Mirror, state: Path) -> None:
    for n in range(3):
        (state / f"shard-{n}").write_bytes(os.urandom(4096))
    with pytest.raises(TooLarge) as raised:
        mirror.stage(10_000)
    assert (raised.value.size, raised.value.max_size) == (3 * 4096, 10_000)
    assert "12288 bytes" in str(raised.value)
    assert list(mirror.files.iterdir()) == []
    assert mirror.stage(3 * 4096).copied_files == 3  # exactly the maximum is allowed


def test_entries_keep_modes_symlinks_empty_dirs_and_empty_files(mirror: Mirror, state: Path) -> None:
    make_tree(state)
    manifest = checkpoint(mirror)
    entries = {e.path.removeprefix(STATE): e for e in manifest.entries}
    assert list(entries) == [
        "",
        "/dangling",
        "/empty",
        "/empty.bin",
        "/latest",
        "/model.pt",
        "/run.sh",
        "/sub",
        "/sub/deeper",
        "/sub/deeper/notes.txt",
    ]
    assert entries["/empty"] == Entry(f"{STATE}/empty", "dir", 0o755)
    assert entries["/empty.bin"] == Entry(f"{STATE}/empty.bin", "file", 0o644, size=0, chunks=())
    assert entries["/run.sh"].mode == 0o750
    assert entries["/sub"].mode == 0o711
    assert entries["/latest"].type == "symlink"
    assert entries["/latest"].target == "sub/deeper/notes.txt"
    assert entries["/dangling"].target == "/nowhere/at/all"
    assert manifest.size == CHUNK_SIZE + 5 + len("step 100\n") + len("#!/bin/sh\n")
    assert manifest.paths == [STATE]
    assert manifest.labels == {"job": "train", "index": "0"}


@pytest.mark.parametrize(
    "size",
    [
        pytest.param(0, id="empty"),
        pytest.param(1, id="one-byte"),
        pytest.param(CHUNK_SIZE, id="exactly-one-chunk"),
        pytest.param(CHUNK_SIZE + 1, id="one-chunk-and-a-byte"),
        pytest.param(3 * CHUNK_SIZE - 7, id="three-chunks"),
    ],
)
def test_files_are_cut_at_chunk_size(mirror: Mirror, state: Path, size: int) -> None:
    data = os.urandom(size)
    (state / "f").write_bytes(data)
    (entry,) = [e for e in checkpoint(mirror).entries if e.type == "file"]
    pieces = [data[start : start + CHUNK_SIZE] for start in range(0, size, CHUNK_SIZE)]
    assert entry.size == size
    assert entry.chunks == tuple("sha256:" + hashlib.sha256(piece).hexdigest() for piece in pieces)
    assert [mirror.chunk_reader(digest).read() for digest in entry.chunks] == pieces


def test_a_manifest_hashes_only_files_copied_since_the_last_one(mirror: Mirror, state: Path) -> None:
    for n in range(4):
        (state / f"shard-{n}").write_bytes(os.urandom(100_000))
    checkpoint(mirror)
    assert mirror.hashed == 400_000
    (state / "shard-2").write_bytes(os.urandom(100_000))
    second = checkpoint(mirror, 2)
    assert mirror.hashed == 100_000
    checkpoint(mirror, 3)
    assert mirror.hashed == 0
    assert len(second.digests()) == 4


def test_a_stale_staged_is_refused(mirror: Mirror, state: Path) -> None:
    old = mirror.stage(1 << 30)
    mirror.stage(1 << 30)
    with pytest.raises(ValueError, match="stage again"):
        mirror.manifest(old, 1, "Snapshot", CREATED)


def test_stage_never_follows_symbolic_links(tmp_path: Path, mirror: Mirror, state: Path) -> None:
    outside = tmp_path / "host-secrets"
    outside.mkdir()
    (outside / "token").write_text("do not copy")
    (state / "escape").symlink_to(outside)
    (state / "token").symlink_to(outside / "token")
    manifest = checkpoint(mirror)
    assert [(e.path, e.type) for e in manifest.entries] == [
        (STATE, "dir"),
        (f"{STATE}/escape", "symlink"),
        (f"{STATE}/token", "symlink"),
    ]
    assert list(mirror.files.iterdir()) == []

    # A root that is itself a symbolic link is recorded as one, not followed.
    (tmp_path / "linked").symlink_to(outside)
    linked = Mirror(tmp_path / "mirror2", {"/workspace/ckpt": tmp_path / "linked"})
    assert [(e.type, e.target) for e in checkpoint(linked).entries] == [("symlink", str(outside))]


def test_missing_roots_and_special_files(tmp_path: Path, state: Path) -> None:
    os.mkfifo(state / "pipe")
    (state / "ok").write_text("fine")
    mirror = Mirror(tmp_path / "mirror", {STATE: state, "/workspace/ckpt": tmp_path / "absent"})
    staged = mirror.stage(1 << 30)
    assert [e.path for e in staged.entries] == [STATE, f"{STATE}/ok"]
    assert staged.skipped == (f"{STATE}/pipe: not a regular file, directory or symbolic link",)
    assert mirror.manifest(staged, 1, "Dcp", CREATED).paths == [STATE, "/workspace/ckpt"]


def test_seeding_after_a_restore_copies_and_hashes_nothing_again(tmp_path: Path, mirror: Mirror, state: Path) -> None:
    make_tree(state)
    manifest = checkpoint(mirror)
    fresh = tmp_path / "fresh"
    restoring.restore_into(manifest, {STATE: fresh}, chunks_of(mirror))

    restored = Mirror(tmp_path / "mirror-2", {STATE: fresh})
    seeded = restored.seed(manifest)
    assert seeded.copied_bytes == manifest.size
    again = restored.stage(1 << 30)
    assert again.copied_files == 0
    assert restored.manifest(again, 2, "Snapshot", CREATED).digests() == manifest.digests()
    assert restored.hashed == 0
