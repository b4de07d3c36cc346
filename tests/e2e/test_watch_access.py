"""A watch ends within seconds once its caller may no longer read what it streams (ADR 0035).

kube-apiserver authorizes a watch once; here a member removed from a project keeps no window into it
until the watch times out."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import make_project
from tests.support.cluster import Cluster
from tests.support.objects import API, job, jobs_path

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}


def watch_lines(cluster: Cluster, user: str, path: str, seconds: float) -> tuple[list[dict[str, Any]], float]:
    """The events of a watch read until it ends (or ``seconds`` pass), and how long it lasted."""
    started = time.monotonic()
    lines: list[dict[str, Any]] = []
    with (
        cluster.client(user) as client,
        client.stream("GET", path, params={"watch": "true", "timeoutSeconds": str(int(seconds))}) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.strip():
                lines.append(orjson.loads(line))
    return lines, time.monotonic() - started


def remove_member(admin: httpx.Client, project: str, user: str) -> None:
    current = admin.get(f"{API}/projects/{project}").json()
    members = [m for m in current["spec"]["members"] if m["name"] != user]
    assert (
        admin.patch(f"{API}/projects/{project}", json={"spec": {"members": members}}, headers=MERGE).status_code == 200
    )


@pytest.mark.parametrize("scope", ["project", "every-project"])
def test_a_removed_member_s_watch_ends(cluster: Cluster, admin: httpx.Client, scope: str) -> None:
    project = make_project(admin, [{"name": "bob", "role": "Viewer"}, {"name": "carol", "role": "Viewer"}])
    assert admin.post(jobs_path(project), json=job("seen")).status_code == 201
    path = jobs_path(project) if scope == "project" else f"{API}/jobs"
    result: dict[str, Any] = {}

    def run() -> None:
        result["bob"] = watch_lines(cluster, "bob", path, 60)

    watcher = threading.Thread(target=run)
    watcher.start()
    time.sleep(1.5)
    removed_at = time.monotonic()
    remove_member(admin, project, "bob")
    watcher.join(30)
    assert not watcher.is_alive(), "the watch went on after its caller left the project"
    events, _ = result["bob"]
    assert events[-1]["type"] == "ERROR"
    status = events[-1]["object"]
    assert status["code"] == 403 and "is no longer a member" in status["message"]
    assert time.monotonic() - removed_at < 15


def test_a_member_s_watch_goes_on_past_the_checks(cluster: Cluster, admin: httpx.Client) -> None:
    project = make_project(admin, [{"name": "carol", "role": "Viewer"}])
    events, lasted = watch_lines(cluster, "carol", jobs_path(project), 6)
    assert lasted >= 5.5 and all(e["type"] != "ERROR" for e in events)
