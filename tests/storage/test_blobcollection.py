"""Blob limits, references, collection and the sweep of orphaned objects, against the real database and
both object stores (ADR 0034). Time moves by ageing a row's ``referenced_at`` in the database."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nodus.agent import checkpointstore
from nodus.agent.manifests import Entry, Manifest
from nodus.storage import blobcollection, blobs
from nodus.storage.blobs import BlobTooLarge, Limits, QuotaExceeded
from nodus.storage.errors import Key
from nodus.storage.objects import Storage
from nodus.storage.objectstore import FilesystemStore, ObjectStore
from tests.storage.conftest import job, object_count, unique_namespace
from tests.storage.test_blobs import digest_of

GRACE = timedelta(hours=24)
KIB = 1024


async def pieces(body: bytes, size: int = KIB, taken: list[int] | None = None) -> AsyncIterator[bytes]:
    """``body`` in pieces of ``size``; ``taken`` counts the pieces the reader asked for."""
    for start in range(0, len(body), size):
        if taken is not None:
            taken.append(start)
        yield body[start : start + size]


async def age(storage: Storage, namespace: str, digest: str, by: timedelta = GRACE * 2) -> None:
    async with storage._connection() as conn:
        await conn.execute(
            "UPDATE blobs SET referenced_at = now() - $3::interval WHERE namespace = $1 AND digest = $2",
            namespace,
            digest,
            by,
        )


async def collect_all(storage: Storage, store: ObjectStore, namespace: str) -> list[blobcollection.Collected]:
    out = []
    for digest in await blobcollection.candidates(storage, namespace, GRACE):
        collected = await blobcollection.collect(storage, store, namespace, digest, GRACE)
        if collected is not None:
            out.append(collected)
    return out


# --- limits -----------------------------------------------------------------------------------------


async def test_a_declared_size_over_the_maximum_is_refused_before_reading(storage: Storage, store: ObjectStore) -> None:
    taken: list[int] = []
    with pytest.raises(BlobTooLarge) as refused:
        await blobs.put(
            storage,
            store,
            unique_namespace(),
            pieces(b"x" * 4096, taken=taken),
            limits=Limits(max_size=1000),
            declared_size=4096,
        )
    assert (refused.value.limit, refused.value.size, refused.value.declared) == (1000, 4096, True)
    assert taken == [] and object_count(store) == 0


async def test_a_body_past_the_maximum_stops_being_read_and_leaves_nothing(
    storage: Storage, store: ObjectStore
) -> None:
    taken: list[int] = []
    with pytest.raises(BlobTooLarge) as refused:
        await blobs.put(
            storage, store, unique_namespace(), pieces(os.urandom(64 * KIB), taken=taken), limits=Limits(4000)
        )
    assert not refused.value.declared and refused.value.size == 4 * KIB
    assert len(taken) == 4  # the fourth KiB passed the limit: nothing more was asked for
    assert object_count(store) == 0


async def test_the_quota_counts_each_digest_of_the_project_once(storage: Storage, store: ObjectStore) -> None:
    namespace = unique_namespace()
    quota = Limits(quota=3 * KIB)
    first = os.urandom(2 * KIB)
    await blobs.put(storage, store, namespace, pieces(first), limits=quota)
    # The same bytes again take nothing more, with or without the digest named.
    await blobs.put(storage, store, namespace, pieces(first), limits=quota, expected_digest=digest_of(first))
    assert await blobs.usage(storage, namespace) == 2 * KIB
    with pytest.raises(QuotaExceeded) as refused:
        await blobs.put(storage, store, namespace, pieces(os.urandom(2 * KIB)), limits=quota, declared_size=2 * KIB)
    assert (refused.value.quota, refused.value.used, refused.value.size) == (3 * KIB, 2 * KIB, 2 * KIB)
    with pytest.raises(QuotaExceeded) as streaming:
        await blobs.put(storage, store, namespace, pieces(os.urandom(2 * KIB)), limits=quota)
    assert not streaming.value.complete
    assert await blobs.usage(storage, namespace) == 2 * KIB and object_count(store) == 1
    await blobs.put(storage, store, namespace, pieces(os.urandom(KIB)), limits=quota)  # exactly up to the quota
    assert await blobs.usage(storage, namespace) == 3 * KIB


async def test_concurrent_uploads_never_register_past_the_quota(storage: Storage, store: ObjectStore) -> None:
    namespace = unique_namespace()
    bodies = [os.urandom(KIB) for _ in range(10)]
    results = await asyncio.gather(
        *(blobs.put(storage, store, namespace, pieces(b), limits=Limits(quota=4 * KIB)) for b in bodies),
        return_exceptions=True,
    )
    assert sum(isinstance(r, blobs.BlobInfo) for r in results) == 4
    assert all(isinstance(r, (blobs.BlobInfo, QuotaExceeded)) for r in results)
    assert await blobs.usage(storage, namespace) == 4 * KIB and object_count(store) == 4


# --- references -------------------------------------------------------------------------------------


async def test_references_are_the_digests_jobs_attempts_volumes_and_workspaces_name(storage: Storage) -> None:
    namespace = unique_namespace()
    hexes = [os.urandom(32).hex() for _ in range(7)]
    named = job(namespace, "train")
    named["spec"]["source"] = {"blob": f"sha256:{hexes[0]}"}
    named["status"] = {"outputs": [{"name": "model", "sha256": hexes[1], "size": 10}]}
    attempt = {"kind": "Attempt", "metadata": {"name": "train-0-1", "namespace": namespace, "uid": str(uuid.uuid4())}}
    attempt["status"] = {"checkpoint": {"manifest": f"sha256:{hexes[2]}"}}
    volume = {"kind": "Volume", "metadata": {"name": "data", "namespace": namespace, "uid": str(uuid.uuid4())}}
    volume["status"] = {"revisions": [{"revision": 1, "sha256": hexes[3]}]}
    workspace = {"kind": "Workspace", "metadata": {"name": "home", "namespace": namespace, "uid": str(uuid.uuid4())}}
    workspace["status"] = {"revisions": [{"revision": 1, "digest": f"sha256:{hexes[6]}"}]}
    secret = {"kind": "Secret", "metadata": {"name": "s", "namespace": namespace, "uid": str(uuid.uuid4())}}
    secret["data"] = {"x": f"sha256:{hexes[4]}"}  # not a kind that names blobs
    elsewhere = job(unique_namespace(), "other")
    elsewhere["spec"]["source"] = {"blob": f"sha256:{hexes[5]}"}
    for body in (named, attempt, volume, workspace, secret, elsewhere):
        meta = body["metadata"]
        await storage.create(Key(body["kind"], meta["namespace"], meta["name"]), body)
    found = await blobcollection.references(storage, namespace)
    assert found.digests == {f"sha256:{h}" for h in [*hexes[:4], hexes[6]]}
    assert found.outputs == {f"sha256:{hexes[1]}"}


def test_a_checkpoint_manifest_names_its_chunks() -> None:
    chunks = [f"sha256:{os.urandom(32).hex()}" for _ in range(3)]
    manifest = Manifest(
        format="Snapshot",
        seq=1,
        paths=["/nodus/state"],
        chunk_size=4,
        entries=[
            Entry("/nodus/state", "dir", 0o755),
            Entry("/nodus/state/a", "file", 0o644, size=8, chunks=(chunks[0], chunks[1])),
            Entry("/nodus/state/b", "file", 0o644, size=3, chunks=(chunks[2],)),
        ],
        created="2026-12-01T00:00:00+00:00",
    )
    assert blobcollection.manifest_chunks(manifest.to_bytes()) == set(chunks)
    assert blobcollection.manifest_chunks(b'{"kind": "Other", "entries": []}') is None
    assert blobcollection.manifest_chunks(b"not json") is None
    assert blobcollection.CHECKPOINT_MANIFEST_MEDIA_TYPE == checkpointstore.MANIFEST_MEDIA_TYPE


async def test_a_stored_manifest_is_read_as_it_streams_and_names_every_chunk(
    storage: Storage, store: ObjectStore
) -> None:
    chunks = sorted(f"sha256:{os.urandom(32).hex()}" for _ in range(20_000))  # 1.5 MB: read in several pieces
    manifest = Manifest(
        format="Snapshot",
        seq=1,
        paths=["/nodus/state"],
        chunk_size=4,
        entries=[
            Entry("/nodus/state", "dir", 0o755),
            Entry("/nodus/state/a", "file", 0o644, size=4 * len(chunks), chunks=tuple(chunks)),
        ],
        created="2026-12-01T00:00:00+00:00",
    )
    data = manifest.to_bytes()
    info = await blobs.put(
        storage, store, unique_namespace(), pieces(data, 64 * KIB), checkpointstore.MANIFEST_MEDIA_TYPE
    )
    assert await blobcollection.read_manifest(store, info) == set(chunks)


# --- collection ---------------------------------------------------------------------------------------


async def test_an_unreferenced_blob_goes_after_the_grace_period_and_its_object_with_the_last_row(
    storage: Storage, store: ObjectStore
) -> None:
    mine, theirs = unique_namespace(), unique_namespace()
    body = os.urandom(KIB)
    info = await blobs.put(storage, store, mine, pieces(body))
    await blobs.put(storage, store, theirs, pieces(body))  # the same object for both
    assert await collect_all(storage, store, mine) == []  # younger than the grace period
    await age(storage, mine, info.digest)
    assert await collect_all(storage, store, mine) == [blobcollection.Collected(info.digest, KIB, False)]
    assert await blobs.open(storage, mine, info.digest) is None
    assert object_count(store) == 1 and await blobs.open(storage, theirs, info.digest) is not None
    await age(storage, theirs, info.digest)
    assert await collect_all(storage, store, theirs) == [blobcollection.Collected(info.digest, KIB, True)]
    assert object_count(store) == 0
    assert await blobs.usage(storage, mine) == 0 and await blobs.usage(storage, theirs) == 0


async def test_uploads_and_collection_of_one_project_at_once_keep_its_usage_exact(
    storage: Storage, store: ObjectStore
) -> None:
    namespace = unique_namespace()
    old = [await blobs.put(storage, store, namespace, pieces(os.urandom(KIB))) for _ in range(8)]
    for info in old:
        await age(storage, namespace, info.digest)
    again = [os.urandom(KIB) for _ in range(8)]
    # Registrations and deletions of one project take the same locks in the same order: none waits forever.
    await asyncio.wait_for(
        asyncio.gather(
            collect_all(storage, store, namespace),
            *(blobs.put(storage, store, namespace, pieces(body), limits=Limits(quota=64 * KIB)) for body in again),
            *(blobs.put(storage, store, namespace, pieces(b"x" * KIB)) for _ in range(4)),
        ),
        timeout=30,
    )
    assert await blobs.usage(storage, namespace) == 9 * KIB  # the new ones and one "x" blob
    assert not [d for d in await blobs.usage_disagreements(storage) if d[0] == namespace]


async def test_a_refreshed_blob_is_kept_and_a_collected_one_is_not_reported_present(
    storage: Storage, store: ObjectStore
) -> None:
    namespace = unique_namespace()
    kept = await blobs.put(storage, store, namespace, pieces(os.urandom(KIB)))
    gone = await blobs.put(storage, store, namespace, pieces(os.urandom(KIB)))
    for info in (kept, gone):
        await age(storage, namespace, info.digest)
    assert await blobs.refresh(storage, namespace, [kept.digest], GRACE / 10) == {kept.digest}
    assert [c.digest for c in await collect_all(storage, store, namespace)] == [gone.digest]
    present = await blobs.refresh(storage, namespace, [kept.digest, gone.digest], GRACE / 10)
    assert present == {kept.digest}


async def test_bytes_uploaded_again_refresh_the_blob_the_collector_would_take(
    storage: Storage, store: ObjectStore
) -> None:
    namespace = unique_namespace()
    body = os.urandom(KIB)
    info = await blobs.put(storage, store, namespace, pieces(body))
    await age(storage, namespace, info.digest)
    await blobs.put(storage, store, namespace, pieces(body))  # an agent committing the same output again
    assert await collect_all(storage, store, namespace) == []
    assert await blobs.open(storage, namespace, info.digest) is not None


async def test_nothing_is_collected_once_the_boundary_has_passed(storage: Storage, store: ObjectStore) -> None:
    namespace = unique_namespace()
    info = await blobs.put(storage, store, namespace, pieces(os.urandom(KIB)))
    await age(storage, namespace, info.digest)
    past = datetime.now(UTC) - timedelta(seconds=1)
    assert await blobcollection.collect(storage, store, namespace, info.digest, GRACE, past) is None
    future = datetime.now(UTC) + timedelta(minutes=1)
    assert await blobcollection.collect(storage, store, namespace, info.digest, GRACE, future) is not None


async def test_the_sweep_takes_old_objects_no_row_names(storage: Storage, store: ObjectStore) -> None:
    named = await blobs.put(storage, store, unique_namespace(), pieces(os.urandom(KIB)))
    orphan = f"uploads/{uuid.uuid4()}"
    await store.put(orphan, pieces(os.urandom(KIB)))  # a server died before registering it
    assert {o.key for o in [o async for o in store.list("uploads/")]} == {
        orphan,
        blobs.object_key(named.upload_id),  # type: ignore[arg-type]
    }
    assert await blobcollection.sweep(storage, store, datetime.now(UTC) - timedelta(minutes=1)) == 0  # young
    assert await blobcollection.sweep(storage, store, datetime.now(UTC) + timedelta(minutes=1)) == 1
    assert [o.key async for o in store.list("uploads/")] == [blobs.object_key(named.upload_id)]  # type: ignore[arg-type]


async def test_an_upload_being_written_is_not_listed(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path / "blobs")
    started, release = asyncio.Event(), asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        yield b"first"
        started.set()
        await release.wait()
        yield b"last"

    writing = asyncio.create_task(store.put("uploads/in-flight", slow()))
    await started.wait()
    assert [o async for o in store.list("uploads/")] == []
    release.set()
    await writing
    [listed] = [o async for o in store.list("uploads/")]
    assert listed.key == "uploads/in-flight" and abs(listed.modified - datetime.now(UTC)) < timedelta(minutes=1)
