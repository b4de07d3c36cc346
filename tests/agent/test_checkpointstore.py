"""Checkpoints through the real API server: incremental uploads, the manifest as commit point, restores
that verify every byte and leave the roots exactly as saved."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import httpx
import pytest

from nodus.agent.checkpointstore import CheckpointFailed, CheckpointStore
from nodus.agent.manifests import CHUNK_SIZE, Manifest
from nodus.agent.snapshots import Mirror
from nodus.client import Client
from tests.agent.trees import make_tree, tree
from tests.conftest import make_project
from tests.support import cluster as clusters

pytestmark = pytest.mark.e2e

STATE = "/nodus/state"
CREATED = "2025-01-02T03:04:05Z"


@pytest.fixture
def namespace(admin: httpx.Client) -> str:
    return make_project(admin, prefix="ckpt")


def checkpoint(mirror: Mirror, seq: int = 1) -> Manifest:
    return mirror.manifest(mirror.stage(1 << 40), seq, "Snapshot", CREATED, {"job": "train", "attempt": "1"})


def leftovers(directory: Path) -> list[str]:
    """What a restore left beside its roots (nothing, when it finished or cleaned up)."""
    return [p.name for p in directory.iterdir() if p.name.startswith(".nodus-restore")]


def write_shards(root: Path, count: int, size: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        (root / f"shard-{n}.bin").write_bytes(os.urandom(size))


async def test_a_checkpoint_restores_into_fresh_roots_byte_for_byte(
    api: Client, namespace: str, tmp_path: Path
) -> None:
    state = tmp_path / "a" / "state"
    state.mkdir(parents=True)
    make_tree(state)
    write_shards(state / "shards", 3, 2 * CHUNK_SIZE + 100)
    mirror = Mirror(tmp_path / "a" / "mirror", {STATE: state})
    manifest = checkpoint(mirror)
    store = CheckpointStore(api, namespace)
    uploaded = await store.upload(manifest, mirror)
    assert uploaded.digest == "sha256:" + hashlib.sha256(manifest.to_bytes()).hexdigest()
    assert uploaded.logical_size == manifest.size
    assert uploaded.chunks_uploaded == uploaded.chunks_total == len(manifest.digests())
    assert uploaded.chunk_bytes == manifest.size  # random bytes: no chunk repeats
    assert uploaded.uploaded_bytes == manifest.size + uploaded.size
    assert store.known == manifest.digests()

    fresh = tmp_path / "b" / "state"
    restorer = CheckpointStore(api, namespace)
    restored = await restorer.restore(
        uploaded.digest, {STATE: fresh}, Mirror(tmp_path / "b" / "mirror", {STATE: fresh})
    )
    assert restored == manifest
    assert tree(fresh) == tree(state)
    assert restorer.known == manifest.digests()


async def test_the_next_checkpoint_uploads_only_the_changed_chunks(api: Client, namespace: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_shards(state, 4, 3 * CHUNK_SIZE)
    mirror = Mirror(tmp_path / "mirror", {STATE: state})
    store = CheckpointStore(api, namespace)
    first = await store.upload(checkpoint(mirror), mirror)
    assert first.chunk_bytes == 12 * CHUNK_SIZE

    # Ten bytes rewritten in place, in the middle chunk of one shard.
    with (state / "shard-2.bin").open("r+b") as shard:
        shard.seek(CHUNK_SIZE + 1000)
        shard.write(os.urandom(10))
    staged = mirror.stage(1 << 40)
    assert (staged.copied_files, staged.copied_bytes) == (1, 3 * CHUNK_SIZE)
    second = await store.upload(mirror.manifest(staged, 2, "Snapshot", CREATED), mirror)
    assert (second.chunks_uploaded, second.chunk_bytes, second.chunks_present) == (1, CHUNK_SIZE, 0)
    assert second.chunks_total == 12
    assert second.digest != first.digest

    # Nothing changed: only a new manifest (the sequence number differs).
    third = await store.upload(checkpoint(mirror, 3), mirror)
    assert (third.chunks_uploaded, third.chunk_bytes) == (0, 0)


async def test_a_store_that_lost_its_known_chunks_asks_before_sending(
    api: Client, namespace: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    write_shards(state, 2, CHUNK_SIZE + 1)
    mirror = Mirror(tmp_path / "mirror", {STATE: state})
    manifest = checkpoint(mirror)
    await CheckpointStore(api, namespace).upload(manifest, mirror)

    probing = await CheckpointStore(api, namespace).upload(manifest, mirror)
    assert (probing.chunks_uploaded, probing.chunks_present, probing.chunk_bytes) == (0, 4, 0)
    blind = await CheckpointStore(api, namespace, probe=False).upload(manifest, mirror)
    assert (blind.chunks_uploaded, blind.chunks_present) == (4, 0)


async def test_chunks_collected_since_they_were_sent_are_sent_again(
    api: Client, namespace: str, tmp_path: Path
) -> None:
    """A long run: chunks this attempt sent a day ago, named by nothing since, were collected; the server refuses
    a manifest that names them, and the store sends them again instead of failing every later checkpoint."""
    state = tmp_path / "state"
    write_shards(state, 2, CHUNK_SIZE + 1)
    mirror = Mirror(tmp_path / "mirror", {STATE: state})
    manifest = checkpoint(mirror)
    store = CheckpointStore(api, namespace, probe=False)
    store.known = set(manifest.digests())  # believed stored, but the project holds none of them
    uploaded = await store.upload(manifest, mirror)
    assert uploaded.chunks_uploaded == 4
    restored = tmp_path / "restored"
    fresh = Mirror(tmp_path / "fresh-mirror", {STATE: restored})
    await CheckpointStore(api, namespace).restore(uploaded.digest, {STATE: restored}, fresh)
    assert tree(restored) == tree(state)


async def test_an_upload_cut_short_before_its_manifest_cannot_be_restored(
    api: Client, namespace: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    write_shards(state, 3, CHUNK_SIZE)
    mirror = Mirror(tmp_path / "mirror", {STATE: state})
    manifest = checkpoint(mirror, seq=4)
    # The mirror loses one copy: its chunk cannot be read, so the upload stops before the manifest.
    victim = next(iter(sorted(manifest.digests())))
    mirror.chunk_reader(victim).path.unlink()
    store = CheckpointStore(api, namespace)
    with pytest.raises(CheckpointFailed, match=f"checkpoint 4: reading chunk {victim} from the mirror failed"):
        await store.upload(manifest, mirror)

    digest = "sha256:" + hashlib.sha256(manifest.to_bytes()).hexdigest()
    fresh = tmp_path / "fresh"
    with pytest.raises(CheckpointFailed, match=r"its manifest is not in project .*: it was never committed"):
        await store.restore(digest, {STATE: fresh}, Mirror(tmp_path / "mirror-2", {STATE: fresh}))
    assert not fresh.exists()


async def test_missing_and_tampered_chunks_are_detected(
    api: Client, namespace: str, tmp_path: Path, cluster: clusters.Cluster
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    body = os.urandom(123_457)
    (state / "weights.bin").write_bytes(body)
    mirror = Mirror(tmp_path / "mirror", {STATE: state})
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "before.txt").write_text("untouched")

    # A manifest stored without its chunk (not what upload does: a store damaged or emptied by hand). The
    # server refuses a manifest naming chunks the project lacks (ADR 0034), so it is stored as other bytes.
    lonely = checkpoint(mirror)
    (chunk,) = lonely.digests()
    data = lonely.to_bytes()
    lonely_digest = "sha256:" + hashlib.sha256(data).hexdigest()
    await api.upload_blob(namespace, data, "application/octet-stream", digest=lonely_digest)
    store = CheckpointStore(api, namespace)
    restore_mirror = Mirror(tmp_path / "mirror-2", {STATE: fresh})
    with pytest.raises(CheckpointFailed, match=f"chunk {chunk} is not in project {namespace}"):
        await store.restore(lonely_digest, {STATE: fresh}, restore_mirror)
    assert tree(fresh) == {".": ("dir", 0o755, b""), "./before.txt": ("file", 0o644, b"untouched")}

    # The chunk uploaded, then one byte of the stored object flipped on the server's disk.
    uploaded = await store.upload(lonely, mirror)
    stored = [p for p in (cluster.directory / "blobs" / "uploads").iterdir() if p.stat().st_size == len(body)]
    (victim,) = [p for p in stored if p.read_bytes() == body]
    damaged = bytearray(body)
    damaged[500] ^= 0xFF
    victim.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointFailed, match=f"chunk {chunk} is damaged"):
        await store.restore(uploaded.digest, {STATE: fresh}, restore_mirror)
    assert (fresh / "before.txt").read_text() == "untouched"
    assert not (fresh / "weights.bin").exists()
    assert leftovers(tmp_path) == []


async def test_a_restore_removes_what_the_checkpoint_does_not_have_and_seeds_the_next(
    api: Client, namespace: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    write_shards(state, 3, CHUNK_SIZE + 10)
    mirror = Mirror(tmp_path / "mirror", {STATE: state})
    uploaded = await CheckpointStore(api, namespace).upload(checkpoint(mirror), mirror)

    fresh = tmp_path / "attempt-2"
    write_shards(fresh, 5, 100)  # shard-0..4.bin of another attempt: 3 overwritten, 2 extra
    (fresh / "sub").mkdir()
    (fresh / "sub" / "leftover").write_text("x")
    restore_mirror = Mirror(tmp_path / "mirror-2", {STATE: fresh})
    store = CheckpointStore(api, namespace)
    await store.restore(uploaded.digest, {STATE: fresh}, restore_mirror)
    assert tree(fresh) == tree(state)

    # The attempt goes on: one shard changes; the next checkpoint sends that shard's changed chunk only.
    with (fresh / "shard-1.bin").open("r+b") as shard:
        shard.write(b"step 2")
    staged = restore_mirror.stage(1 << 40)
    assert staged.copied_files == 1
    after = await store.upload(restore_mirror.manifest(staged, 2, "Snapshot", CREATED), restore_mirror)
    assert (after.chunks_uploaded, after.chunk_bytes, after.chunks_present) == (1, CHUNK_SIZE, 0)
    assert restore_mirror.hashed == CHUNK_SIZE + 10
