"""``GET /serverinfo``: the default image ``nodus run`` uses, to authenticated callers only; the real server."""

from __future__ import annotations

import asyncio
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from nodus.storage import database
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


@pytest.mark.slow  # a whole nodus dev (registry, image push, podman hosts), about 40 s (slow tier)
def test_nodus_dev_announces_its_registrys_image_and_nodus_run_needs_no_image(
    database_server: str, tmp_path: Path
) -> None:
    """The issue's first steps: `make dev`, then `nodus run -- python -c 'print(42)'` with no --image."""
    url = asyncio.run(database.create_database(database_server))
    try:
        registry_port = clusters.free_port()
        data_dir = tmp_path / "data"
        port = clusters.free_port()
        process, log = _dev(data_dir, port, url, registry_port)
        try:
            config = data_dir.resolve() / "kubeconfig"
            env = {**os.environ, "KUBECONFIG": str(config)}
            done = subprocess.run(
                [sys.executable, "-m", "nodus.cli.main", "run", "--yes", "--", "python", "-c", "print(42)"],
                capture_output=True,
                text=True,
                timeout=300,
                env=env,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert "42" in done.stdout.splitlines() and "Succeeded" in done.stdout
            token = next(line.split()[-1] for line in config.read_text().splitlines() if "token:" in line)
            info = httpx.get(
                f"https://127.0.0.1:{port}/serverinfo",
                headers={"Authorization": f"Bearer {token}"},
                verify=ssl.create_default_context(cafile=str(data_dir.resolve() / "pki" / "ca.crt")),
            ).json()
            assert info["defaultImage"] == f"localhost:{registry_port}/nodus/python:3.11"
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0, log.read_text()[-5000:]
    finally:
        asyncio.run(database.drop_database(url))


def _dev(data_dir: Path, port: int, url: str, registry_port: int) -> tuple[subprocess.Popen[bytes], Path]:
    """``nodus dev`` on ``url`` with its registry on ``registry_port``, once it has announced its kubeconfig."""
    data_dir.mkdir(parents=True)
    log = data_dir.parent / "dev.log"
    args = [sys.executable, "-m", "nodus.cli.main", "dev", "--data-dir", str(data_dir), "--port", str(port)]
    args += ["--database-url", url, "--registry-port", str(registry_port)]
    env = {k: v for k, v in os.environ.items() if k != "NODUS_DATABASE_URL"}
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 600  # the first start on a machine builds the base image
    while "export KUBECONFIG=" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail("nodus dev did not announce itself:\n" + log.read_text(errors="replace")[-5000:])
        time.sleep(0.2)
    return process, log
