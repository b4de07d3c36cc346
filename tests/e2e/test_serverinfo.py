"""``GET /serverinfo``: the default image ``nodus run`` uses, to authenticated callers only; the real server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support import cluster as clusters
from tests.support.objects import API

pytestmark = pytest.mark.e2e

IMAGE = "registry.example:5000/team/python:3.11"


def test_serverinfo_needs_credentials(cluster: clusters.Cluster) -> None:
    tls = cluster.tls()
    for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic YWRtaW46YWRtaW4="}):
        response = httpx.get(f"{cluster.url}/serverinfo", headers=headers, verify=tls)
        assert response.status_code == 401, (headers, response.text)
        assert response.json()["reason"] == "Unauthorized"
        assert IMAGE not in response.text


def test_serverinfo_without_a_default_image(cluster: clusters.Cluster) -> None:
    with cluster.client("alice") as client:
        response = client.get("/serverinfo")
        assert response.status_code == 200, response.text
        assert response.json() == {
            "kind": "ServerInfo",
            "apiVersion": "nodus.dev/v1",
            "defaultImage": "",
            "consoleURL": "/console/",
        }
        assert client.post("/serverinfo", json={}).status_code == 405


def test_the_flag_is_announced_and_nodus_run_uses_it(database_server: str, tmp_path: Path) -> None:
    with clusters.on_own_database(database_server, tmp_path / "cluster", ("--default-image", IMAGE)) as server:
        with server.client("bob") as client:
            answered = client.get("/serverinfo")
            assert answered.status_code == 200, answered.text
            assert answered.json()["defaultImage"] == IMAGE
        with server.client() as admin:
            body = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": "demo"}}
            body["spec"] = {"members": [{"name": "alice", "role": "Editor"}]}
            assert admin.post(f"{API}/projects", json=body).status_code == 201
            granted = admin.post(f"{API}/projects/demo/credits", json={"amountUSD": "50", "key": "start"})
            assert granted.status_code == 201, granted.text
        env = {**os.environ, "KUBECONFIG": str(server.kubeconfig("alice", "demo"))}
        done = subprocess.run(
            [sys.executable, "-m", "nodus.cli.main", "run", "--yes", "--detach", "--name", "hello", "--", "true"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "job/hello created" in done.stdout
        with server.client() as admin:
            stored = admin.get(f"{API}/namespaces/demo/jobs/hello").json()
        assert stored["spec"]["image"] == IMAGE, "the server's default image is written into the Job"
