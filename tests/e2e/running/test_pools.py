"""A host joins a Pool for real (ADR 0047): an Owner mints a join token with ``nodus pools join-token``, a real
``nodus agent --join-token`` (no ``--offering``) registers its Node with the shape it discovers, the pools
controller counts it, and deleting the Pool revokes the host (its agent exits).

The host's GPUs are a fake ``nvidia-smi`` on the agent's PATH (four H100s joined by NVLink): the machine that
runs the tests has none, and what is tested is what the agent makes of the driver's answers."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.agent.test_hostshape import H100_TOPO, fake_nvidia_smi, h100s
from tests.e2e.running.conftest import Running
from tests.support.objects import API

pytestmark = pytest.mark.e2e


def nodus(running: Running, *args: str, user: str = "alice") -> str:
    command = [sys.executable, "-m", "nodus", *args, "--kubeconfig", str(running.cluster.kubeconfig(user))]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_host_joins_a_pool_with_a_join_token_and_leaves_with_it(running: Running, tmp_path: Path) -> None:
    project = running.project()
    with running.client("alice") as alice:
        body = {"kind": "Pool", "metadata": {"name": "lab"}, "spec": {"maxHosts": 2, "nodeLabels": {"site": "lab-1"}}}
        assert alice.post(f"{API}/namespaces/{project}/pools", json=body).status_code == 201
    printed = nodus(running, "pools", "join-token", "lab", "--project", project, "--ttl", "10m").splitlines()
    token = printed[0].strip()
    command = printed[2].removeprefix("# ")
    assert command.startswith(f"nodus agent --server {running.cluster.url} --certificate-authority ca.crt ")
    assert command.endswith(f"--join-token {token}")

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_nvidia_smi(bin_dir, h100s(4), H100_TOPO)
    name = f"pool-host-{uuid.uuid4().hex[:6]}"
    log_path = running.directory / f"{name}.log"
    with log_path.open("wb") as log:
        agent = subprocess.Popen(
            [
                *(sys.executable, "-m", "nodus", "agent", "--server", running.cluster.url),
                *("--certificate-authority", str(running.cluster.ca_file), "--join-token", token),
                *("--node-name", name, "--runtime", "unsandboxed", "--work-dir", str(tmp_path / "work")),
                *("--heartbeat-interval", "500ms"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        )
        try:

            def ready() -> dict[str, Any] | None:
                with running.client("alice") as alice:
                    response = alice.get(f"{API}/nodes/{name}")
                node = response.json() if response.status_code == 200 else None
                return node if node and (node.get("status") or {}).get("phase") == "Ready" else None

            node = running.wait_for("the pool host to register", ready)
            assert node["spec"] == {"pool": {"project": project, "name": "lab"}, "provider": "pool"}
            assert node["metadata"]["labels"] == {
                "site": "lab-1",
                "nodus.dev/pool": "lab",
                "nodus.dev/pool-project": project,
            }
            capacity = node["status"]["capacity"]
            assert {k: capacity[k] for k in ("gpus", "accelerator", "gpuFamily", "gpuMemory", "interconnect")} == {
                "gpus": 4,
                "accelerator": "h100-sxm-80g",
                "gpuFamily": "H100",
                "gpuMemory": "80Gi",
                "interconnect": "nvlink",
            }
            assert capacity["gpuModel"] == "NVIDIA H100 80GB HBM3"
            assert int(capacity["cpu"]) >= 1 and capacity["memory"] and capacity["disk"]
            assert node["status"]["gpuIndexes"] == [0, 1, 2, 3]

            def counted() -> dict[str, Any] | None:
                with running.client("alice") as alice:
                    status = alice.get(f"{API}/namespaces/{project}/pools/lab").json().get("status") or {}
                return status if status.get("readyHosts") == 1 else None

            status = running.wait_for("the pool to count its host", counted)
            assert (status["hosts"], status["totalGPUs"], status["freeGPUs"], status["lastJoinNode"]) == (1, 4, 4, name)
            assert status["gpus"] == [{"accelerator": "h100-sxm-80g", "family": "H100", "total": 4, "free": 4}]
            listed = nodus(running, "pools", "tokens", "lab", "--project", project)
            assert token.split(".")[0] in listed and name in listed

            # Deleting the Pool deletes its Node: the host's credential is revoked and its agent leaves.
            with running.client("alice") as alice:
                assert alice.delete(f"{API}/namespaces/{project}/pools/lab").status_code == 202

            def gone() -> bool:
                with running.client("alice") as alice:
                    return alice.get(f"{API}/namespaces/{project}/pools/lab").status_code == 404

            running.wait_for("the pool and its host to go", gone)
            with running.client("alice") as alice:
                assert alice.get(f"{API}/nodes/{name}").status_code == 404
            assert agent.wait(timeout=60) == 0, log_path.read_text()[-3000:]
        finally:
            if agent.poll() is None:
                agent.terminate()
                agent.wait(timeout=30)
