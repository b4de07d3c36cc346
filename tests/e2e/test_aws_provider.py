"""The aws provider end to end: a real API server with the AWS price book, real ``nodus controllers --provider
aws`` against moto's EC2 server, and real ``nodus agent`` processes.

moto's instances never boot, so the test plays each instance (the one simulated step, docs/providers.md): once an
instance of the cluster is running in moto, it reads the instance's user data back from EC2, writes the CA and
the join token the script would write, and starts the agent with the script's ``ExecStart`` command line, with
only what a test host needs changed (the files' paths, a work directory, the metadata URL of a small IMDSv2
server it serves for that instance, a short heartbeat). When EC2 (moto) says the instance is terminated, the test
stops its agent, as the instance's shutdown would.

What must hold: a Job runs on an instance the provider started for it; a spot interruption notice served by the
instance's metadata becomes a preemption (Node Terminating/Preempted, the attempt Lost/Preempted after its program
got SIGTERM, the instance terminated) and a replacement finishes; a controller killed while a Job runs is
replaced by one that adopts the instance (no second instance for that Node); no instance outlives its Node.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from nodus.apimachinery import units
from nodus.apimachinery.sealing import Keyring
from nodus.storage import database
from tests.support import cluster as clusters
from tests.support.cluster import Cluster, free_port
from tests.support.controllers import wait_for_leader
from tests.support.metadata import MetadataServer
from tests.support.objects import API

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # long end-to-end: make test-slow (CI runs both tiers)

REGION = "us-east-1"
CLUSTER = "e2e"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": REGION}


@dataclass
class Host:
    """One instance the test plays: its agent process and its metadata service."""

    instance: str
    node: str
    agent: subprocess.Popen[bytes]
    metadata: MetadataServer
    log: Path


@dataclass
class Instances:
    """Plays every running instance of the cluster in moto (see the module docstring)."""

    ec2: Any
    directory: Path
    hosts: dict[str, Host] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.wait(0.3):
            try:
                self._step()
            except Exception as exc:  # reported by the test; the loop goes on
                self.errors.append(repr(exc))

    def all(self) -> list[dict[str, Any]]:
        filters = [{"Name": "tag:nodus.dev/cluster", "Values": [CLUSTER]}]
        pages = self.ec2.describe_instances(Filters=filters)["Reservations"]
        return [instance for page in pages for instance in page["Instances"]]

    def _step(self) -> None:
        for instance in self.all():
            ident, state = instance["InstanceId"], instance["State"]["Name"]
            if state == "running" and ident not in self.hosts:
                self.hosts[ident] = self._boot(instance)
            elif state in ("shutting-down", "terminated") and ident in self.hosts:
                host = self.hosts[ident]
                if host.agent.poll() is None:
                    host.agent.send_signal(signal.SIGTERM)  # the instance's shutdown stops its unit

    def _boot(self, instance: dict[str, Any]) -> Host:
        ident = instance["InstanceId"]
        data = self.ec2.describe_instance_attribute(InstanceId=ident, Attribute="userData")["UserData"]["Value"]
        script = base64.b64decode(data).decode()
        root = self.directory / "instances" / ident
        root.mkdir(parents=True)
        (root / "ca.crt").write_text(between(script, "<<'NODUS_CA'\n", "\nNODUS_CA") + "\n")
        token_line = next(line for line in script.splitlines() if line.startswith("printf '%s\\n' "))
        (root / "join-token").write_text(shlex.split(token_line)[2] + "\n")
        exec_line = next(line for line in script.splitlines() if line.startswith("ExecStart="))
        command = shlex.split(exec_line.removeprefix("ExecStart="))
        assert command[1] == "agent", command
        args = command[2:]
        replaced = {"--certificate-authority": str(root / "ca.crt"), "--join-token-file": str(root / "join-token")}
        for flag, value in replaced.items():
            args[args.index(flag) + 1] = value
        metadata = MetadataServer()
        args[args.index("--metadata-url") + 1] = metadata.url
        node = args[args.index("--node-name") + 1]
        args += ["--work-dir", str(root / "work"), "--heartbeat-interval", "500ms", "--advertise-address", "127.0.0.1"]
        log = root / "agent.log"
        with log.open("wb") as output:
            agent = subprocess.Popen(
                [sys.executable, "-m", "nodus", "agent", *args], stdout=output, stderr=subprocess.STDOUT
            )
        return Host(ident, node, agent, metadata, log)

    def stop(self) -> None:
        self._stop.set()
        for host in self.hosts.values():
            if host.agent.poll() is None:
                host.agent.kill()
            host.agent.wait()
            host.metadata.close()


def between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


@dataclass
class AwsCluster:
    cluster: Cluster
    directory: Path
    instances: Instances
    image: str
    endpoint: str
    controllers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start_controllers(self, identity: str) -> subprocess.Popen[bytes]:
        args = [
            *(
                sys.executable,
                "-m",
                "nodus",
                "controllers",
                "--kubeconfig",
                str(self.cluster.kubeconfig("controllers")),
            ),
            *("--identity", identity, "--provider", "aws", "--aws-cluster", CLUSTER),
            *("--aws-image", f"{REGION}={self.image}", "--aws-endpoint-url", self.endpoint),
            *(
                "--aws-agent-flag=--runtime",
                "--aws-agent-flag=unsandboxed",
                "--aws-agent-flag=--allow-loopback-endpoints",
            ),
            *("--aws-capacity", "4", "--aws-sweep-interval", "2s", "--node-grace", "3s", "--workers", "4"),
            *("--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "500ms", "--funded-window", "8s"),
        ]
        with (self.directory / f"controllers-{identity}.log").open("ab") as log:
            process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **CREDENTIALS})
        self.controllers.append(process)
        return process

    def logs(self) -> str:
        parts = [f"--- {p.name} ---\n{p.read_text(errors='replace')[-15000:]}" for p in self.directory.glob("*.log")]
        parts += [
            f"--- {h.log} ---\n{h.log.read_text(errors='replace')[-5000:]}" for h in self.instances.hosts.values()
        ]
        return "\n".join(parts) + f"\n--- player errors ---\n{self.instances.errors}"

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float = 90) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(0.3)
        pytest.fail(f"timed out waiting for {what} (last: {last!r})\n{self.logs()}")

    def get(self, path: str) -> dict[str, Any]:
        with self.cluster.client() as client:
            response = client.get(path)
            assert response.status_code == 200, response.text
            return dict(response.json())

    def attempts(self, project: str, job: str) -> list[dict[str, Any]]:
        items = self.get(f"{API}/namespaces/{project}/attempts?labelSelector=nodus.dev/job={job}")["items"]
        return sorted(items, key=lambda a: a["spec"]["number"])

    def finished(self, project: str, job: str) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            found = self.get(f"{API}/namespaces/{project}/jobs/{job}")
            return found if found.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

        return dict(self.wait_for(f"job {job} to finish", done, timeout=150))


@pytest.fixture(scope="module")
def aws(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AwsCluster]:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's server logs every request
    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    endpoint = f"http://127.0.0.1:{port}"
    for name, value in CREDENTIALS.items():
        os.environ.setdefault(name, value)
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint)
    image = str(ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])
    url = asyncio.run(database.create_database(database_server))
    database.migrate(url)
    directory = tmp_path_factory.mktemp("aws")
    Keyring.generate(directory / "secret-keys")  # node credentials are signed with them
    extra = ("--price-book", "aws", "--watch-bookmark-interval", "1s", "--funded-window", "8s")
    extra += ("--secret-key-file", str(directory / "secret-keys"))
    cluster = clusters.start(directory, url, extra_args=(*extra, "--allow-loopback-endpoints"), migrate=False)
    instances = Instances(ec2, directory)
    player = threading.Thread(target=instances.run, daemon=True)
    player.start()
    running = AwsCluster(cluster, directory, instances, image, endpoint)
    try:
        running.start_controllers("first")
        wait_for_leader(cluster, "first")
        yield running
    finally:
        for process in running.controllers:
            if process.poll() is None:
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=20)
            if process.poll() is None:
                process.kill()
        instances.stop()
        player.join(timeout=5)
        cluster.stop()
        moto.stop()
        asyncio.run(database.drop_database(url))


def project(aws: AwsCluster) -> str:
    name = f"aws-{uuid.uuid4().hex[:8]}"
    with aws.cluster.client() as client:
        body = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": name}}
        response = client.post(
            f"{API}/projects", json={**body, "spec": {"members": [{"name": "alice", "role": "Owner"}]}}
        )
        assert response.status_code == 201, response.text
        response = client.post(f"{API}/projects/{name}/credits", json={"amountUSD": "1000", "key": "start"})
        assert response.status_code == 201, response.text
    return name


def create_job(aws: AwsCluster, namespace: str, name: str, script: str, offerings: list[str]) -> None:
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "image": "docker.io/library/python:3.12",
            "command": ["/bin/sh", "-c", script],
            "resources": {"cpu": "1"},
            "placement": {"offerings": offerings, "interruptible": "Allow"},
        },
    }
    with aws.cluster.client() as client:
        response = client.post(f"{API}/namespaces/{namespace}/jobs", json=body)
        assert response.status_code == 201, response.text


def instance_of(aws: AwsCluster, node: str) -> list[dict[str, Any]]:
    """Every instance (any state) EC2 has for ``node``."""
    return [i for i in aws.instances.all() if {"Key": "nodus.dev/node", "Value": node} in i.get("Tags", [])]


def test_a_spot_notice_preempts_and_a_replacement_finishes(aws: AwsCluster) -> None:
    namespace = project(aws)
    script = (
        "trap 'echo notice received; exit 143' TERM; "
        'if [ "$NODUS_ATTEMPT_NUMBER" = 1 ]; then while true; do sleep 0.1; done; fi; echo second run done'
    )
    create_job(aws, namespace, "spot", script, ["cpu-8c-us-spot", "cpu-8c-us"])

    def running_attempt() -> dict[str, Any] | None:
        attempts = aws.attempts(namespace, "spot")
        return attempts[0] if attempts and attempts[0].get("status", {}).get("phase") == "Running" else None

    first = aws.wait_for("the first attempt to run on an instance", running_attempt, timeout=120)
    node = first["spec"]["node"]
    [instance] = instance_of(aws, node)
    assert instance["InstanceType"] == "m7i.2xlarge"
    assert instance.get("InstanceLifecycle") == ("spot" if first["spec"]["offering"].endswith("-spot") else None)
    stored = aws.get(f"{API}/nodes/{node}")
    assert stored["spec"]["provider"] == "aws"
    assert stored["metadata"]["annotations"]["aws.nodus.dev/instance-id"] == instance["InstanceId"]

    at = units.format_time(units.now() + units.parse_duration("12s"))
    aws.instances.hosts[instance["InstanceId"]].metadata.notice = {"action": "terminate", "time": at}

    def preempted() -> dict[str, Any] | None:
        found = aws.get(f"{API}/nodes/{node}")
        return found if found.get("status", {}).get("reason") == "Preempted" else None

    node_after = aws.wait_for("the notice to preempt the node", preempted, timeout=30)
    assert node_after["metadata"]["annotations"]["nodus.dev/terminate-at"] == at
    assert node_after["status"]["preemptionNotice"]["source"] == "aws-spot"

    done = aws.finished(namespace, "spot")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    attempts = aws.attempts(namespace, "spot")
    assert [a["status"]["phase"] for a in attempts] == ["Lost", "Succeeded"]
    assert attempts[0]["status"]["reason"] == "Preempted"
    assert attempts[1]["spec"]["node"] != node
    aws.wait_for(
        "the preempted instance to be terminated",
        lambda: instance_of(aws, node)[0]["State"]["Name"] in ("shutting-down", "terminated"),
    )


def test_a_new_controller_adopts_the_instance_and_none_is_leaked(aws: AwsCluster) -> None:
    namespace = project(aws)
    create_job(aws, namespace, "long", "sleep 12; echo finished", ["cpu-32c-us"])

    def running_attempt() -> dict[str, Any] | None:
        attempts = aws.attempts(namespace, "long")
        return attempts[0] if attempts and attempts[0].get("status", {}).get("phase") == "Running" else None

    node = aws.wait_for("the attempt to run", running_attempt, timeout=120)["spec"]["node"]
    [leader] = [p for p in aws.controllers if p.poll() is None]
    leader.send_signal(signal.SIGKILL)  # a machine dies: no cleanup, no Lease released
    leader.wait()
    aws.start_controllers("second")
    wait_for_leader(aws.cluster, "second")

    done = aws.finished(namespace, "long")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert [a["status"]["phase"] for a in aws.attempts(namespace, "long")] == ["Succeeded"]
    assert len(instance_of(aws, node)) == 1, "the new leader adopted the instance rather than starting another"

    # Idle hosts are released after their warm window; every instance ends with its Node.
    def nothing_left() -> bool:
        alive = [i for i in aws.instances.all() if i["State"]["Name"] in ("pending", "running")]
        nodes = aws.get(f"{API}/nodes")["items"]
        return not alive and not [n for n in nodes if n["status"].get("phase") in ("Booting", "Ready")]

    aws.wait_for("every instance to be terminated with its Node", nothing_left, timeout=120)
    assert not aws.instances.errors
