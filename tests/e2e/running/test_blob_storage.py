"""A deleted Job's outputs end to end (ADR 0034): billed to the Job while it exists (ADR 0023), then to its
project until they are collected, never both for the same hour, and nothing once collected.

The cluster here is its own (its API server bills a project's storage hour every 2 s, as the controllers
bill a Job's): the shared job-running cluster keeps the default hour, so that its tests' ledgers never see
a project's storage charges.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal

import asyncpg
import pytest

from nodus.apimachinery import units
from nodus.apimachinery.sealing import Keyring
from nodus.storage import database
from tests.e2e.running.conftest import Running, price_book_text
from tests.e2e.running.test_billing import statement
from tests.e2e.running.test_storage import KEPT, STORAGE_FREE_BYTES, delete, keep_a_file, wait_gone, wait_verified
from tests.support import cluster as clusters
from tests.support import controllers
from tests.support.objects import API

pytestmark = pytest.mark.e2e

HOUR = timedelta(seconds=2)  # the API server's and the controllers' --storage-charge-interval


def hourly(size: int) -> Decimal:
    return (Decimal(size) * 10 / 2**30).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)


@pytest.fixture(scope="module")
def blobs_billed(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    url = asyncio.run(database.create_database(database_server))
    database.migrate(url)
    directory = tmp_path_factory.mktemp("blobs-billed")
    keys = directory / "secret-keys"
    Keyring.generate(keys)
    book = directory / "pricebook.yaml"
    book.write_text(price_book_text())
    extra = ("--watch-bookmark-interval", "1s", "--secret-key-file", str(keys), "--funded-window", "8s")
    extra += ("--price-book", str(book), "--storage-charge-interval", "2s", "--blob-collection-interval", "300ms")
    cluster = clusters.start(directory, url, extra_args=extra, migrate=False)
    leader = controllers.start(cluster, directory, "first")
    running = Running(cluster, leader, directory)
    try:
        controllers.wait_for_leader(cluster, "first")
        yield running
    finally:
        leader.stop()
        controllers.kill_leftover_agents(directory)
        cluster.stop()
        asyncio.run(database.drop_database(url))


def storage_lines(running: Running, project: str, subject: str) -> list[dict[str, str]]:
    return [row for row in statement(running, project) if row["segment"] == "Storage" and row["subject"] == subject]


def age(running: Running, project: str, digest: str) -> None:
    """Make the blob look as if nothing had named it for a day (the grace period is the default 24h)."""

    async def update() -> None:
        conn = await asyncpg.connect(database.asyncpg_dsn(running.cluster.database_url))
        try:
            await conn.execute(
                "UPDATE blobs SET referenced_at = now() - interval '25 hours' WHERE namespace = $1 AND digest = $2",
                project,
                digest,
            )
        finally:
            await conn.close()

    asyncio.run(update())


@pytest.mark.slow  # about 20 s of hourly charges (slow tier)
def test_a_deleted_jobs_outputs_are_charged_to_its_project_until_collected_never_twice(blobs_billed: Running) -> None:
    running = blobs_billed
    project = running.project(credit="10")
    job = keep_a_file(running, project, "kept")
    job_uid = job["metadata"]["uid"]
    [output] = job["status"]["outputs"]
    digest = f"sha256:{output['sha256']}"
    with running.client() as client:
        meta = client.get(f"{API}/projects/{project}").json()["metadata"]
    project_uid, origin = meta["uid"], units.parse_time(meta["creationTimestamp"])

    # While the Job exists it is charged for its output above its free inclusion, hour by hour.
    running.wait_for("two of the Job's hours", lambda: len(storage_lines(running, project, job_uid)) >= 2)
    delete(running, project, "kept")
    wait_gone(running, project, "kept")
    job_hours = storage_lines(running, project, job_uid)
    assert {Decimal(row["amountUSD"]) for row in job_hours} == {hourly(KEPT - STORAGE_FREE_BYTES)}

    # Once it is gone, its output is the project's: charged whole (a project has no free inclusion) by the hour.
    lines = running.wait_for(
        "two of the project's hours", lambda: (r := storage_lines(running, project, project_uid))[1:] and r
    )
    for row in lines:
        assert Decimal(row["amountUSD"]) == hourly(KEPT) and row["key"].startswith(f"storage:{project_uid}:")

    # No instant is billed twice: no hour of the project ends while the Job was billed for the output.
    start = units.parse_time(output["committedTime"])
    billed_until = start + HOUR * len(job_hours)
    for row in lines:
        hour = int(row["key"].rsplit(":", 1)[1])
        end = origin + HOUR * (hour + 1)
        assert not start <= end < billed_until, (row, start, billed_until)

    # Collected (it has been unreferenced for the grace period): its object goes, and so do the charges.
    with running.client() as client:
        assert client.get(f"{API}/namespaces/{project}/blobs/{digest}").status_code == 200
    age(running, project, digest)

    def collected() -> bool:
        with running.client() as client:
            return client.get(f"{API}/namespaces/{project}/blobs/{digest}").status_code == 404

    running.wait_for("the output collected", collected)
    uploads = running.directory / "blobs" / "uploads"
    assert not any(uploads.iterdir()), "its bytes are gone from the object store"
    charged = len(storage_lines(running, project, project_uid))
    time.sleep(math.ceil(3 * HOUR.total_seconds()))
    assert len(storage_lines(running, project, project_uid)) == charged
    with running.client() as client:
        shown = client.get(f"{API}/projects/{project}").json()["status"]["storage"]
    assert shown["bytes"] == 0 and Decimal(shown["chargedUSD"]) == charged * hourly(KEPT)
    wait_verified(running)
