"""Jobs run in their OCI images, through the real API server, controllers, podman agents and registries (ADR 0040,
ADR 0042): the entrypoint rules, the digest pinned for every attempt, pull secrets, and each image reason.

The cluster here is its own (agents with ``--runtime podman`` and the test registries named insecure), so the
other end-to-end tests are not disturbed by it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from nodus.apimachinery.sealing import Keyring
from nodus.storage import database
from tests.e2e.running.conftest import Running
from tests.support import cluster as clusters
from tests.support import controllers
from tests.support.images import base_image
from tests.support.objects import API, job
from tests.support.registry import Registry, running_registry

pytestmark = pytest.mark.slow  # long end-to-end: make test-slow (CI runs both tiers)

PODMAN = ("podman", "--cgroup-manager=cgroupfs")


@dataclass
class Images:
    running: Running
    open: Registry
    private: Registry
    untrusted: Registry
    base: str
    """The base image in the open registry: ``127.0.0.1:PORT/nodus/python:3.11``."""
    digest: str


# Images the tests commit, removed with the module's cluster.
COMMITTED: list[str] = []


def commit(changes: list[str], env: str) -> str:
    """A local image: the base image with ``changes`` (Containerfile instructions) and ``MARK=env``."""
    name = f"localhost/nodus-test/derived:{uuid.uuid4().hex[:8]}"
    COMMITTED.append(name)
    flags = [flag for change in [*changes, f"ENV MARK={env}"] for flag in ("--change", change)]
    container = subprocess.run(
        [*PODMAN, "create", base_image(), "true"], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        subprocess.run([*PODMAN, "commit", "--quiet", *flags, container, name], check=True, capture_output=True)
    finally:
        subprocess.run([*PODMAN, "rm", "--force", container], check=False, capture_output=True)
    return name


@pytest.fixture(scope="module")
def images(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Images]:
    directory = tmp_path_factory.mktemp("images")
    with (
        running_registry(directory / "open") as open_registry,
        running_registry(directory / "private", auth=True) as private,
        running_registry(directory / "untrusted") as untrusted,
    ):
        digest = open_registry.push(base_image(), "nodus/python:3.11")
        private.push(base_image(), "nodus/private:1")
        untrusted.push(base_image(), "nodus/python:3.11")
        url = asyncio.run(database.create_database(database_server))
        database.migrate(url)
        keys = directory / "secret-keys"
        Keyring.generate(keys)
        extra = ("--secret-key-file", str(keys), "--allow-loopback-endpoints", "--watch-bookmark-interval", "1s")
        cluster = clusters.start(directory, url, extra_args=extra, migrate=False)
        flags = []
        for registry in (open_registry, private):
            flags += ["--sim-agent-insecure-registry", registry.address]
        leader = controllers.start(cluster, directory, "images", tuple(flags))
        running = Running(cluster, leader, directory)
        try:
            controllers.wait_for_leader(cluster, "images")
            yield Images(
                running, open_registry, private, untrusted, f"{open_registry.address}/nodus/python:3.11", digest
            )
        finally:
            leader.stop()
            controllers.kill_leftover_agents(directory)
            cluster.stop()
            if COMMITTED:
                subprocess.run([*PODMAN, "rmi", "--force", *COMMITTED], check=False, capture_output=True)


def create(running: Running, project: str, name: str, image: str, **spec: Any) -> None:
    spec.setdefault("resources", {"cpu": "1"})
    body = job(name, image=image, **spec)
    with running.client() as client:
        response = client.post(f"{API}/namespaces/{project}/jobs", json=body)
        assert response.status_code == 201, response.text


def log(running: Running, project: str, name: str) -> str:
    """The Job's log so far ("" while it has no attempt yet)."""
    with running.client() as client:
        response = client.get(f"{API}/namespaces/{project}/jobs/{name}/log")
        if response.status_code == 404:
            return ""
        assert response.status_code == 200, response.text
        return response.text


def test_a_job_runs_in_its_image_and_reports_it(images: Images) -> None:
    running, project = images.running, images.running.project()
    script = "import os, pathlib; print('in', pathlib.Path('/etc/debian_version').read_text().strip(), os.getcwd())"
    create(running, project, "hello", images.base, command=["python", "-c", script])
    done = running.wait_phase(project, "hello", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", (done["status"], running.attempts(project, "hello"))
    assert done["status"]["image"] == {"reference": images.base, "digest": images.digest, "user": "root"}
    attempt = running.attempts(project, "hello")[0]
    assert attempt["status"]["image"]["digest"] == images.digest
    assert attempt["status"]["runtime"]["sandbox"] == "podman"
    assert "in 12." in log(running, project, "hello")


def test_entrypoint_and_cmd_follow_kubernetes_rules(images: Images) -> None:
    running, project = images.running, images.running.project()
    local = commit(
        ['ENTRYPOINT ["python3", "-c", "import sys; print(\\"argv\\", sys.argv[1:])"]', 'CMD ["from-cmd"]'], "one"
    )
    reference = f"{images.open.address}/nodus/entry:1"
    images.open.push(local, "nodus/entry:1")
    create(running, project, "neither", reference, command=None)
    create(running, project, "args", reference, command=None, args=["from-args"])
    create(running, project, "command", reference, command=["sh", "-c", 'echo "command $MARK"'])
    for name in ("neither", "args", "command"):
        done = running.wait_phase(project, name, "Succeeded", "Failed", timeout=120)
        assert done["status"]["phase"] == "Succeeded", (name, done["status"])
    assert "argv ['from-cmd']" in log(running, project, "neither")
    assert "argv ['from-args']" in log(running, project, "args")
    assert "command one" in log(running, project, "command")


def test_the_first_digest_is_pinned_for_every_attempt(images: Images) -> None:
    running, project = images.running, images.running.project()
    first, second = commit([], "first"), commit([], "second")
    reference = f"{images.open.address}/nodus/moving:latest"
    images.open.push(first, "nodus/moving:latest")
    # Fails after a while, so a second attempt starts after the tag has moved.
    script = 'echo "mark $MARK"; sleep 3; exit 1'
    create(running, project, "pinned", reference, command=["sh", "-c", script], backoffLimit=1)
    running.wait_for("the first attempt to run", lambda: "mark first" in log(running, project, "pinned"))
    images.open.push(second, "nodus/moving:latest")
    done = running.wait_phase(project, "pinned", "Failed", timeout=120)
    attempts = running.attempts(project, "pinned")
    assert len(attempts) == 2, attempts
    assert {a["status"]["image"]["digest"] for a in attempts} == {done["status"]["image"]["digest"]}
    assert "mark second" not in log(running, project, "pinned")
    assert attempts[-1]["spec"]["image"].endswith("@" + done["status"]["image"]["digest"])


def test_a_missing_image_fails_the_job_at_once(images: Images) -> None:
    running, project = images.running, images.running.project()
    create(running, project, "missing", f"{images.open.address}/nodus/python:no-such-tag", backoffLimit=3)
    done = running.wait_phase(project, "missing", "Failed", timeout=120)
    assert done["status"]["reason"] == "ImageNotFound", done["status"]
    assert len(running.attempts(project, "missing")) == 1


def test_pull_secrets_are_the_jobs_own(images: Images) -> None:
    running, project = images.running, images.running.project()
    reference = f"{images.private.address}/nodus/private:1"
    create(running, project, "anonymous", reference)
    done = running.wait_phase(project, "anonymous", "Failed", timeout=120)
    assert done["status"]["reason"] == "ImagePullUnauthorized", done["status"]
    assert images.private.password not in json.dumps(running.attempts(project, "anonymous"))

    auth = base64.b64encode(f"{images.private.username}:{images.private.password}".encode()).decode()
    config = json.dumps({"auths": {images.private.address: {"auth": auth}}})
    with running.client() as client:
        secret = {
            "apiVersion": "nodus.dev/v1",
            "kind": "Secret",
            "metadata": {"name": "registry"},
            "stringData": {".dockerconfigjson": config},
        }
        response = client.post(f"{API}/namespaces/{project}/secrets", json=secret)
        assert response.status_code == 201, response.text
    create(running, project, "authorized", reference, imagePullSecrets=["registry"])
    done = running.wait_phase(project, "authorized", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]


def test_a_plain_http_registry_not_named_insecure_is_refused(images: Images) -> None:
    running, project = images.running, images.running.project()
    create(running, project, "untrusted", f"{images.untrusted.address}/nodus/python:3.11")
    done = running.wait_phase(project, "untrusted", "Failed", timeout=120)
    assert done["status"]["reason"] == "ImageRegistryUntrusted", done["status"]


def test_a_registry_that_is_down_loses_the_attempt_not_the_job(images: Images) -> None:
    running, project = images.running, images.running.project()
    images.open.stop()
    try:
        # A tag is always resolved with the registry (a digest cached on the host would need no registry at all).
        create(running, project, "down", images.base)
        lost = running.wait_for(
            "a lost attempt",
            lambda: [a for a in running.attempts(project, "down") if (a.get("status") or {}).get("phase") == "Lost"],
            timeout=120,
        )
        assert lost[0]["status"]["reason"] == "ImagePullFailed", lost[0]["status"]
        assert running.job(project, "down")["status"]["phase"] not in ("Failed",)
    finally:
        images.open.start()


def test_limits_end_the_program_with_the_kernels_and_the_disks_reasons(images: Images) -> None:
    """resources.memory is the container's limit (the kernel's OOM kill is read, not guessed) and resources.disk
    its ephemeral storage (written past it, the program is evicted at the agent's next measure, within 10 s)."""
    running, project = images.running, images.running.project()
    hog = "import time; x = bytearray(512 * 1024 * 1024); time.sleep(60)"
    fill = "head -c 64M /dev/zero > /var/tmp/fill; sleep 120"
    create(running, project, "hog", images.base, command=["python3", "-c", hog], backoffLimit=0,
           resources={"cpu": "1", "memory": "64Mi"})  # fmt: skip
    create(running, project, "fill", images.base, command=["sh", "-c", fill], backoffLimit=0,
           resources={"cpu": "1", "disk": "16Mi"})  # fmt: skip
    # Customer failures: the Job fails after its backoffLimit (0), each attempt with the reason.
    for name, reason in (("hog", "OOMKilled"), ("fill", "EphemeralStorageExceeded")):
        done = running.wait_phase(project, name, "Failed", timeout=120)
        assert done["status"]["reason"] == "BackoffLimitExceeded", done["status"]
        attempt = running.attempts(project, name)[0]
        assert attempt["status"]["reason"] == reason, attempt["status"]
    assert "over resources.disk" in running.attempts(project, "fill")[0]["status"]["message"]
