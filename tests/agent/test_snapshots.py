"""Checkpoint snapshots on disk: staging into the mirror, manifests, and restoring roots exactly."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from nodus.agent import snapshots
from nodus.agent.snapshots import CHUNK_SIZE, Entry, Manifest, ManifestInvalid, Mirror, RestoreFailed, TooLarge

STATE = "/nodus/state"
CREATED = "2025-01-02T03:04:05Z"
Tree = dict[str, tuple[str, int, bytes | str]]


@pytest.fixture
def state(tmp_path: Path) -> Path:
    root = tmp_path / "state"
    root.mkdir()
    return root


@pytest.fixture
def mirror(tmp_path: Path, state: Path) -> Mirror:
    return Mirror(tmp_path / "mirror", {STATE: state})


def checkpoint(mirror: Mirror, seq: int = 1) -> Manifest:
    staged = mirror.stage(1 << 40)
    return mirror.manifest(staged, seq, "Snapshot", CREATED, {"job": "train", "index": "0"})


def chunks_of(mirror: Mirror) -> Callable[[str], bytes]:
    return lambda digest: mirror.chunk_reader(digest).read()


def tree(root: Path) -> Tree:
    """Every entry from ``root`` down: type, permission bits, and bytes or link target."""
    found: Tree = {}

    def visit(path: Path, name: str) -> None:
        status = os.lstat(path)
        if stat.S_ISLNK(status.st_mode):
            found[name] = ("symlink", 0, os.readlink(path))
        elif stat.S_ISDIR(status.st_mode):
            found[name] = ("dir", stat.S_IMODE(status.st_mode), b"")
            for child in sorted(os.listdir(path)):
                visit(path / child, f"{name}/{child}")
        else:
            found[name] = ("file", stat.S_IMODE(status.st_mode), path.read_bytes())

    visit(root, ".")
    return found


def make_tree(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "empty.bin").write_bytes(b"")
    (root / "model.pt").write_bytes(os.urandom(CHUNK_SIZE + 5))
    (root / "sub" / "deeper" / "notes.txt").write_text("step 100\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o750)
    (root / "sub").chmod(0o711)
    (root / "latest").symlink_to("sub/deeper/notes.txt")
    (root / "dangling").symlink_to("/nowhere/at/all")


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


def test_a_manifest_round_trips_through_canonical_bytes(mirror: Mirror, state: Path) -> None:
    make_tree(state)
    manifest = checkpoint(mirror, seq=7)
    data = manifest.to_bytes()
    body = orjson.loads(data)
    assert (body["apiVersion"], body["kind"], body["seq"], body["chunkSize"]) == (
        "nodus.dev/v1",
        "CheckpointManifest",
        7,
        CHUNK_SIZE,
    )
    assert list(body) == sorted(body)
    parsed = Manifest.from_bytes(data)
    assert parsed == manifest
    assert parsed.to_bytes() == data
    assert parsed.digests() == {d for e in manifest.entries for d in e.chunks}


def _valid() -> dict[str, Any]:
    digest = "sha256:" + "a" * 64
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "CheckpointManifest",
        "format": "Snapshot",
        "seq": 1,
        "paths": [STATE],
        "chunkSize": CHUNK_SIZE,
        "created": CREATED,
        "labels": {"job": "train"},
        "entries": [
            {"path": STATE, "type": "dir", "mode": 0o755},
            {"path": f"{STATE}/a.bin", "type": "file", "mode": 0o644, "size": CHUNK_SIZE + 1, "chunks": [digest] * 2},
            {"path": f"{STATE}/link", "type": "symlink", "mode": 0o777, "target": "/etc"},
            {"path": f"{STATE}/sub", "type": "dir", "mode": 0o755},
            {"path": f"{STATE}/sub/empty", "type": "file", "mode": 0o600, "size": 0, "chunks": []},
        ],
    }


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    def change(body: dict[str, Any]) -> Any:
        body[key] = value
        return body

    return change


def _entry(index: int, **fields: Any) -> Callable[[dict[str, Any]], Any]:
    def change(body: dict[str, Any]) -> Any:
        body["entries"][index].update(fields)
        return body

    return change


def _insert(index: int, entry: dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
    def change(body: dict[str, Any]) -> Any:
        body["entries"].insert(index, entry)
        return body

    return change


def _swap(body: dict[str, Any]) -> Any:
    entries = body["entries"]
    entries[1], entries[2] = entries[2], entries[1]
    return body


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(lambda body: "{", "not JSON", id="not-json"),
        pytest.param(lambda body: [], "not a JSON object", id="not-an-object"),
        pytest.param(_set("kind", "Job"), "apiVersion and kind must be", id="wrong-kind"),
        pytest.param(_set("apiVersion", "nodus.dev/v2"), "apiVersion and kind must be", id="unknown-version"),
        pytest.param(_set("format", "Tar"), "format must be Snapshot or Dcp", id="unknown-format"),
        pytest.param(_set("seq", -1), "seq must be >= 0", id="negative-seq"),
        pytest.param(_set("seq", True), "seq must be an integer", id="boolean-seq"),
        pytest.param(_set("chunkSize", 0), "chunkSize must be 1 to", id="zero-chunk-size"),
        pytest.param(_set("created", "yesterday"), "created must be an RFC 3339 time", id="bad-created"),
        pytest.param(_set("labels", {"job": 1}), "labels must map strings to strings", id="label-not-string"),
        pytest.param(_set("paths", "/nodus/state"), "paths must be a list", id="paths-not-list"),
        pytest.param(_set("paths", []), "at least one path", id="no-paths"),
        pytest.param(_set("paths", ["nodus/state"]), "absolute, normalised", id="relative-root"),
        pytest.param(_set("paths", [STATE, f"{STATE}/sub"]), "inside another path", id="nested-roots"),
        pytest.param(_set("paths", ["/nodus/../etc"]), "absolute, normalised", id="dotdot-root"),
        pytest.param(_entry(4, path=f"{STATE}/sub/../../../etc/x"), "absolute, normalised", id="dotdot-entry"),
        pytest.param(_entry(4, path="/etc/passwd"), "not under any of the paths", id="entry-outside-roots"),
        pytest.param(_entry(4, path=f"{STATE}//sub/empty"), "absolute, normalised", id="double-slash"),
        pytest.param(
            _insert(3, {"path": f"{STATE}/link/passwd", "type": "file", "mode": 0o644, "size": 0, "chunks": []}),
            "parent is not a directory",
            id="inside-a-symlink",
        ),
        pytest.param(_entry(4, path=f"{STATE}/zz/empty"), "parent is not a directory", id="missing-parent"),
        pytest.param(_swap, "sorted by path", id="unsorted"),
        pytest.param(_insert(5, {"path": f"{STATE}/sub/empty", "type": "dir", "mode": 0}), "sorted", id="duplicate"),
        pytest.param(_entry(1, chunks=["sha256:XYZ", "sha256:" + "a" * 64]), "not sha256:<64", id="bad-digest"),
        pytest.param(_entry(1, chunks=["md5:" + "a" * 32] * 2), "not sha256:<64", id="wrong-algorithm"),
        pytest.param(_entry(1, chunks=["sha256:" + "a" * 64]), "need 2 chunks, the entry has 1", id="too-few"),
        pytest.param(_entry(4, chunks=["sha256:" + "a" * 64]), "need 0 chunks", id="chunks-for-empty"),
        pytest.param(_entry(1, size=-1), "size must be >= 0", id="negative-size"),
        pytest.param(_entry(1, size="12"), "size must be an integer", id="size-not-integer"),
        pytest.param(_entry(3, type="fifo"), "type must be file, dir or symlink", id="unknown-type"),
        pytest.param(_entry(3, mode=0o10000), "mode must be permission bits", id="mode-too-large"),
        pytest.param(_entry(2, target=""), "a symlink needs a target", id="symlink-without-target"),
        pytest.param(_entry(0, path=None), "path must be a string", id="path-missing"),
    ],
)
def test_invalid_manifests_are_refused(change: Callable[[dict[str, Any]], Any], message: str) -> None:
    body = change(_valid())
    data = body.encode() if isinstance(body, str) else orjson.dumps(body)
    with pytest.raises(ManifestInvalid) as raised:
        Manifest.from_bytes(data)
    assert message in str(raised.value)


def test_the_valid_table_base_parses() -> None:
    assert Manifest.from_bytes(orjson.dumps(_valid())).size == CHUNK_SIZE + 1


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
    snapshots.restore_into(manifest, {STATE: fresh}, chunks_of(mirror))
    assert tree(fresh) == saved
    assert sorted(p.name for p in fresh.parent.iterdir()) == ["state"]  # no sibling left behind

    # Restoring over a tree with read-only directories replaces it too.
    snapshots.restore_into(manifest, {STATE: fresh}, chunks_of(mirror))
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
    snapshots.restore_into(manifest, into, chunks_of(mirror))
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
        snapshots.restore_into(manifest, {STATE: fresh}, damaged)
    assert tree(fresh) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".nodus-restore")] == []

    def missing(digest: str) -> bytes:
        raise KeyError(digest)

    with pytest.raises(KeyError):
        snapshots.restore_into(manifest, {STATE: fresh}, missing)
    assert tree(fresh) == before


def test_restore_refuses_paths_outside_its_roots(tmp_path: Path, mirror: Mirror, state: Path) -> None:
    (state / "a").write_text("a")
    manifest = checkpoint(mirror)
    with pytest.raises(RestoreFailed, match=r"saved \['/nodus/state'\], which are not among the paths"):
        snapshots.restore_into(manifest, {"/workspace": tmp_path / "w"}, chunks_of(mirror))

    escaping = Manifest(
        "Snapshot",
        1,
        [STATE],
        CHUNK_SIZE,
        [Entry(STATE, "dir", 0o755), Entry(f"{STATE}/../../etc/cron.d", "dir", 0o755)],
        CREATED,
    )
    with pytest.raises(ManifestInvalid, match="absolute, normalised"):
        snapshots.restore_into(escaping, {STATE: tmp_path / "x"}, chunks_of(mirror))
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
        snapshots.restore_into(through_link, {STATE: tmp_path / "x"}, chunks_of(mirror))
    assert not (tmp_path / "x").exists()


def test_seeding_after_a_restore_copies_and_hashes_nothing_again(tmp_path: Path, mirror: Mirror, state: Path) -> None:
    make_tree(state)
    manifest = checkpoint(mirror)
    fresh = tmp_path / "fresh"
    snapshots.restore_into(manifest, {STATE: fresh}, chunks_of(mirror))

    restored = Mirror(tmp_path / "mirror-2", {STATE: fresh})
    seeded = restored.seed(manifest)
    assert seeded.copied_bytes == manifest.size
    again = restored.stage(1 << 30)
    assert again.copied_files == 0
    assert restored.manifest(again, 2, "Snapshot", CREATED).digests() == manifest.digests()
    assert restored.hashed == 0
