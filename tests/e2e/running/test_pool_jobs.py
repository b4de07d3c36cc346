"""Jobs on a Pool's hosts for real: two hosts a project brought (real ``nodus agent`` processes that joined with a
join token), Jobs placed only there, sharing one host with disjoint GPUs, charged the platform fee, kept from
other projects, moved off a drained host and off a host that went silent, with their checkpoints.

Each host's GPUs are a fake ``nvidia-smi`` on its agent's PATH (four H100s joined by NVLink; this machine has
no GPU): what is tested is what Nodus does with the hosts the driver describes. Programs run in their images
through podman, as on the simulated hosts, with checkpoint cadences 20 times faster."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from nodus.agent import podengine
from tests.agent.test_hostshape import H100_TOPO, fake_nvidia_smi, h100s
from tests.e2e.running.conftest import Running
from tests.e2e.running.test_jobs import create, job_log
from tests.e2e.running.test_recovery import attempt_log, by_number, committed, counter
from tests.support import images
from tests.support.objects import API

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # long end-to-end: make test-slow (CI runs both tiers)

POOL = "lab"
ONE_H100 = {"gpu": {"count": 1, "type": ["H100"]}, "cpu": "0.5", "memory": "256Mi"}


@dataclass
class Lab:
    """A project with Pool ``lab`` and the hosts that joined it (by node name)."""

    running: Running
    project: str
    directory: Path
    hosts: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def nodus(self, *args: str, user: str = "alice") -> str:
        command = [sys.executable, "-m", "nodus", *args, "--kubeconfig", str(self.running.cluster.kubeconfig(user))]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def join(self, name: str) -> str:
        """Mint a join token as the Owner, start a host's agent with it and wait for its Node to be Ready."""
        token = self.nodus("pools", "join-token", POOL, "--project", self.project, "--ttl", "10m").splitlines()[0]
        bin_dir = self.directory / name / "bin"
        bin_dir.mkdir(parents=True)
        fake_nvidia_smi(bin_dir, h100s(4), H100_TOPO)
        log = (self.directory / f"{name}.log").open("wb")
        self.hosts[name] = subprocess.Popen(
            [
                *(sys.executable, "-m", "nodus", "agent", "--server", self.running.cluster.url),
                *("--certificate-authority", str(self.running.cluster.ca_file), "--join-token", token.strip()),
                *("--node-name", name, "--work-dir", str(self.directory / name / "work")),
                *("--runtime", "podman", "--insecure-registry", images.session_registry().address),
                *("--heartbeat-interval", "500ms", "--checkpoint-time-scale", "0.05", "--allow-loopback-endpoints"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
            start_new_session=True,  # killed as a whole, programs included, as a host that dies
        )
        log.close()
        self.running.wait_for(f"pool host {name} to be Ready", lambda: self.node(name).get("phase") == "Ready")
        return name

    def node(self, name: str) -> dict[str, Any]:
        with self.running.client() as client:
            response = client.get(f"{API}/nodes/{name}")
        return dict(response.json().get("status") or {}) if response.status_code == 200 else {}

    def pool_status(self) -> dict[str, Any]:
        with self.running.client("alice") as alice:
            return dict(alice.get(f"{API}/namespaces/{self.project}/pools/{POOL}").json().get("status") or {})

    def kill(self, name: str) -> None:
        os.killpg(self.hosts[name].pid, signal.SIGKILL)
        self.hosts[name].wait(timeout=30)

    def stop(self) -> None:
        for process in self.hosts.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.hosts.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        # A killed host's containers outlive it (conmon keeps them), as on a real host that went silent.
        podengine.remove_pods_under(self.directory)


@pytest.fixture(scope="module")
def lab(running: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    project = running.project()
    with running.client("alice") as alice:
        body = {"kind": "Pool", "metadata": {"name": POOL}, "spec": {"description": "the lab's two boxes"}}
        created = alice.post(f"{API}/namespaces/{project}/pools", json=body)
        assert created.status_code == 201, created.text
    lab = Lab(running, project, tmp_path_factory.mktemp("pool-hosts"))
    try:
        lab.join(f"lab-a-{uuid.uuid4().hex[:6]}")
        yield lab
    finally:
        lab.stop()


def on_pool(**spec: Any) -> dict[str, Any]:
    return {**spec, "resources": {**ONE_H100, **spec.get("resources", {})}, "placement": {"pool": POOL}}


def test_a_1_gpu_and_a_2_gpu_job_share_a_4_gpu_host_with_disjoint_devices(lab: Lab) -> None:
    running, project = lab.running, lab.project
    host = next(iter(lab.hosts))
    script = "echo devices=$NVIDIA_VISIBLE_DEVICES node=$NODUS_NODE; sleep 6"
    create(running, project, "one", **on_pool(command=["/bin/sh", "-c", script]))
    two_gpus = {**ONE_H100, "gpu": {"count": 2, "type": ["H100"]}}
    create(running, project, "two", **on_pool(command=["/bin/sh", "-c", script], resources=two_gpus))

    def both_running() -> list[dict[str, Any]] | None:
        live = [a for job in ("one", "two") for a in running.attempts(project, job)]
        return live if len(live) == 2 and all(a["status"].get("phase") == "Running" for a in live) else None

    one, two = running.wait_for("both jobs to run at once on the host", both_running)
    assert one["spec"]["node"] == two["spec"]["node"] == host
    devices = {a["metadata"]["labels"]["nodus.dev/job"]: a["status"]["placement"]["gpuIndexes"] for a in (one, two)}
    assert len(devices["one"]) == 1 and len(devices["two"]) == 2
    assert not set(devices["one"]) & set(devices["two"])
    shares = running.wait_for("the pool to count 3 busy GPUs", lambda: lab.pool_status().get("freeGPUs") == 1)
    assert shares

    for name, gpus in devices.items():
        done = running.wait_phase(project, name, "Succeeded", "Failed")
        assert done["status"]["phase"] == "Succeeded", done["status"]
        shown = ",".join(str(i) for i in sorted(gpus))
        assert job_log(running, project, name).strip() == f"devices={shown} node={host}"
        placement = done["status"]["placement"]
        assert placement.get("offering") is None
        # The host is the customer's own: a pool GPU costs the price book's platform fee (0.20 USD per GPU-hour).
        assert placement["rateUSDPerHour"] == f"{0.2 * len(gpus):.6f}", placement
        (attempt,) = running.attempts(project, name)
        assert attempt["status"]["placement"]["pool"] == POOL

        # The billing controller charges the ended attempt after the Job has finished: wait for the final charge.
        def final_cost(name: str = name) -> dict[str, Any] | None:
            (billed,) = running.attempts(project, name)
            cost: dict[str, Any] = billed["status"].get("cost") or {}
            return cost if cost.get("final") is True else None

        cost = running.wait_for(f"{name}'s final charge", final_cost)
        assert Decimal(cost["totalUSD"]) > 0


def test_hosts_of_a_pool_run_nothing_of_another_project_or_without_pool(lab: Lab) -> None:
    running = lab.running
    other = running.project()
    create(running, other, "intruder", **on_pool(command=["/bin/true"]))
    create(running, other, "elsewhere", command=["/bin/true"], resources={"cpu": "1"})
    done = running.wait_phase(other, "elsewhere", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    (elsewhere,) = running.attempts(other, "elsewhere")
    assert elsewhere["spec"]["node"] not in lab.hosts
    intruder = running.wait_for(
        "the intruder to wait for a Pool of its own project",
        lambda: (j := running.job(other, "intruder"))["status"].get("reason") == "PoolNotFound" and j,
    )
    assert POOL in intruder["status"]["message"], intruder["status"]
    assert running.attempts(other, "intruder") == []


def test_a_drain_moves_the_work_to_another_host_of_the_pool_from_its_checkpoint(lab: Lab) -> None:
    running, project = lab.running, lab.project
    first = next(iter(lab.hosts))
    second = lab.join(f"lab-b-{uuid.uuid4().hex[:6]}")
    create(running, project, "drained", **on_pool(**counter(400, 0.05)))
    before = committed(running, project, "drained")
    assert before["spec"]["node"] == first  # the fullest host that fits: both are empty, first by name

    printed = lab.nodus("pools", "drain", first, "--grace", "20s")
    assert f"node/{first} drained" in printed
    done = running.wait_phase(project, "drained", "Succeeded", "Failed", timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    lost, replacement = by_number(running, project, "drained")
    assert (lost["status"]["phase"], lost["status"]["reason"]) == ("Lost", "Drained")
    assert replacement["spec"]["node"] == second
    final = lost["status"]["checkpoint"]
    assert final["seq"] > before["status"]["checkpoint"]["seq"], "the drain took a checkpoint"
    assert replacement["spec"]["restore"]["seq"] == final["seq"]
    start = re.search(r"^start (\d+) restored", attempt_log(running, project, "drained", 2), re.M)
    assert start is not None and int(start.group(1)) > 0
    with running.client() as client:
        assert client.get(f"{API}/nodes/{first}").json()["spec"]["unschedulable"] is True
    assert lab.node(first)["phase"] == "Ready", "a drained host stays, cordoned"
    assert "uncordoned" in lab.nodus("pools", "uncordon", first)


def test_a_pool_host_that_goes_silent_is_lost_and_its_work_recovers_on_another(lab: Lab) -> None:
    running, project = lab.running, lab.project
    if len(lab.hosts) < 2:  # run on its own: the drain test before it joins the second host
        lab.join(f"lab-b-{uuid.uuid4().hex[:6]}")
    create(running, project, "silenced", **on_pool(**counter(300, 0.05)))
    first = committed(running, project, "silenced", at_least=2)
    victim = first["spec"]["node"]
    (survivor,) = [name for name in lab.hosts if name != victim]
    lab.kill(victim)
    done = running.wait_phase(project, "silenced", "Succeeded", "Failed", timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    lost, replacement = by_number(running, project, "silenced")
    assert (lost["status"]["phase"], lost["status"]["reason"]) == ("Lost", "NodeLost")
    assert replacement["spec"]["node"] == survivor
    assert replacement["spec"]["restore"]["seq"] == lost["status"]["checkpoint"]["seq"] >= 2
    assert lab.node(victim)["phase"] == "Lost"
    running.wait_for("the pool to count its lost host", lambda: lab.pool_status().get("hostsByPhase", {}).get("Lost"))

    # Every charge of this module went through holds and the ledger, at the platform fee: the ledger balances.
    verified = subprocess.run(
        [sys.executable, "-m", "nodus", "billing", "verify", "--kubeconfig", str(running.cluster.kubeconfig("admin"))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
