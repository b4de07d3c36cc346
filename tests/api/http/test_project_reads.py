"""Projects served from memory (ADR 0057), through real API server processes: what a caller writes to a Project
counts on its very next request, a Project another server created is found at once and its membership arrives
within moments, and a project on its way out refuses new contents."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from nodus.apimachinery.causes import PROJECT_TERMINATING
from tests.conftest import make_project
from tests.support import cluster as clusters
from tests.support.cluster import Cluster
from tests.support.objects import API

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture(scope="module")
def second(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Another API server process on the session cluster's database, as behind a load balancer."""
    running = clusters.start(tmp_path_factory.mktemp("second"), cluster.database_url, migrate=False)
    try:
        yield running
    finally:
        running.stop()


def volume() -> dict[str, Any]:
    return {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": f"v-{uuid.uuid4().hex[:8]}"}}


def create_volume(client: httpx.Client, project: str) -> httpx.Response:
    return client.post(f"{API}/namespaces/{project}/volumes", json=volume())


def set_members(admin: httpx.Client, project: str, *editors: str) -> None:
    members = [{"name": name, "role": "Editor"} for name in editors]
    response = admin.patch(f"{API}/projects/{project}", json={"spec": {"members": members}}, headers=MERGE)
    assert response.status_code == 200, response.text


def readable(client: httpx.Client) -> set[str]:
    response = client.get(f"{API}/projects")
    assert response.status_code == 200, response.text
    return {item["metadata"]["name"] for item in response.json()["items"]}


def eventually(condition: Callable[[], bool], timeout: float = 10.0) -> float:
    """Seconds until ``condition`` held (polled every 10 ms)."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "timed out"
        time.sleep(0.01)
    return time.monotonic() - started


def test_a_membership_change_counts_on_the_very_next_request(cluster: Cluster, admin: httpx.Client) -> None:
    project = make_project(admin, [{"name": "bob", "role": "Editor"}], credit=None)
    with cluster.client("bob") as bob:
        for _ in range(5):
            set_members(admin, project)
            refused = create_volume(bob, project)
            assert refused.status_code == 403, refused.text
            assert project not in readable(bob)
            set_members(admin, project, "bob")
            assert create_volume(bob, project).status_code == 201
            assert project in readable(bob)


def test_a_project_is_used_right_after_it_is_created(cluster: Cluster, admin: httpx.Client) -> None:
    with cluster.client("bob") as bob:
        for _ in range(5):
            project = make_project(admin, [{"name": "bob", "role": "Editor"}], credit=None)
            created = create_volume(bob, project)
            assert created.status_code == 201, created.text
            assert project in readable(bob)


def test_a_project_another_server_created_is_seen_here(cluster: Cluster, second: Cluster) -> None:
    with second.client("admin") as elsewhere, cluster.client("bob") as bob:
        project = make_project(elsewhere, [{"name": "bob", "role": "Editor"}], credit=None)
        # Not yet known here, perhaps: the database is asked before a miss is an answer.
        created = create_volume(bob, project)
        assert created.status_code == 201, created.text
        # Membership arrives through the watch: eventually (milliseconds, the NOTIFY), as in an informer.
        eventually(lambda: project in readable(bob))
        set_members(elsewhere, project)
        eventually(lambda: create_volume(bob, project).status_code == 403)
        assert project not in readable(bob)


def test_a_project_being_deleted_refuses_new_contents(cluster: Cluster, admin: httpx.Client) -> None:
    project = make_project(admin, [{"name": "bob", "role": "Editor"}], credit=None)
    hold = {"metadata": {"finalizers": ["example.com/hold"]}}
    assert admin.patch(f"{API}/projects/{project}", json=hold, headers=MERGE).status_code == 200
    assert admin.delete(f"{API}/projects/{project}").status_code in (200, 202)
    with cluster.client("bob") as bob:
        refused = create_volume(bob, project)
    assert refused.status_code == 403, refused.text
    assert refused.json()["details"]["causes"][0]["reason"] == PROJECT_TERMINATING

    def only_ours_left() -> bool:
        return admin.get(f"{API}/projects/{project}").json()["metadata"].get("finalizers") == ["example.com/hold"]

    eventually(only_ours_left, timeout=30)  # the garbage collector lifts Nodus's own finalizer
    let_go = {"metadata": {"finalizers": None}}
    assert admin.patch(f"{API}/projects/{project}", json=let_go, headers=MERGE).status_code == 200
    gone = create_volume(admin, project)
    assert gone.status_code == 404, gone.text
    assert gone.json()["details"]["kind"] == "projects"
