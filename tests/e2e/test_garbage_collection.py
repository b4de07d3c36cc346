"""ownerReferences and deletion propagation (background, foreground, orphan), and project deletion."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from tests.conftest import make_project
from tests.support.objects import API, job, jobs_path

pytestmark = pytest.mark.e2e


def _eventually(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def _owned(admin: httpx.Client, project: str, name: str, owner: dict[str, object], block: bool = False) -> None:
    body = job(name)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "nodus.dev/v1",
            "kind": "Job",
            "name": owner["metadata"]["name"],  # type: ignore[index]
            "uid": owner["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": block,  # type: ignore[index]
        }
    ]
    admin.post(jobs_path(project), json=body).raise_for_status()


def _exists(admin: httpx.Client, project: str, name: str) -> bool:
    return admin.get(jobs_path(project, name)).status_code == 200


def test_background_deletion_removes_dependents(admin: httpx.Client, project: str) -> None:
    owner = admin.post(jobs_path(project), json=job("owner-bg")).json()
    _owned(admin, project, "child-bg", owner)
    assert admin.delete(jobs_path(project, "owner-bg")).status_code == 200
    _eventually(lambda: not _exists(admin, project, "child-bg"))


def test_foreground_deletion_waits_for_blocking_dependents(admin: httpx.Client, project: str) -> None:
    owner = admin.post(jobs_path(project), json=job("owner-fg")).json()
    _owned(admin, project, "child-fg", owner, block=True)
    child = admin.get(jobs_path(project, "child-fg")).json()
    admin.patch(
        jobs_path(project, "child-fg"),
        json={"metadata": {"finalizers": ["example.com/hold"]}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()
    response = admin.delete(jobs_path(project, "owner-fg"), params={"propagationPolicy": "Foreground"})
    assert response.status_code == 202
    assert "foregroundDeletion" in response.json()["metadata"]["finalizers"]
    _eventually(lambda: bool(admin.get(jobs_path(project, "child-fg")).json()["metadata"].get("deletionTimestamp")))
    time.sleep(0.5)
    assert _exists(admin, project, "owner-fg"), "the owner went before its blocking dependent"
    admin.patch(
        jobs_path(project, "child-fg"),
        json={"metadata": {"finalizers": None}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()
    _eventually(lambda: not _exists(admin, project, "child-fg") and not _exists(admin, project, "owner-fg"))
    assert child["metadata"]["uid"]


def test_orphan_deletion_keeps_dependents(admin: httpx.Client, project: str) -> None:
    owner = admin.post(jobs_path(project), json=job("owner-or")).json()
    _owned(admin, project, "child-or", owner)
    admin.delete(jobs_path(project, "owner-or"), params={"propagationPolicy": "Orphan"})
    _eventually(lambda: not _exists(admin, project, "owner-or"))
    child = admin.get(jobs_path(project, "child-or")).json()
    assert "ownerReferences" not in child["metadata"]


def test_finalizers_hold_deletion_until_removed(admin: httpx.Client, project: str) -> None:
    body = job("held")
    body["metadata"]["finalizers"] = ["example.com/cleanup"]
    admin.post(jobs_path(project), json=body).raise_for_status()
    response = admin.delete(jobs_path(project, "held"), params={"gracePeriodSeconds": "30"})
    assert response.status_code == 202
    marked = response.json()["metadata"]
    assert marked["deletionTimestamp"] and marked["deletionGracePeriodSeconds"] == 30
    refused = admin.patch(
        jobs_path(project, "held"),
        json={"metadata": {"finalizers": ["example.com/cleanup", "example.com/more"]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert refused.status_code == 422
    admin.patch(
        jobs_path(project, "held"),
        json={"metadata": {"finalizers": []}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()
    assert not _exists(admin, project, "held")


def test_deleting_a_project_deletes_what_it_holds(admin: httpx.Client) -> None:
    doomed = make_project(admin)
    for i in range(3):
        admin.post(jobs_path(doomed), json=job(f"j{i}")).raise_for_status()
    response = admin.delete(f"{API}/projects/{doomed}")
    assert response.status_code == 202
    refused = admin.post(jobs_path(doomed), json=job("late"))
    assert refused.status_code == 403 and "being deleted" in refused.json()["message"]
    _eventually(lambda: admin.get(f"{API}/projects/{doomed}").status_code == 404)
    assert admin.get(jobs_path(doomed)).json()["items"] == []
