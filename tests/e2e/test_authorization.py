"""Projects isolate their members: no verb lets a user see or touch another project's objects."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.conftest import make_project
from tests.support.cluster import Cluster
from tests.support.objects import API, job, jobs_path
from tests.support.watching import events

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}


def test_no_token_is_401(cluster: Cluster, project: str) -> None:
    with httpx.Client(base_url=cluster.url, verify=cluster.tls()) as anonymous:
        response = anonymous.get(jobs_path(project))
    assert response.status_code == 401
    assert response.json()["reason"] == "Unauthorized"
    with httpx.Client(base_url=cluster.url, verify=cluster.tls(), headers={"Authorization": "Bearer nope"}) as bad:
        assert bad.get(jobs_path(project)).status_code == 401


def test_roles(cluster: Cluster, admin: httpx.Client, project: str) -> None:
    admin.post(jobs_path(project), json=job("shared")).raise_for_status()
    with cluster.client("carol") as viewer, cluster.client("bob") as editor, cluster.client("alice") as owner:
        assert viewer.get(jobs_path(project, "shared")).status_code == 200
        assert viewer.get(jobs_path(project)).status_code == 200
        denied = viewer.post(jobs_path(project), json=job("by-viewer"))
        assert denied.status_code == 403
        body = denied.json()
        assert body["reason"] == "Forbidden"
        assert (
            'User "carol" cannot create resource "jobs"' in body["message"]
            and f'project "{project}"' in body["message"]
        )
        assert "Editor" in body["fix"]
        assert editor.post(jobs_path(project), json=job("by-editor")).status_code == 201
        assert editor.delete(jobs_path(project, "by-editor")).status_code == 200
        project_path = f"{API}/projects/{project}"
        members = {
            "spec": {
                "members": [
                    {"name": "alice", "role": "Owner"},
                    {"name": "bob", "role": "Editor"},
                    {"name": "carol", "role": "Editor"},
                ]
            }
        }
        assert editor.patch(project_path, json=members, headers=MERGE).status_code == 403
        assert owner.patch(project_path, json=members, headers=MERGE).status_code == 200
        assert viewer.post(jobs_path(project), json=job("by-carol-now-editor")).status_code == 201
        assert owner.delete(project_path).status_code == 403  # only administrators delete projects
        status = editor.put(
            jobs_path(project, "shared") + "/status", json=editor.get(jobs_path(project, "shared")).json()
        )
        assert status.status_code == 403  # status is written by controllers


async def test_outsider_cannot_read_list_watch_or_change(cluster: Cluster, admin: httpx.Client, project: str) -> None:
    admin.post(jobs_path(project), json=job("secret-plan", labels={"team": "x"})).raise_for_status()
    own = make_project(admin, [{"name": "dave", "role": "Owner"}])
    admin.post(jobs_path(own), json=job("daves")).raise_for_status()
    with cluster.client("dave") as dave:
        target = jobs_path(project, "secret-plan")
        attempts = {
            "get": dave.get(target),
            "list": dave.get(jobs_path(project)),
            "watch": dave.get(jobs_path(project), params={"watch": "true", "timeoutSeconds": "1"}),
            "create": dave.post(jobs_path(project), json=job("intruder")),
            "update": dave.put(target, json=admin.get(target).json()),
            "patch": dave.patch(target, json={"spec": {"backoffLimit": 1}}, headers=MERGE),
            "delete": dave.delete(target),
            "deletecollection": dave.delete(jobs_path(project)),
            "status": dave.get(target + "/status"),
            "project": dave.get(f"{API}/projects/{project}"),
        }
        for verb, response in attempts.items():
            assert response.status_code == 403, (verb, response.status_code, response.text)
            assert "secret-plan" not in response.text, verb
        everything = dave.get(f"{API}/jobs").json()
        assert {item["metadata"]["namespace"] for item in everything["items"]} == {own}
        projects = dave.get(f"{API}/projects").json()
        assert [p["metadata"]["name"] for p in projects["items"]] == [own]
    assert admin.get(target).json()["spec"]["backoffLimit"] == 6

    async with cluster.async_client("dave") as dave_async:
        start = (await dave_async.get(f"{API}/jobs")).json()["metadata"]["resourceVersion"]
        seen: list[str] = []

        async def watch_all() -> None:
            async for event in events(dave_async, f"{API}/jobs", resourceVersion=start, timeoutSeconds=3):
                if event["type"] != "BOOKMARK":
                    seen.append(event["object"]["metadata"]["namespace"])

        watching = asyncio.create_task(watch_all())
        await asyncio.sleep(0.3)
        admin.post(jobs_path(project), json=job("unseen")).raise_for_status()
        admin.post(jobs_path(own), json=job("seen")).raise_for_status()
        await asyncio.wait_for(watching, 15)
    assert seen == [own]
