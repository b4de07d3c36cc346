"""A program that plants links, and archives that are crafted: never a host file read or written (ADR 0031).

Each test plays an attack of issue 15 (section 1) through the real API server, controllers, agents and
bubblewrap sandboxes. The canaries are host files in the test's directory, which the agent (root, like
the tests) could read and write if it followed a link the program left: the assertions are that their
bytes never reach the blob store and that they are never changed.
"""

from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_dataplane import PYTHON, create, finished, log_of, run_job, succeeded
from tests.support.images import registry_python_image
from tests.support.objects import API

pytestmark = pytest.mark.e2e


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    """A host file with bytes no one else has, beside a host directory holding another."""
    path = tmp_path / "canary"
    path.write_text(f"host secret {uuid.uuid4().hex}\n")
    (tmp_path / "canary-dir").mkdir()
    (tmp_path / "canary-dir" / "secret.txt").write_text(f"host secret {uuid.uuid4().hex}\n")
    return path


def blob_exists(running: Running, project: str, content: bytes) -> bool:
    with running.client() as client:
        response = client.head(f"{API}/namespaces/{project}/blobs/sha256:{hashlib.sha256(content).hexdigest()}")
        return response.status_code == 200


def attempt_status(running: Running, project: str, job: str) -> dict[str, Any]:
    [attempt] = running.attempts(project, job)
    return dict(attempt["status"])


def test_an_output_path_with_dot_dot_is_refused_at_create(running: Running) -> None:
    project = running.project()
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": "escape"},
        "spec": {
            "image": registry_python_image(),
            "command": ["true"],
            "outputs": [{"name": "keys", "path": "/nodus/outputs/../../../../secret-keys"}],
        },
    }
    with running.client() as client:
        response = client.post(f"{API}/namespaces/{project}/jobs", json=body)
    assert response.status_code == 422, response.text
    causes = response.json()["details"]["causes"]
    assert [cause["field"] for cause in causes] == ["spec.outputs[0].path"]
    assert ". or .. component" in causes[0]["message"]


def test_planted_links_never_make_an_output_of_a_host_file(running: Running, canary: Path) -> None:
    project = running.project()
    secret_dir = canary.parent / "canary-dir"
    cases = {
        # An output that is itself a link to a host file, or to a host directory.
        "file-link": (f"ln -s {canary} /nodus/outputs/x", "/nodus/outputs/x", "/nodus/outputs/x is a symbolic link"),
        "dir-link": (f"ln -s {secret_dir} /workspace/model", "/workspace/model", "/workspace/model is a symbolic link"),
        # An output below a directory the program replaced with a link.
        "parent-link": (
            f"ln -s {secret_dir} /workspace/run",
            "/workspace/run/secret.txt",
            "/workspace/run is a symbolic link",
        ),
    }
    for name, (script, path, _) in cases.items():
        run_job(running, project, name, script, outputs=[{"name": "leak", "path": path}], backoffLimit=0)
    # A link inside a declared output directory is kept as a link member: its target's bytes are not read.
    run_job(
        running,
        project,
        "inner-link",
        f"mkdir /nodus/outputs/model && echo w > /nodus/outputs/model/w && ln -s {canary} /nodus/outputs/model/leak",
        outputs=[{"name": "model", "path": "/nodus/outputs/model"}],
    )
    for name, (_, _, why) in cases.items():
        job = finished(running, project, name)
        assert job["status"]["phase"] == "Failed", job["status"]
        status = attempt_status(running, project, name)
        assert status["reason"] == "OutputPathUnsafe", status
        assert why in status["message"] and "without following symbolic links" in status["message"]
    done = succeeded(running, project, "inner-link")["status"]
    model = next(o for o in done["outputs"] if o["name"] == "model")
    with running.client() as client:
        response = client.get(f"{API}/namespaces/{project}/jobs/inner-link/outputs/model", params={"index": 0})
        assert response.status_code == 200, response.text
    assert hashlib.sha256(response.content).hexdigest() == model["sha256"]
    with tarfile.open(
        fileobj=io.BytesIO(zstandard.ZstdDecompressor().decompressobj().decompress(response.content))
    ) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["leak"].issym() and members["leak"].linkname == str(canary)
    for secret in (canary, secret_dir / "secret.txt"):
        assert not blob_exists(running, project, secret.read_bytes()), f"{secret} reached the blob store"


# Plants links where the agent writes and reads the checkpoint protocol's files, then counts on: the agent's
# requests keep coming (each is crash-consistent: an ack read through a link is no answer).
PLANT_CHECKPOINT_LINKS = r"""
import os, sys, time
request_tmp, request_link, ack_link = sys.argv[1:4]
directory = "/nodus/checkpoint"
os.symlink(request_tmp, os.path.join(directory, ".request.tmp"))  # the name the agent used to write through
os.symlink(ack_link, os.path.join(directory, "ack"))
state = os.path.join(os.environ["NODUS_CHECKPOINT_DIR"], "n")
replaced = 0
for n in range(300):
    open(state, "w").write(str(n))
    request = os.path.join(directory, "request")
    if os.path.isfile(request) and not os.path.islink(request):
        os.unlink(request)
        os.symlink(request_link, request)  # while a checkpoint is requested
        replaced += 1
        print("replaced", replaced, flush=True)
    if replaced >= 2:
        break
    time.sleep(0.1)
"""


def test_links_in_the_checkpoint_directory_leave_host_files_unchanged(running: Running, tmp_path: Path) -> None:
    canaries = {name: tmp_path / name for name in ("request-tmp", "request", "ack")}
    for path in canaries.values():
        path.write_text("999\n")  # an ack of every request, if the agent read it through the link
    before = {name: path.read_bytes() for name, path in canaries.items()}
    project = running.project()
    create(
        running,
        project,
        "jobs",
        {
            "apiVersion": "nodus.dev/v1",
            "kind": "Job",
            "metadata": {"name": "planter"},
            "spec": {
                "image": registry_python_image(),
                "command": [PYTHON, "-c", PLANT_CHECKPOINT_LINKS, *(str(p) for p in canaries.values())],
                "resources": {"cpu": "1"},
                "recovery": {"checkpoint": {"interval": "1m"}},
            },
        },
    )
    job = finished(running, project, "planter", timeout=180)
    assert {name: path.read_bytes() for name, path in canaries.items()} == before
    assert job["status"]["phase"] == "Succeeded", (job["status"], log_of(running, project, "planter"))
    assert "replaced 2" in log_of(running, project, "planter")
    checkpoint = attempt_status(running, project, "planter")["checkpoint"]
    assert checkpoint["seq"] >= 1 and checkpoint["consistency"] == "Crash", checkpoint


@pytest.fixture
def restarted_agents() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def restart_agent(running: Running, node: str) -> subprocess.Popen[bytes]:
    """Kill the host's agent alone (its sandboxes die with it) and start it again as it was: a restart."""
    work = running.directory / "hosts" / node
    pid = int((work / "pid").read_text())
    argv = [arg.decode() for arg in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if arg]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    with (work / "agent.log").open("ab") as log:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)


def test_a_link_planted_at_a_secret_is_replaced_on_restart_not_written_through(
    running: Running, canary: Path, restarted_agents: list[subprocess.Popen[bytes]]
) -> None:
    before = canary.read_bytes()
    project = running.project()
    value = f"s3cr3t-{uuid.uuid4().hex}"
    create(
        running,
        project,
        "secrets",
        {"apiVersion": "nodus.dev/v1", "kind": "Secret", "metadata": {"name": "api"}, "stringData": {"token": value}},
    )
    script = (
        'if [ -e /workspace/planted ]; then echo "second run: $(sha256sum < /nodus/secrets/api/token)"; exit 0; fi; '
        f"rm -f /nodus/secrets/api/token && ln -s {canary} /nodus/secrets/api/token && touch /workspace/planted && "
        "echo planted && sleep 600"
    )
    run_job(running, project, "restarted", script, secrets=["api"])
    running.wait_for("the link to be planted", lambda: "planted" in log_of(running, project, "restarted"))
    node = running.attempts(project, "restarted")[0]["spec"]["node"]
    restarted_agents.append(restart_agent(running, node))
    done = finished(running, project, "restarted", timeout=120)
    assert canary.read_bytes() == before
    assert done["status"]["phase"] == "Succeeded", (done["status"], log_of(running, project, "restarted"))
    assert f"second run: {hashlib.sha256(value.encode()).hexdigest()}" in log_of(running, project, "restarted")


def crafted_tar(canary_dir: Path) -> bytes:
    """A symbolic link to a host directory, then a file through it: the classic escape."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        link = tarfile.TarInfo("escape")
        link.type, link.linkname = tarfile.SYMTYPE, str(canary_dir)
        tar.addfile(link)
        data = b"planted by an archive\n"
        planted = tarfile.TarInfo("escape/planted")
        planted.size = len(data)
        tar.addfile(planted, io.BytesIO(data))
    return buffer.getvalue()


def test_crafted_archives_fail_the_attempt_and_write_nothing_outside(running: Running, canary: Path) -> None:
    canary_dir = canary.parent / "canary-dir"
    project = running.project()
    body = crafted_tar(canary_dir)
    digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
    with running.client() as client:
        response = client.post(
            f"{API}/namespaces/{project}/blobs",
            content=body,
            params={"digest": digest},
            headers={"Content-Type": "application/x-tar"},
        )
        assert response.status_code == 201, response.text
        create(
            running,
            project,
            "volumes",
            {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": "data"}, "spec": {}},
        )
        response = client.post(
            f"{API}/namespaces/{project}/volumes/data/revisions",
            content=body,
            headers={"Content-Type": "application/x-tar"},
        )
        assert response.status_code in (200, 201), response.text
    run_job(running, project, "from-source", "true", source={"blob": digest})
    run_job(
        running, project, "from-volume", "true", volumes=[{"volume": "data", "mountPath": "/data", "readOnly": True}]
    )
    # An output is packed with its links as link members; used as an input, it is refused like an upload.
    run_job(running, project, "produce", f"ln -s {canary_dir} /nodus/outputs/escape")
    run_job(
        running,
        project,
        "consume",
        "true",
        inputs=[{"name": "model", "output": {"job": "produce", "name": "outputs"}}],
    )
    succeeded(running, project, "produce")
    for name in ("from-source", "from-volume", "consume"):
        job = finished(running, project, name)
        assert (job["status"]["phase"], job["status"]["reason"]) == ("Failed", "ArchiveUnsafe"), job["status"]
        assert "unsafe archive member 'escape': is a symbolic link" in job["status"]["message"]
        # Not retried: the same archive fails the same way (an attempt lost with its host may come before).
        failed = [a for a in running.attempts(project, name) if a["status"].get("phase") == "Failed"]
        assert [a["status"]["reason"] for a in failed] == ["ArchiveUnsafe"]
    assert sorted(p.name for p in canary_dir.iterdir()) == ["secret.txt"]
