"""A hostile Job, through the real API server, controllers, podman agent and kernel: what it tries from inside its
container, and that none of it reaches the host, the control plane or another tenant (ADR 0040, ADR 0041).

The Job's program is the attacker: it runs a list of probes and prints one JSON line of what each saw. The test
checks every probe against what the host itself sees, so a refusal is the container's, not an absent service.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.running.conftest import Running
from tests.support.images import registry_python_image
from tests.support.objects import API, job

PROBES = r"""
import json, os, socket, subprocess, sys
host_port, gateway, secret_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
seen = {}
def connect(address, port):
    try:
        socket.create_connection((address, port), timeout=3).close()
        return "connected"
    except OSError as error:
        return type(error).__name__
seen["uid"] = os.getuid()
seen["uid_map"] = open("/proc/self/uid_map").read().split()
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
seen["no_new_privs"] = status["NoNewPrivs"].strip()
seen["seccomp"] = status["Seccomp"].strip()
seen["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
seen["host_secret"] = os.path.exists(secret_path)
seen["engine_socket"] = any(os.path.exists(p) for p in ("/run/podman/podman.sock", "/var/run/docker.sock"))
seen["block_devices"] = sorted(d for d in os.listdir("/dev") if d.startswith(("sd", "vd", "nvme", "xvd")))
seen["mount"] = subprocess.run(["mount", "-t", "tmpfs", "none", "/mnt"], capture_output=True).returncode
seen["gateway"] = connect(gateway, host_port)
seen["metadata"] = connect("169.254.169.254", 80)
seen["loopback_host_port"] = connect("127.0.0.1", host_port)
print("PROBES " + json.dumps(seen))
"""


@pytest.fixture
def host_server() -> Iterator[int]:
    """A TCP server on every address of the host: what a container must not reach."""
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
                connection.close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        server.close()


def bridge_gateway() -> str:
    out = subprocess.run(
        ["podman", "network", "inspect", "nodus", "--format", "{{range .Subnets}}{{.Gateway}}{{end}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert out, "the agents created no nodus network"
    return out


def probes(running: Running, project: str, name: str) -> dict[str, Any]:
    with running.client() as client:
        response = client.get(f"{API}/namespaces/{project}/jobs/{name}/log")
        assert response.status_code == 200, response.text
    for line in response.text.splitlines():
        if "PROBES " in line:
            return dict(json.loads(line.split("PROBES ", 1)[1]))
    raise AssertionError(f"no probe line in the log: {response.text[-2000:]}")


def test_a_hostile_program_reaches_nothing_of_the_host(running: Running, host_server: int) -> None:
    project = running.project()
    secret = running.directory / "hosts"  # the agents' work directories: node credentials, every attempt's files
    body = job("attacker", resources={"cpu": "1"}, image=registry_python_image())
    # Open egress: the policy that reaches the internet must still not reach the host.
    body["spec"] |= {"command": ["python3", "-c", PROBES, "PORT", "GATEWAY", str(secret)]}
    # The gateway is only known once an agent has created the network: the first Job makes sure of it.
    with running.client() as client:
        warm = job("warm", resources={"cpu": "1"}, command=["true"])
        assert client.post(f"{API}/namespaces/{project}/jobs", json=warm).status_code == 201
    running.wait_phase(project, "warm", "Succeeded", timeout=120)
    gateway = bridge_gateway()
    # The host itself reaches the server at the gateway address: a refusal below is the container's rules.
    socket.create_connection((gateway, host_server), timeout=3).close()
    body["spec"]["command"][3:5] = [str(host_server), gateway]
    with running.client() as client:
        response = client.post(f"{API}/namespaces/{project}/jobs", json=body)
        assert response.status_code == 201, response.text
    done = running.wait_phase(project, "attacker", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    seen = probes(running, project, "attacker")

    assert seen["uid"] == 0 and seen["uid_map"][0] == "0" and int(seen["uid_map"][1]) >= 100_000_000, seen
    assert (seen["no_new_privs"], seen["seccomp"]) == ("1", "2"), seen
    assert len(seen["pids"]) <= 4, seen  # catatonit, python3 and the probes' own children: no host process
    assert not seen["host_secret"] and not seen["engine_socket"] and not seen["block_devices"], seen
    assert seen["mount"] != 0, seen
    assert seen["gateway"] == "ConnectionRefusedError", seen
    assert seen["metadata"] == "ConnectionRefusedError", seen  # the rule's reset: without it, a timeout
    assert seen["loopback_host_port"] == "ConnectionRefusedError", seen
