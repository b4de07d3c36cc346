"""Blob collection and a project's storage charges through a real API server (ADR 0034).

The server here collects every 200 ms, keeps a blob nothing names for 4 s, and bills an hour of storage
every 2 s (as an hour) at the running cluster's test price (10 USD per GiB-hour), so that a test sees a
blob charged hour after hour and then collected. Where a test needs a blob older than the grace period at
a moment it chooses, it ages the blob's row in the database, as a clock moving on would.
"""

from __future__ import annotations

import asyncio
import csv
import io
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from nodus.storage import database
from tests.conftest import make_project
from tests.e2e.running.conftest import price_book_text
from tests.e2e.test_blobs import blobs_path, digest_of, upload, volumes_path
from tests.support import cluster as clusters
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # long end-to-end: make test-slow (CI runs both tiers)

API = "/apis/nodus.dev/v1"
MIB = 2**20
GRACE = 4.0
CHUNK = "application/vnd.nodus.checkpoint.chunk"
MANIFEST = "application/vnd.nodus.checkpoint.manifest+json"


def hourly(size: int) -> Decimal:
    """An hour of ``size`` bytes at the test price, 10 USD per GiB-hour."""
    return (Decimal(size) * 10 / 2**30).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)


@pytest.fixture(scope="module")
def collecting(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("collecting")
    book = directory / "pricebook.yaml"
    book.write_text(price_book_text())
    flags = (
        *("--blob-grace-period", f"{GRACE:g}s", "--blob-collection-interval", "200ms"),
        *("--storage-charge-interval", "2s", "--price-book", str(book)),
    )
    with clusters.on_own_database(database_server, directory, extra_args=flags) as cluster:
        yield cluster


@pytest.fixture
def admin(collecting: Cluster) -> Iterator[httpx.Client]:
    with collecting.client("admin") as client:
        yield client


def wait_for(what: str, check: Callable[[], Any], cluster: Cluster, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what} (last: {last!r})\n{cluster.logs()[-5000:]}")


def objects(cluster: Cluster) -> set[str]:
    """The names of the objects in the blob store."""
    uploads = cluster.directory / "blobs" / "uploads"
    return {p.name for p in uploads.iterdir()} if uploads.exists() else set()


def upload_id(cluster: Cluster, project: str, digest: str) -> str:
    async def query() -> str:
        conn = await asyncpg.connect(database.asyncpg_dsn(cluster.database_url))
        try:
            return str(
                await conn.fetchval("SELECT upload_id FROM blobs WHERE namespace = $1 AND digest = $2", project, digest)
            )
        finally:
            await conn.close()

    return asyncio.run(query())


def age(cluster: Cluster, project: str, digest: str, seconds: float = 3600) -> None:
    """Make the blob look as if nothing had named it for ``seconds``."""

    async def update() -> None:
        conn = await asyncpg.connect(database.asyncpg_dsn(cluster.database_url))
        try:
            await conn.execute(
                "UPDATE blobs SET referenced_at = now() - make_interval(secs => $3) WHERE namespace = $1 "
                "AND digest = $2",
                project,
                digest,
                seconds,
            )
        finally:
            await conn.close()

    asyncio.run(update())


def uid(admin: httpx.Client, project: str) -> str:
    return str(admin.get(f"{API}/projects/{project}").json()["metadata"]["uid"])


def ledger(admin: httpx.Client, project: str) -> dict[str, Any]:
    """The ledger's storage charges of the project itself (subject: its uid)."""
    response = admin.get(f"{API}/namespaces/{project}/ledger/storage/{uid(admin, project)}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"NODUS_DATABASE_URL": cluster.database_url, "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "nodus", "billing", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def storage_lines(cluster: Cluster, project: str) -> list[dict[str, str]]:
    result = cli(cluster, "statement", project, "--csv")
    assert result.returncode == 0, result.stderr
    return [row for row in csv.DictReader(io.StringIO(result.stdout)) if row["segment"] == "Storage"]


def verified(cluster: Cluster) -> None:
    deadline = time.monotonic() + 30
    while (checked := cli(cluster, "verify")).returncode != 0:
        if time.monotonic() > deadline:
            pytest.fail(f"nodus billing verify found breaches:\n{checked.stdout}{checked.stderr}")
        time.sleep(0.5)


def test_a_blob_nobody_names_is_charged_by_the_hour_then_collected_while_another_projects_copy_stays(
    collecting: Cluster, admin: httpx.Client
) -> None:
    body = os.urandom(MIB)
    digest = digest_of(body)
    keeper = make_project(admin, credit="10")
    volume = {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": "kept"}, "spec": {}}
    assert admin.post(volumes_path(keeper), json=volume).status_code == 201
    revision = admin.post(volumes_path(keeper, "kept") + "/revisions", content=body)
    assert revision.status_code == 201, revision.text
    project = make_project(admin, credit="10")
    assert upload(admin, project, body).status_code == 201  # the same bytes: one object for both projects
    shared = upload_id(collecting, keeper, digest)
    assert upload_id(collecting, project, digest) == shared and shared in objects(collecting)

    # Charged by the hour while it is kept: each hour one hour of its bytes, keyed by the project and hour.
    wait_for("an hour of storage charged", lambda: ledger(admin, project)["hours"] >= 1, collecting)
    # Then, nothing having named it for the grace period, the project's copy is collected.
    wait_for("the blob collected", lambda: admin.get(blobs_path(project, digest)).status_code == 404, collecting)
    charged = ledger(admin, project)
    lines = storage_lines(collecting, project)
    project_uid = uid(admin, project)
    assert len(lines) == charged["hours"] >= 1
    for line in lines:
        assert (line["kind"], line["subject"], line["seconds"]) == ("Charge", project_uid, "3600")
        assert line["key"].startswith(f"storage:{project_uid}:") and Decimal(line["amountUSD"]) == hourly(MIB)
    assert Decimal(charged["chargedUSD"]) == len(lines) * hourly(MIB)

    # The other project names its copy (a Volume revision): the bytes stay, for it alone.
    assert admin.get(blobs_path(keeper, digest)).content == body
    assert shared in objects(collecting)
    # No more hours are charged for bytes the project no longer keeps.
    time.sleep(3 * 2.2)
    assert ledger(admin, project)["hours"] == len(lines)

    def shown() -> dict[str, Any] | None:
        storage = (admin.get(f"{API}/projects/{project}").json().get("status") or {}).get("storage") or {}
        return storage if storage.get("bytes") == 0 and storage.get("chargedUSD") == charged["chargedUSD"] else None

    assert wait_for("the project's status.storage", shown, collecting)["billedBytes"] == 0

    # Once the Volume is gone, nothing names the bytes: the last row goes, and its object with it.
    assert admin.delete(volumes_path(keeper, "kept")).status_code in (200, 202)
    wait_for("the other copy collected", lambda: admin.get(blobs_path(keeper, digest)).status_code == 404, collecting)
    wait_for("the object deleted", lambda: shared not in objects(collecting), collecting)
    verified(collecting)


def test_an_object_no_blob_names_is_swept_once_older_than_the_grace_period(collecting: Cluster) -> None:
    uploads = collecting.directory / "blobs" / "uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    # What a server that died between writing an object and registering it leaves behind.
    stale, fresh = uploads / str(uuid.uuid4()), uploads / str(uuid.uuid4())
    stale.write_bytes(os.urandom(1024))
    fresh.write_bytes(os.urandom(1024))
    an_hour_ago = time.time() - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))
    wait_for("the stale object swept", lambda: not stale.exists(), collecting)
    assert fresh.exists()  # it could still be an upload about to register
    wait_for("the fresh object swept after the grace period", lambda: not fresh.exists(), collecting)


def test_an_upload_slower_than_the_grace_period_is_kept_then_collected(
    collecting: Cluster, admin: httpx.Client
) -> None:
    project = make_project(admin)
    pieces = [os.urandom(16 * 1024) for _ in range(12)]
    body = b"".join(pieces)

    def slowly() -> Iterator[bytes]:
        for piece in pieces:
            time.sleep(GRACE / 8)  # 6 s in all: longer than the grace period, sweeps included
            yield piece

    created = admin.post(blobs_path(project), content=slowly(), params={"digest": digest_of(body)})
    assert created.status_code == 201, created.text
    assert admin.get(blobs_path(project, digest_of(body))).content == body
    wait_for(
        "the blob collected", lambda: admin.get(blobs_path(project, digest_of(body))).status_code == 404, collecting
    )


def manifest(*chunks: str) -> bytes:
    """A checkpoint manifest as the agent writes one, naming ``chunks`` as the pieces of one file."""
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "CheckpointManifest",
        "format": "Snapshot",
        "seq": 1,
        "paths": ["/nodus/state"],
        "chunkSize": 4 * MIB,
        "created": "2026-12-01T00:00:00+00:00",
        "labels": {},
        "entries": [
            {"path": "/nodus/state", "type": "dir", "mode": 0o755},
            {"path": "/nodus/state/model.bin", "type": "file", "mode": 0o644, "size": 4 * MIB, "chunks": list(chunks)},
        ],
    }
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def test_a_checkpoint_manifest_keeps_the_chunks_it_names_and_is_refused_if_one_is_gone(
    collecting: Cluster, admin: httpx.Client
) -> None:
    project = make_project(admin)
    kept, lost = os.urandom(1024), os.urandom(1024)
    for chunk in (kept, lost):
        assert upload(admin, project, chunk, CHUNK, digest=digest_of(chunk)).status_code == 201
    # Nothing has named the chunk for most of the grace period when the agent, which stored it earlier (or
    # found it with HEAD), commits a checkpoint naming it without sending it again: the manifest's upload
    # marks the chunk referenced, so the collector keeps it past the end of its grace period.
    age(collecting, project, digest_of(kept), GRACE - 1.5)
    assert upload(admin, project, manifest(digest_of(kept)), MANIFEST).status_code == 201
    time.sleep(2.0)
    assert admin.get(blobs_path(project, digest_of(kept))).content == kept
    age(collecting, project, digest_of(lost))
    wait_for(
        "the other chunk collected",
        lambda: admin.get(blobs_path(project, digest_of(lost))).status_code == 404,
        collecting,
    )

    # A manifest naming a chunk the project no longer holds is never committed: the checkpoint could not be
    # restored.
    refused = upload(admin, project, manifest(digest_of(kept), digest_of(lost)), MANIFEST)
    assert refused.status_code == 422, refused.text
    assert refused.json()["reason"] == "Invalid" and digest_of(lost) in refused.json()["message"]
    assert upload(admin, project, lost, CHUNK).status_code == 201
    assert upload(admin, project, manifest(digest_of(kept), digest_of(lost)), MANIFEST).status_code == 201
