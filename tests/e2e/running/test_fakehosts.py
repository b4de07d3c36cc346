"""The fake cloud end to end (ADR 0059): a real API server and controllers with ``--provider fake``, and one
``nodus fakehosts`` process playing every host.

Jobs run to their end on fake hosts: a preempted interruptible one and one whose host is killed (both replaced and
then Succeeded), one moved off a drained host, a two-rank gang, one that fails with its exit code; billing verifies.
And 200 fake hosts come up Ready, keep their Leases and are released when idle without one lost.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodus.apimachinery import units
from nodus.apimachinery.sealing import Keyring
from nodus.storage import database
from tests.support import cluster as clusters
from tests.support import controllers
from tests.support.objects import API

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

HEARTBEAT = 2.0
FLAGS = (
    *("--provider", "fake", "--sim-boot-time", "0s", "--sim-capacity", "4", "--node-grace", "10s"),
    *("--workers", "4", "--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "500ms"),
    *("--funded-window", "8s", "--storage-charge-interval", "2s"),
)
IMAGE = "registry.invalid/fake:1"  # never pulled: a fake host runs nothing
SPOT = {"resources": {"gpu": {"count": 1, "type": ["rtx4090-24g"]}}, "placement": {"interruptible": "Prefer"}}


@dataclass
class Fake:
    cluster: clusters.Cluster
    controllers: controllers.ControllerProcess
    hosts: subprocess.Popen[bytes]
    hosts_log: Path
    directory: Path

    def client(self) -> httpx.Client:
        return self.cluster.client("admin")

    def logs(self) -> str:
        hosts = self.hosts_log.read_text(errors="replace")[-20000:]
        return f"--- controllers ---\n{self.controllers.logs()[-20000:]}\n--- fakehosts ---\n{hosts}"

    def wait_for(self, what: str, check: Any, timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(0.3)
        pytest.fail(f"timed out waiting for {what} (last: {last!r})\n{self.logs()}")


@pytest.fixture(scope="module")
def fake(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fake]:
    url = asyncio.run(database.create_database(database_server))
    database.migrate(url)
    directory = tmp_path_factory.mktemp("fake")
    keys = directory / "secret-keys"
    Keyring.generate(keys)  # node credentials are signed with them
    extra = ("--watch-bookmark-interval", "1s", "--funded-window", "8s", "--secret-key-file", str(keys))
    cluster = clusters.start(directory, url, extra_args=extra, migrate=False)
    hands = directory / "handover"
    leader = _controllers(cluster, directory, hands)
    hosts_log = directory / "fakehosts.log"
    command = [sys.executable, "-m", "nodus", "fakehosts", "--directory", str(hands)]
    command += ["--kubeconfig", str(cluster.kubeconfig("admin")), "--heartbeat-interval", f"{int(HEARTBEAT * 1000)}ms"]
    # Credentials good for 10 s: every host that lives longer has renewed its own (halfway) as it heartbeats.
    command += ["--default-duration", "2s", "--credential-lifetime", "10s"]
    with hosts_log.open("wb") as log:
        hosts = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    fake = Fake(cluster, leader, hosts, hosts_log, directory)
    try:
        controllers.wait_for_leader(cluster, "fake")
        yield fake
    finally:
        hosts.terminate()
        try:
            hosts.wait(timeout=20)
        except subprocess.TimeoutExpired:
            hosts.kill()
            hosts.wait()
        leader.stop()
        cluster.stop()
        asyncio.run(database.drop_database(url))


def _controllers(cluster: clusters.Cluster, directory: Path, hands: Path) -> controllers.ControllerProcess:
    log_file = directory / "controllers-fake.log"
    args = [sys.executable, "-m", "nodus", "controllers", "--kubeconfig", str(cluster.kubeconfig("controllers"))]
    args += ["--identity", "fake", "--fake-directory", str(hands), *FLAGS]
    with log_file.open("ab") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    return controllers.ControllerProcess(process, log_file, "fake")


def project(fake: Fake) -> str:
    name = f"fake-{time.monotonic_ns() % 10**8}"
    with fake.client() as client:
        body = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": name}, "spec": {}}
        assert client.post(f"{API}/projects", json=body).status_code == 201
        granted = client.post(f"{API}/projects/{name}/credits", json={"amountUSD": "1000", "key": "start"})
        assert granted.status_code == 201, granted.text
    return name


def create(fake: Fake, namespace: str, name: str, duration: str, exit_code: int = 0, **spec: Any) -> None:
    env = [
        {"name": "FAKEHOST_DURATION", "value": duration},
        {"name": "FAKEHOST_EXIT_CODE", "value": str(exit_code)},
    ]
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"image": IMAGE, "command": ["fake"], "env": env, "resources": {"cpu": "1"}, **spec},
    }
    with fake.client() as client:
        response = client.post(f"{API}/namespaces/{namespace}/jobs", json=body)
        assert response.status_code == 201, response.text


def job(fake: Fake, namespace: str, name: str) -> dict[str, Any]:
    with fake.client() as client:
        return dict(client.get(f"{API}/namespaces/{namespace}/jobs/{name}").json())


def attempts(fake: Fake, namespace: str, name: str) -> list[dict[str, Any]]:
    with fake.client() as client:
        params = {"labelSelector": f"nodus.dev/job={name}"}
        items = client.get(f"{API}/namespaces/{namespace}/attempts", params=params).json()["items"]
    return sorted(items, key=lambda a: a["spec"]["number"])


def phase_of(fake: Fake, namespace: str, name: str, *phases: str) -> dict[str, Any] | None:
    found = job(fake, namespace, name)
    return found if (found.get("status") or {}).get("phase") in phases else None


def running_on(fake: Fake, namespace: str, name: str) -> str | None:
    """The node of the Job's first attempt once it reports Running."""
    first = attempts(fake, namespace, name)[:1]
    return first[0]["spec"]["node"] if first and first[0].get("status", {}).get("phase") == "Running" else None


def nodus(fake: Fake, *args: str) -> None:
    """Run ``nodus ARGS`` as the administrator, as a user would (``nodus sim kill NODE``)."""
    kubeconfig = str(fake.cluster.kubeconfig("admin"))
    result = subprocess.run(
        [sys.executable, "-m", "nodus", *args, "--kubeconfig", kubeconfig],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_jobs_run_to_their_end_through_preemption_a_killed_host_and_a_drain_and_billing_verifies(fake: Fake) -> None:
    namespace = project(fake)
    create(fake, namespace, "quick", "1s")
    create(fake, namespace, "fails", "1s", exit_code=3, recovery={"maxAttempts": 1})
    create(fake, namespace, "spot", "6s", **SPOT)
    create(fake, namespace, "doomed", "6s", placement={"offerings": ["cpu-8c-us"]})
    create(fake, namespace, "moved", "6s", placement={"offerings": ["cpu-8c-eu"]})
    # A gang's ranks each run their own clock: there is no mesh to meet in.
    create(fake, namespace, "gang", "2s", placement={"offerings": ["cpu-8c-eu"]}, distributed={"nodes": 2})
    spot = fake.wait_for("spot running", lambda: running_on(fake, namespace, "spot"))
    nodus(fake, "sim", "preempt", spot, "--notice", "3s")
    doomed = fake.wait_for("doomed running", lambda: running_on(fake, namespace, "doomed"))
    nodus(fake, "sim", "kill", doomed)
    drained = fake.wait_for("moved running", lambda: running_on(fake, namespace, "moved"))
    nodus(fake, "pools", "drain", drained, "--grace", "10s")  # waits until no attempt is left on the host
    for name in ("quick", "spot", "doomed", "moved", "gang"):
        done = fake.wait_for(f"{name} to end", lambda n=name: phase_of(fake, namespace, n, "Succeeded", "Failed"))
        assert done["status"]["phase"] == "Succeeded", (name, done["status"], fake.logs())
    failed = fake.wait_for("fails to end", lambda: phase_of(fake, namespace, "fails", "Succeeded", "Failed"))
    assert failed["status"]["phase"] == "Failed", failed["status"]
    ended = attempts(fake, namespace, "fails")[0]["status"]
    assert (ended["phase"], ended["reason"], ended["exitCode"]) == ("Failed", "Error", 3), ended

    assert [a["status"]["phase"] for a in attempts(fake, namespace, "gang")] == ["Succeeded", "Succeeded"]
    first, *rest = attempts(fake, namespace, "spot")
    assert (first["status"]["phase"], first["status"]["reason"]) == ("Lost", "Preempted"), first["status"]
    assert [a["status"]["phase"] for a in rest] == ["Succeeded"]
    first, *rest = attempts(fake, namespace, "doomed")
    assert first["status"]["phase"] == "Lost", first["status"]
    assert first["spec"]["node"] == doomed
    assert [a["status"]["phase"] for a in rest] == ["Succeeded"]
    first, *rest = attempts(fake, namespace, "moved")
    assert (first["status"]["phase"], first["status"]["reason"]) == ("Lost", "Drained"), first["status"]
    assert [a["status"]["phase"] for a in rest] == ["Succeeded"] and rest[0]["spec"]["node"] != drained
    with fake.client() as client:
        node = client.get(f"{API}/nodes/{doomed}")
        # The killed host never reported again: the lifecycle controller found its Lease lapsed.
        assert node.status_code == 404 or node.json()["status"]["phase"] == "Lost", node.text

    def verified() -> subprocess.CompletedProcess[str] | None:
        env = {"NODUS_DATABASE_URL": fake.cluster.database_url, "PATH": "/usr/bin:/bin"}
        result = subprocess.run(
            [sys.executable, "-m", "nodus", "billing", "verify"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
        return result if result.returncode == 0 else None

    assert fake.wait_for("billing verify to pass", verified, timeout=60)


def test_two_hundred_fake_hosts_come_up_ready_and_keep_their_leases(fake: Fake) -> None:
    count = 200
    now = units.format_time(units.now())
    with fake.client() as client:
        for i in range(count):
            body = {
                "apiVersion": "nodus.dev/v1",
                "kind": "Node",
                "metadata": {"name": f"many-{i:03d}", "labels": {"nodus.dev/offering": "cpu-8c-us"}},
                "spec": {"offering": "cpu-8c-us", "provider": "fake"},
                "status": {"phase": "Booting", "bootTime": now},
            }
            response = client.post(f"{API}/nodes", json=body)
            assert response.status_code == 201, response.text
    seen_ready: set[str] = set()
    lost: set[str] = set()

    def all_ready() -> bool:
        with fake.client() as client:
            for node in client.get(f"{API}/nodes").json()["items"]:
                name, status = node["metadata"]["name"], node.get("status") or {}
                if not name.startswith("many-"):
                    continue
                if status.get("readyTime"):
                    seen_ready.add(name)
                if status.get("phase") == "Lost":
                    lost.add(name)
        return len(seen_ready) == count

    started = time.monotonic()
    fake.wait_for("200 fake hosts Ready", all_ready, timeout=120)
    took = time.monotonic() - started
    # Idle hosts are released after a warm window (10 s from Ready): the Leases are sampled while most are held,
    # each time a little more than an interval apart, so that every host Ready in both has renewed in between.
    time.sleep(1.2 * HEARTBEAT)
    first = leases(fake)
    time.sleep(1.2 * HEARTBEAT)
    second = leases(fake)
    stale = {name for name, renewed in second.items() if units.now() - renewed > timedelta(seconds=2.5 * HEARTBEAT)}
    assert not stale, f"Ready hosts whose Lease is not renewed: {sorted(stale)[:10]} (all Ready in {took:.1f}s)"
    standing = {name for name in first.keys() & second.keys() if second[name] <= first[name]}
    assert not standing, f"Leases that did not move in {1.2 * HEARTBEAT}s: {sorted(standing)[:10]}"
    assert first.keys() & second.keys(), "no host stayed Ready long enough to be sampled twice"

    def released() -> bool:
        all_ready()
        with fake.client() as client:
            return not any(
                n["metadata"]["name"].startswith("many-") for n in client.get(f"{API}/nodes").json()["items"]
            )

    # Then every idle host is scaled down: its fake host leaves, and none is ever lost on the way.
    fake.wait_for("the idle fake hosts to be released", released, timeout=120)
    assert not lost, f"hosts lost: {sorted(lost)}\n{fake.logs()}"


def leases(fake: Fake) -> dict[str, datetime]:
    """The Lease renewal time of every Ready host of the test, by node name."""
    with fake.client() as client:
        renewed = {
            lease["metadata"]["name"].removeprefix("node."): lease["spec"].get("renewTime")
            for lease in client.get(f"{API}/leases").json()["items"]
        }
        nodes = client.get(f"{API}/nodes").json()["items"]
    ready = {n["metadata"]["name"] for n in nodes if (n.get("status") or {}).get("phase") == "Ready"}
    return {
        name: units.parse_time(renewed.get(name) or "1970-01-01T00:00:00Z")
        for name in ready
        if name.startswith("many-")
    }
