"""Write details a Kubernetes client relies on: generateName, dry runs, no-op updates, warnings."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.objects import job, jobs_path

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}


def test_generate_name(admin: httpx.Client, project: str) -> None:
    body = job("")
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "sweep-"
    names = set()
    for _ in range(3):
        response = admin.post(jobs_path(project), json=body)
        assert response.status_code == 201, response.text
        name = response.json()["metadata"]["name"]
        assert name.startswith("sweep-") and len(name) == len("sweep-") + 5
        names.add(name)
    assert len(names) == 3


def test_dry_run_update_and_delete_change_nothing(admin: httpx.Client, project: str) -> None:
    created = admin.post(jobs_path(project), json=job("dry-target")).json()
    patched = admin.patch(
        jobs_path(project, "dry-target"), json={"spec": {"backoffLimit": 1}}, headers=MERGE, params={"dryRun": "All"}
    )
    assert patched.status_code == 200 and patched.json()["spec"]["backoffLimit"] == 1
    deleted = admin.delete(jobs_path(project, "dry-target"), params={"dryRun": "All"})
    assert deleted.status_code == 200
    current = admin.get(jobs_path(project, "dry-target")).json()
    assert current["spec"]["backoffLimit"] == 6
    assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert admin.post(jobs_path(project), json=job("x"), params={"dryRun": "Some"}).status_code == 400


def test_an_update_that_changes_nothing_keeps_the_resource_version(admin: httpx.Client, project: str) -> None:
    created = admin.post(jobs_path(project), json=job("steady")).json()
    again = admin.put(jobs_path(project, "steady"), json=created)
    assert again.status_code == 200
    assert again.json()["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


def test_warnings_come_in_headers(admin: httpx.Client, project: str) -> None:
    body = job("short-ttl", ttlSecondsAfterFinished=60)
    response = admin.post(jobs_path(project), json=body)
    assert response.status_code == 201, response.text
    warnings = response.headers.get_list("warning")
    assert warnings and all(w.startswith('299 - "') for w in warnings)
    assert any("ttlSecondsAfterFinished" in w for w in warnings)


def test_status_on_the_main_path_is_ignored_and_spec_on_status_path_too(admin: httpx.Client, project: str) -> None:
    created = admin.post(jobs_path(project), json=job("split")).json()
    # The server's own status: Pending with the admission estimate, nothing the client sent.
    assert set(created["status"]) == {"phase", "estimate"} and created["status"]["phase"] == "Pending"
    created["status"] = {"phase": "Succeeded"}
    created["spec"]["backoffLimit"] = 2
    after = admin.put(jobs_path(project, "split"), json=created).json()
    assert after["status"]["phase"] == "Pending" and after["spec"]["backoffLimit"] == 2
    bad_status = admin.patch(
        jobs_path(project, "split") + "/status", json={"status": {"phase": "Exploded"}}, headers=MERGE
    )
    assert bad_status.status_code == 422
    assert bad_status.json()["details"]["causes"][0]["field"] == "status.phase"


async def test_concurrent_merge_patches_without_a_resource_version_all_land(
    admin: httpx.Client, admin_async: httpx.AsyncClient, project: str
) -> None:
    assert admin.post(jobs_path(project), json=job("contended")).status_code == 201
    merge = {"Content-Type": "application/merge-patch+json"}

    async def annotate(i: int) -> int:
        body = {"metadata": {"annotations": {f"example.com/writer-{i}": "yes"}}}
        response = await admin_async.patch(jobs_path(project, "contended"), json=body, headers=merge)
        return response.status_code

    codes = await asyncio.gather(*(annotate(i) for i in range(24)))
    assert codes == [200] * 24, "a patch without a resourceVersion is re-applied on a conflict, never refused"
    annotations = admin.get(jobs_path(project, "contended")).json()["metadata"]["annotations"]
    assert {f"example.com/writer-{i}" for i in range(24)} <= set(annotations)
    stale = {"metadata": {"resourceVersion": "1", "annotations": {"x": "y"}}}
    assert admin.patch(jobs_path(project, "contended"), json=stale, headers=merge).status_code == 409
