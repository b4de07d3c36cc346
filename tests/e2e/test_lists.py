"""Chunked lists and optimistic concurrency over HTTP."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest

from tests.support.objects import job, jobs_path

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}


async def test_chunked_list_of_400_with_random_limits(admin_async: httpx.AsyncClient, project: str) -> None:
    semaphore = asyncio.Semaphore(16)

    async def create(i: int) -> None:
        async with semaphore:
            response = await admin_async.post(jobs_path(project), json=job(f"item-{i:04d}", labels={"batch": "400"}))
            assert response.status_code == 201, response.text

    await asyncio.gather(*(create(i) for i in range(400)))
    generator = random.Random(400)
    seen: list[str] = []
    versions: set[str] = set()
    token = ""
    # Writes between pages must not show up in later pages (one snapshot).
    while True:
        params = {"limit": generator.randint(1, 60), "labelSelector": "batch=400"}
        if token:
            params["continue"] = token
        page = (await admin_async.get(jobs_path(project), params=params)).json()
        versions.add(page["metadata"]["resourceVersion"])
        seen += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue", "")
        if not token:
            assert "remainingItemCount" not in page["metadata"]
            break
        assert page["metadata"]["remainingItemCount"] == 400 - len(seen)
        await admin_async.post(jobs_path(project), json=job(f"item-{len(seen):04d}-late", labels={"batch": "400"}))
    assert len(versions) == 1, "pages came from different snapshots"
    assert seen == [f"item-{i:04d}" for i in range(400)], "gaps or duplicates across pages"


async def test_32_concurrent_read_modify_write_clients_lose_no_update(
    admin_async: httpx.AsyncClient, project: str
) -> None:
    created = await admin_async.post(jobs_path(project), json=job("counter"))
    assert created.status_code == 201
    conflicts = 0

    async def increment(client_id: int) -> None:
        nonlocal conflicts
        for _ in range(5):
            while True:
                current = (await admin_async.get(jobs_path(project, "counter"))).json()
                annotations = current["metadata"].setdefault("annotations", {})
                annotations["count"] = str(int(annotations.get("count", "0")) + 1)
                annotations[f"client-{client_id}"] = "seen"
                response = await admin_async.put(jobs_path(project, "counter"), json=current)
                if response.status_code == 409:
                    assert response.json()["reason"] == "Conflict"
                    conflicts += 1
                    continue
                assert response.status_code == 200, response.text
                break

    await asyncio.gather(*(increment(i) for i in range(32)))
    final = (await admin_async.get(jobs_path(project, "counter"))).json()
    assert final["metadata"]["annotations"]["count"] == str(32 * 5)
    assert all(final["metadata"]["annotations"][f"client-{i}"] == "seen" for i in range(32))
    assert conflicts > 0, "the clients never raced; the test proves nothing"


def test_update_with_stale_resource_version_is_409(admin: httpx.Client, project: str) -> None:
    created = admin.post(jobs_path(project), json=job("stale")).json()
    admin.patch(
        jobs_path(project, "stale"), json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE
    ).raise_for_status()
    response = admin.put(jobs_path(project, "stale"), json=created)
    assert response.status_code == 409
    body = response.json()
    assert body["reason"] == "Conflict" and "the object has been modified" in body["message"]
    assert body["fix"] and body["requestId"] == response.headers["x-request-id"]
