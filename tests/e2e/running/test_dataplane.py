"""The data plane end to end: what goes into a Job's program and what comes out, with real processes.

Every test runs real Jobs on the simulated cloud (agent processes, bubblewrap sandboxes) and checks
what a user sees: the Job's status, its outputs through the API and the CLI, its logs, a Postgres
table, and - for Secrets - that the value is nowhere in clear: not in any API response, log line or
database row.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
import subprocess
import sys
import tarfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from nodus.storage import database
from tests.e2e.running.conftest import Running
from tests.support.images import registry_python_image
from tests.support.objects import API

pytestmark = pytest.mark.e2e

IMAGE = registry_python_image()
PYTHON = "/usr/bin/python3"  # the host's, visible read-only inside the sandbox (a venv may sit under /tmp)


def git(cwd: Path, *args: str) -> str:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "Test",
        "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "Test",
        "GIT_COMMITTER_EMAIL": "test@example.com",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def create(running: Running, project: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    with running.client() as client:
        response = client.post(f"{API}/namespaces/{project}/{plural}", json=body)
        assert response.status_code == 201, response.text
        return dict(response.json())


def run_job(running: Running, project: str, name: str, script: str, **spec: Any) -> dict[str, Any]:
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"image": IMAGE, "command": ["/bin/sh", "-c", script], "resources": {"cpu": "1"}, **spec},
    }
    return create(running, project, "jobs", body)


def finished(running: Running, project: str, name: str, timeout: float = 120) -> dict[str, Any]:
    return running.wait_phase(project, name, "Succeeded", "Failed", "Cancelled", timeout=timeout)


def succeeded(running: Running, project: str, name: str) -> dict[str, Any]:
    job = finished(running, project, name)
    assert job["status"]["phase"] == "Succeeded", (job["status"], log_of(running, project, name))
    return job


def log_of(running: Running, project: str, name: str, **params: Any) -> str:
    with running.client() as client:
        response = client.get(f"{API}/namespaces/{project}/jobs/{name}/log", params=params)
        return response.text


def test_a_pipeline_reads_the_first_jobs_output(running: Running, tmp_path: Path) -> None:
    project = running.project()
    # The consumer first: it waits Pending until the producer commits its output.
    run_job(
        running,
        project,
        "consume",
        "cat /nodus/inputs/model/weights.txt; cat /nodus/inputs/report; test ! -w /nodus/inputs/model",
        inputs=[
            {"name": "model", "output": {"job": "produce", "name": "outputs"}},
            {"name": "report", "output": {"job": "produce", "name": "report"}},
        ],
    )
    waiting = running.wait_for(
        "consume to wait for the output", lambda: running.job(project, "consume")["status"].get("reason")
    )
    assert waiting == "OutputNotReady"
    assert running.job(project, "consume")["status"]["phase"] == "Pending"
    run_job(
        running,
        project,
        "produce",
        "echo trained-weights > /nodus/outputs/weights.txt; echo '{\"loss\": 0.1}' > /workspace/report.json",
        outputs=[{"name": "report", "path": "/workspace/report.json"}],
    )
    produced = succeeded(running, project, "produce")["status"]
    outputs = {o["name"]: o for o in produced["outputs"]}
    assert set(outputs) == {"outputs", "report"}
    report = b'{"loss": 0.1}\n'
    assert outputs["report"]["sha256"] == hashlib.sha256(report).hexdigest()
    assert outputs["report"]["size"] == len(report)
    assert produced["storage"]["bytes"] == sum(o["size"] for o in produced["outputs"])

    consumed = succeeded(running, project, "consume")
    assert {i["name"]: i["sha256"] for i in consumed["status"]["inputs"]} == {
        "model": outputs["outputs"]["sha256"],
        "report": outputs["report"]["sha256"],
    }
    assert consumed["status"]["inputsReadyTime"]
    text = log_of(running, project, "consume")
    assert "trained-weights" in text and '"loss": 0.1' in text

    with running.client() as client:
        response = client.get(f"{API}/namespaces/{project}/jobs/produce/outputs/report", params={"index": 0})
        assert response.status_code == 200, response.text
        assert response.content == report
    target = tmp_path / "outputs.tar.zst"
    cli = subprocess.run(
        [sys.executable, "-m", "nodus", "outputs", "get", "produce", "outputs", "-n", project, "-o", str(target)],
        env={"KUBECONFIG": str(running.cluster.kubeconfig("admin")), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert hashlib.sha256(target.read_bytes()).hexdigest() == outputs["outputs"]["sha256"]


def test_a_url_input_is_checked_against_its_digest(running: Running) -> None:
    assert running.www is not None and running.https is not None
    content = uuid.uuid4().bytes * 1000
    name = f"data-{uuid.uuid4().hex[:6]}.bin"
    (running.www / name).write_bytes(content)
    right, wrong = hashlib.sha256(content).hexdigest(), "0" * 64
    project = running.project()
    url = f"{running.https.url}/{name}"
    run_job(
        running,
        project,
        "right",
        "wc -c < /nodus/inputs/data",
        inputs=[{"name": "data", "url": {"url": url, "sha256": right}}],
    )
    run_job(running, project, "wrong", "true", inputs=[{"name": "data", "url": {"url": url, "sha256": wrong}}])
    run_job(running, project, "unpinned", "true", inputs=[{"name": "data", "url": {"url": url}}])

    succeeded(running, project, "right")
    assert str(len(content)) in log_of(running, project, "right")
    failed = finished(running, project, "wrong")["status"]
    assert failed["phase"] == "Failed"
    assert failed["reason"] == "InputDigestMismatch"
    assert right in failed["message"] and wrong in failed["message"]
    assert len([a for a in running.attempts(project, "wrong")]) == 1  # not retried
    pinned = succeeded(running, project, "unpinned")["status"]
    assert pinned["inputs"] == [{"name": "data", "sha256": right}]


@pytest.fixture
def plain_http_server() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"reached the host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


CONNECT = """
import os, sys, urllib.request
port = sys.argv[1]
for name in ("NO_PROXY", "no_proxy"):  # so that urllib sends even localhost through the proxy
    os.environ.pop(name, None)
def fetch(url, proxy):
    handler = urllib.request.ProxyHandler({"http": os.environ["HTTP_PROXY"]} if proxy else {})
    try:
        return urllib.request.build_opener(handler).open(url, timeout=5).read().decode()
    except Exception as error:
        return f"refused: {error}"
print("direct:", fetch(f"http://localhost:{port}/", False))
if os.environ.get("HTTP_PROXY"):
    print("allowed:", fetch(f"http://localhost:{port}/", True))
    print("unlisted:", fetch(f"http://127.0.0.1:{port}/", True))
"""


def test_egress_is_enforced_by_the_container(running: Running, plain_http_server: int) -> None:
    project = running.project()
    command = [PYTHON, "-c", CONNECT, str(plain_http_server)]
    for name, egress in (
        ("open", {"policy": "Open"}),
        ("deny", {"policy": "Deny"}),
        ("allow", {"policy": "AllowList", "allow": ["localhost"]}),
    ):
        create(
            running,
            project,
            "jobs",
            {
                "apiVersion": "nodus.dev/v1",
                "kind": "Job",
                "metadata": {"name": name},
                "spec": {"image": IMAGE, "command": command, "resources": {"cpu": "1"}, "network": {"egress": egress}},
            },
        )
    for name in ("open", "deny", "allow"):
        succeeded(running, project, name)
    # Open is the internet, never the host: localhost is the container's own (ADR 0041; test_container_isolation
    # shows the host's other addresses refused too).
    assert "direct: refused" in log_of(running, project, "open")
    assert "direct: refused" in log_of(running, project, "deny")
    allowed = log_of(running, project, "allow")
    assert "direct: refused" in allowed
    assert "allowed: reached the host" in allowed
    assert "unlisted: refused" in allowed and "403" in allowed


def test_a_sidecar_serves_the_program_and_never_holds_the_job(running: Running) -> None:
    project = running.project()
    sidecar = {
        "name": "web",
        "command": ["/bin/sh", "-c", f"echo sidecar up; exec {PYTHON} -m http.server 18765 --bind 127.0.0.1"],
        "startupTimeout": "30s",
    }
    # The sidecar is ready once it ran 2 s; on a loaded machine its server may bind a moment later: retry.
    probe = (
        "import time, urllib.request as u\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        print(len(u.urlopen('http://127.0.0.1:18765/').read()) > 0); break\n"
        "    except OSError:\n"
        "        time.sleep(0.2)\n"
    )
    fetch = f'{PYTHON} -c "{probe}"'
    run_job(running, project, "with-sidecar", fetch, sidecars=[sidecar], network={"egress": {"policy": "Deny"}})
    done = succeeded(running, project, "with-sidecar")
    assert "True" in log_of(running, project, "with-sidecar")
    assert "sidecar up" in log_of(running, project, "with-sidecar", container="web")
    assert done["status"]["completionTime"]


def test_a_secret_reaches_the_program_and_is_never_in_clear(running: Running) -> None:
    project = running.project()
    value = f"s3cr3t-{uuid.uuid4().hex}"
    digest = hashlib.sha256(value.encode()).hexdigest()
    create(
        running,
        project,
        "secrets",
        {"apiVersion": "nodus.dev/v1", "kind": "Secret", "metadata": {"name": "api"}, "stringData": {"token": value}},
    )
    script = (
        f'test "$(printf %s "$TOKEN" | sha256sum | cut -d" " -f1)" = {digest} && '
        f'test "$(sha256sum < /nodus/secrets/api/token | cut -d" " -f1)" = {digest} && echo both-match; '
        'echo "careless: $TOKEN"'  # printed by the program: masked before it leaves the host
    )
    run_job(
        running,
        project,
        "uses-secret",
        script,
        env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}}}],
        secrets=["api"],
    )
    job = succeeded(running, project, "uses-secret")
    assert job["status"]["secretVersions"] == {"api": 1}
    assert "both-match" in log_of(running, project, "uses-secret")
    assert "careless: ***" in log_of(running, project, "uses-secret")

    with running.client() as client:
        bodies = [
            client.get(f"{API}/namespaces/{project}/{path}").content
            for path in ("secrets", "secrets/api", "jobs", "jobs/uses-secret", "attempts", "jobs/uses-secret/log")
        ]
    for body in bodies:
        assert value.encode() not in body
    assert value not in running.logs()

    async def rows_containing() -> int:
        connection = await asyncpg.connect(database.asyncpg_dsn(running.cluster.database_url))
        try:
            found = 0
            for table in ("objects", "events", "attempt_logs"):
                found += await connection.fetchval(
                    f"SELECT count(*) FROM {table} t WHERE strpos(t::text, $1) > 0", value
                )
            return int(found)
        finally:
            await connection.close()

    import asyncio

    assert asyncio.run(rows_containing()) == 0


def test_an_output_sink_loads_rows_into_postgres(running: Running, database_server: str) -> None:
    import asyncio

    from tests.support.forwarding import Forwarder

    url = asyncio.run(database.create_database(database_server))
    # The customer's database at an address of its own: the server's is the control plane's, which agents refuse.
    forwarder = Forwarder(database_server)
    dsn = forwarder.url(url)
    try:
        project = running.project()
        create(
            running,
            project,
            "secrets",
            {"apiVersion": "nodus.dev/v1", "kind": "Secret", "metadata": {"name": "pg"}, "stringData": {"dsn": dsn}},
        )
        create(
            running,
            project,
            "connections",
            {
                "apiVersion": "nodus.dev/v1",
                "kind": "Connection",
                "metadata": {"name": "warehouse"},
                "spec": {"type": "Postgres", "postgres": {"dsnSecret": "pg"}},
            },
        )
        rows = "city,population\\nParis,2100000\\nLyon,520000\\nNice,340000\\n"
        run_job(
            running,
            project,
            "load",
            f"printf '{rows}' > /nodus/outputs/cities.csv; "
            'test "$(cat /nodus/connections/warehouse/dsn)" = "$NODUS_CONNECTION_WAREHOUSE_DSN" && '
            "! touch /nodus/connections/warehouse/x 2>/dev/null && echo connection-exposed",
            connections=["warehouse"],
            outputs=[
                {
                    "name": "cities",
                    "path": "/nodus/outputs/cities.csv",
                    "sink": {"connection": "warehouse", "table": "cities", "mode": "Append"},
                }
            ],
        )
        status = succeeded(running, project, "load")["status"]
        assert "connection-exposed" in log_of(running, project, "load")
        sink = next(o for o in status["outputs"] if o["name"] == "cities")["sink"]
        assert sink == {"phase": "Loaded", "rows": 3}, sink

        async def cities() -> list[tuple[str, str]]:
            connection = await asyncpg.connect(dsn)
            try:
                return [tuple(r) for r in await connection.fetch("SELECT city, population FROM cities ORDER BY city")]
            finally:
                await connection.close()

        assert asyncio.run(cities()) == [("Lyon", "520000"), ("Nice", "340000"), ("Paris", "2100000")]
    finally:
        forwarder.close()
        asyncio.run(database.drop_database(url))


def test_source_init_command_and_progress(running: Running) -> None:
    project = running.project()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        script = (
            b"import json\n"
            b"for i in range(1, 6):\n"
            b"    line = {'stage': 'train', 'completed': i, 'total': 5, 'metrics': {'loss': 1 / i}}\n"
            b"    print(json.dumps(line), file=open('/nodus/progress', 'a'), flush=True)\n"
            b"print('ran from source')\n"
        )
        info = tarfile.TarInfo("main.py")
        info.size = len(script)
        tar.addfile(info, io.BytesIO(script))
    body = archive.getvalue()
    digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
    with running.client() as client:
        response = client.post(
            f"{API}/namespaces/{project}/blobs",
            content=body,
            params={"digest": digest},
            headers={"Content-Type": "application/x-tar"},
        )
        assert response.status_code == 201, response.text
    run_job(
        running,
        project,
        "from-source",
        f"test -f prepared && {PYTHON} main.py",
        source={"blob": digest},
        initCommand={"command": ["/bin/sh", "-c", "echo preparing; touch prepared"], "timeout": "1m"},
    )
    status = succeeded(running, project, "from-source")["status"]
    assert status["source"] == {"blob": digest}
    assert "ran from source" in log_of(running, project, "from-source")
    assert "preparing" in log_of(running, project, "from-source", container="init")
    assert status["progress"]["stage"] == "train"
    assert status["progress"]["units"] == {"completed": 5, "total": 5}
    assert status["unitMetrics"]["completed"] == 5

    run_job(
        running,
        project,
        "bad-init",
        "true",
        initCommand={"command": ["/bin/sh", "-c", "echo no-deps >&2; exit 3"]},
        backoffLimit=0,
    )
    failed = finished(running, project, "bad-init")["status"]
    assert failed["phase"] == "Failed"
    assert "no-deps" in failed["message"]


def test_volumes_read_only_and_writable(running: Running) -> None:
    project = running.project()
    create(
        running,
        project,
        "volumes",
        {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": "data"}, "spec": {}},
    )
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        payload = b"first revision\n"
        info = tarfile.TarInfo("hello.txt")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    with running.client() as client:
        response = client.post(
            f"{API}/namespaces/{project}/volumes/data/revisions",
            content=archive.getvalue(),
            headers={"Content-Type": "application/x-tar"},
        )
        assert response.status_code in (200, 201), response.text
    run_job(
        running,
        project,
        "reader",
        "cat /data/hello.txt; touch /data/x 2>/dev/null && echo writable || echo read-only",
        volumes=[{"volume": "data", "mountPath": "/data", "readOnly": True}],
    )
    status = succeeded(running, project, "reader")["status"]
    text = log_of(running, project, "reader")
    assert "first revision" in text and "read-only" in text
    assert status["volumes"] == [{"volume": "data", "mountPath": "/data", "revision": 1}]

    run_job(
        running, project, "writer", "echo second > /data/new.txt", volumes=[{"volume": "data", "mountPath": "/data"}]
    )
    written = succeeded(running, project, "writer")["status"]
    assert written["volumes"][0]["revision"] == 2
    run_job(
        running,
        project,
        "reader2",
        "cat /data/new.txt /data/hello.txt",
        inputs=[{"name": "d", "volume": {"name": "data"}}],
        volumes=[{"volume": "data", "mountPath": "/data", "readOnly": True}],
    )
    succeeded(running, project, "reader2")
    assert "second" in log_of(running, project, "reader2")


def test_a_git_source_is_checked_out_and_its_commit_pinned(running: Running, tmp_path: Path) -> None:
    assert running.www is not None and running.https is not None
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "--quiet", "--initial-branch=main")
    (work / "train.py").write_text("print('trained at v1')\n")
    git(work, "add", ".")
    git(work, "commit", "--quiet", "-m", "first")
    commit = git(work, "rev-parse", "HEAD").strip()
    name = f"repo-{uuid.uuid4().hex[:6]}.git"
    git(running.www, "clone", "--quiet", "--bare", str(work), name)
    git(running.www / name, "update-server-info")  # served by the dumb HTTP protocol
    project = running.project()
    run_job(
        running,
        project,
        "from-git",
        f"{PYTHON} train.py",
        source={"git": {"repo": f"{running.https.url}/{name}", "ref": "main"}},
    )
    status = succeeded(running, project, "from-git")["status"]
    assert status["source"] == {"commit": commit}
    assert "trained at v1" in log_of(running, project, "from-git")
    run_job(
        running, project, "no-such-ref", "true", source={"git": {"repo": f"{running.https.url}/{name}", "ref": "nope"}}
    )
    failed = finished(running, project, "no-such-ref")["status"]
    assert (failed["phase"], failed["reason"]) == ("Failed", "SourceUnavailable")


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A real S3-compatible server (moto's) on 127.0.0.1, with a bucket ``lake`` holding ``sets/eval.jsonl``."""
    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="key", aws_secret_access_key="secret", region_name="us-east-1"
    )
    client.create_bucket(Bucket="lake")
    client.put_object(Bucket="lake", Key="sets/eval.jsonl", Body=S3_BODY)
    yield endpoint
    server.stop()


S3_BODY = b'{"q": "2+2", "a": "4"}\n' * 1000


def test_a_bucket_input_comes_through_its_connection(running: Running, s3_endpoint: str) -> None:
    project = running.project()
    create(
        running,
        project,
        "secrets",
        {
            "apiVersion": "nodus.dev/v1",
            "kind": "Secret",
            "metadata": {"name": "aws"},
            "stringData": {"accessKeyID": "key", "secretAccessKey": "secret"},
        },
    )
    create(
        running,
        project,
        "connections",
        {
            "apiVersion": "nodus.dev/v1",
            "kind": "Connection",
            "metadata": {"name": "lake"},
            "spec": {
                "type": "S3",
                "s3": {"endpoint": s3_endpoint, "region": "us-east-1", "bucket": "lake", "credentialsSecret": "aws"},
            },
        },
    )
    digest = hashlib.sha256(S3_BODY).hexdigest()
    bucket = {"connection": "lake", "uri": "s3://lake/sets/eval.jsonl"}
    run_job(
        running,
        project,
        "evaluate",
        "wc -l < /nodus/inputs/eval",
        inputs=[{"name": "eval", "bucket": {**bucket, "sha256": digest}}],
    )
    run_job(running, project, "tampered", "true", inputs=[{"name": "eval", "bucket": {**bucket, "sha256": "1" * 64}}])
    status = succeeded(running, project, "evaluate")["status"]
    assert status["inputs"] == [{"name": "eval", "sha256": digest}]
    assert "1000" in log_of(running, project, "evaluate")
    failed = finished(running, project, "tampered")["status"]
    assert (failed["phase"], failed["reason"]) == ("Failed", "InputDigestMismatch")


def test_a_secret_keeps_the_versions_running_jobs_pin(running: Running) -> None:
    project = running.project()
    body = {"apiVersion": "nodus.dev/v1", "kind": "Secret", "metadata": {"name": "rotating"}, "stringData": {"k": "v1"}}
    create(running, project, "secrets", body)
    env = [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "rotating", "key": "k"}}}]
    run_job(running, project, "long", "sleep 120", env=env)
    running.wait_phase(project, "long", "Running")
    with running.client() as client:
        response = client.patch(
            f"{API}/namespaces/{project}/secrets/rotating",
            json={"stringData": {"k": "v2"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text
        assert response.json()["status"]["version"] == 2

        def pins() -> str | None:
            secret = client.get(f"{API}/namespaces/{project}/secrets/rotating").json()
            return (secret["metadata"].get("annotations") or {}).get("nodus.dev/pinned-versions")

        assert running.wait_for("the running Job's pin on the Secret", lambda: pins() == "1")
        response = client.patch(
            f"{API}/namespaces/{project}/jobs/long",
            json={"spec": {"state": "Cancelled"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text
        assert running.wait_for("the pin to go with the Job", lambda: pins() == "")
