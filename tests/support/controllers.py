"""A real ``nodus controllers`` process (with the simulated cloud) for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from nodus.agent import podengine
from tests.support import images
from tests.support.cluster import Cluster

# An offering whose hosts take a while to boot, so that a test can catch one booting.
SLOW_BOOT_OFFERING = "cpu-96c-asia"

# Fast enough for tests, slow enough to be realistic: hosts boot at once, heartbeat every 0.5s and
# are lost after 3s of silence.
GANG_HANGS, GANG_FINE, GANG_SIX = "l4-24g-x1-asia", "a10g-24g-x1-asia", "l40s-48g-x1-asia"
TEST_FLAGS = (
    "--sim-boot-time",
    "0s",
    "--sim-heartbeat-interval",
    "500ms",
    "--node-grace",
    "3s",
    "--sim-capacity",
    "4",
    "--workers",
    "4",
    "--lease-duration",
    "4s",
    "--renew-deadline",
    "3s",
    "--retry-period",
    "500ms",
    "--sim-boot-time-for",
    f"{SLOW_BOOT_OFFERING}=4s",
    # Holds fund 8 s of running and are extended as Jobs run, so tests see extensions and caps bite.
    "--funded-window",
    "8s",
    # A billed hour of storage lasts 2 s, so tests see a Job's storage charged hour after hour.
    "--storage-charge-interval",
    "2s",
    # Checkpoint cadences and waits run 20 times faster: an interval of 1m is 3 s.
    "--sim-checkpoint-time-scale",
    "0.05",
    # Gang assembly budgets run 50 times faster: the smallest startupTimeout (5m) is 6 s.
    "--sim-assembly-time-scale",
    "0.02",
    # Offerings of the gang tests (tests/e2e/running/test_gangs.py), used by no other test: a pair in asia where
    # one never comes up, one host of each; six hosts for two competing 4-node gangs.
    *("--sim-boot-hangs", GANG_HANGS, "--sim-capacity-for", f"{GANG_HANGS}=1", "--sim-capacity-for", f"{GANG_FINE}=1"),
    *("--sim-capacity-for", f"{GANG_SIX}=6"),
    # The tests' HTTPS server, S3 server and customer databases are on this machine's loopback (ADR 0032); the
    # control plane's database stays forbidden (start() adds it).
    "--sim-agent-allow-loopback-endpoints",
)


@dataclass
class ControllerProcess:
    process: subprocess.Popen[bytes]
    log_file: Path
    identity: str

    def logs(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no lease release, hosts keep running (as when a machine dies)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()


def start(cluster: Cluster, directory: Path, identity: str, extra_args: tuple[str, ...] = ()) -> ControllerProcess:
    directory.mkdir(parents=True, exist_ok=True)
    log_file = directory / f"controllers-{identity}.log"
    args = [
        sys.executable,
        "-m",
        "nodus",
        "controllers",
        "--kubeconfig",
        str(cluster.kubeconfig("controllers")),
        "--identity",
        identity,
        "--sim-work-dir",
        str(directory / "hosts"),
        *TEST_FLAGS,
        *control_plane_database(cluster.database_url),
        *images_flags(),
        *extra_args,
    ]
    with log_file.open("ab") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    return ControllerProcess(process, log_file, identity)


def images_flags() -> tuple[str, ...]:
    """Every Job runs in its image (ADR 0040): the simulated agents run podman and pull from the session's registry
    over plain HTTP, where the tests' base image is pushed once."""
    images.registry_python_image()
    return ("--sim-runtime", "podman", "--sim-agent-insecure-registry", images.session_registry().address)


def control_plane_database(database_url: str) -> tuple[str, ...]:
    """The flag forbidding simulated agents the cluster's database, as ``nodus dev`` forbids its own; a unix
    socket (the embedded server) is refused whatever the flags."""
    parts = urlsplit(database_url)
    return ("--sim-agent-forbid-address", f"[{parts.hostname}]:{parts.port or 5432}") if parts.hostname else ()


def wait_for_leader(cluster: Cluster, identity: str | None = None, timeout: float = 60) -> str:
    """The identity holding the controllers' Lease, once one does (or ``identity`` does)."""
    deadline = time.monotonic() + timeout
    with cluster.client("admin") as client:
        while time.monotonic() < deadline:
            response = client.get("/apis/nodus.dev/v1/leases/nodus-controllers")
            if response.status_code == 200:
                holder = str(response.json()["spec"].get("holderIdentity") or "")
                if holder and (identity is None or holder == identity):
                    return holder
            time.sleep(0.2)
    raise TimeoutError(f"no controller became leader within {timeout}s")


def wait_ready(cluster: Cluster) -> None:
    """Until the API server answers (it restarts in some tests)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{cluster.url}/readyz", verify=cluster.tls(), timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)


def kill_leftover_agents(directory: Path) -> int:
    """SIGKILL every ``nodus agent`` still working under ``directory / "hosts"`` (where :func:`start` puts the
    simulated hosts): hosts that no controller took down (one SIGKILLed, or stopped past its timeout); and remove
    the pods they left (containers outlive their agent)."""
    killed = kill_agents_under(directory / "hosts")
    podengine.remove_pods_under(directory / "hosts")
    return killed


def kill_agents_under(hosts_directory: Path) -> int:
    """SIGKILL every ``nodus agent`` working under ``hosts_directory``, with its session; how many there were."""
    hosts = str(hosts_directory.resolve()).encode()
    found = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"agent" in argv and any(arg.startswith(hosts) for arg in argv):
            found += 1
            with contextlib.suppress(OSError):
                os.killpg(int(entry.name), signal.SIGKILL)
    return found
