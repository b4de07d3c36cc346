"""SSRF through the agent, played end to end (issue 15 §3, ADR 0032): real API server, controllers, agents.

A tenant names places for the agent to connect to from the host: URL inputs (and their redirects), git
sources, S3 endpoints and sink DSNs. Each attack aims at what the host reaches and a tenant must not:
the cloud's metadata service, the control plane's API server and database, the database's unix socket.

The job-running cluster (``running``) is started with ``--allow-loopback-endpoints`` (its test servers
are on this machine) and its agents forbid the cluster's database (as ``nodus dev`` does); a second API
server started without the flag (``strict``) plays what production refuses besides.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from nodus.storage import database
from tests.e2e.running.conftest import Running
from tests.support import cluster as clusters
from tests.support.images import registry_python_image
from tests.support.objects import API

pytestmark = pytest.mark.e2e

IMAGE = registry_python_image()


@pytest.fixture(scope="module")
def strict(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[clusters.Cluster]:
    """An API server without --allow-loopback-endpoints, as in production (no controllers: admission only)."""
    with clusters.on_own_database(database_server, tmp_path_factory.mktemp("strict")) as server:
        yield server


def project_on(server: clusters.Cluster) -> str:
    name = f"ssrf-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": name}}
    with server.client() as client:
        response = client.post(
            f"{API}/projects", json={**body, "spec": {"members": [{"name": "alice", "role": "Owner"}]}}
        )
        assert response.status_code == 201, response.text
    return name


def job(name: str, **spec: Any) -> dict[str, Any]:
    command = ["/bin/sh", "-c", spec.pop("script", "true")]
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"image": IMAGE, "command": command, "resources": {"cpu": "1"}, **spec},
    }


def post(server: clusters.Cluster, project: str, plural: str, body: dict[str, Any]) -> httpx.Response:
    with server.client("alice") as client:
        return client.post(f"{API}/namespaces/{project}/{plural}", json=body)


def refused_at(response: httpx.Response) -> dict[str, str]:
    """The fields a 422 names, with their messages."""
    assert response.status_code == 422, response.text
    status = response.json()
    assert status["reason"] == "Invalid"
    return {cause["field"]: cause["message"] for cause in status["details"]["causes"]}


def endpoint(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or 5432


# --- At admission: what the Job names is refused with a field error and the fix (with the loopback flag).


@pytest.mark.parametrize(
    ("target", "message"),
    [
        pytest.param(
            "https://169.254.169.254/latest/meta-data/iam/security-credentials/",
            "169.254.169.254 is link-local (the cloud metadata service): refused",
            id="metadata-service",
        ),
        pytest.param(
            "https://[::ffff:169.254.169.254]/latest/meta-data/",
            "is link-local (the cloud metadata service): refused",
            id="metadata-service-mapped",
        ),
        pytest.param("api-server", "the control plane's own endpoint", id="the-api-server"),
        pytest.param("api-server-decimal", "the control plane's own endpoint", id="the-api-server-decimal"),
    ],
)
def test_an_input_url_aimed_at_the_host_is_refused_at_create(running: Running, target: str, message: str) -> None:
    api_host, api_port = endpoint(running.cluster.url)
    url = {
        "api-server": f"https://{api_host}:{api_port}/apis/nodus.dev/v1/",
        "api-server-decimal": f"https://2130706433:{api_port}/apis/nodus.dev/v1/",
    }.get(target, target)
    project = running.project()
    response = post(running.cluster, project, "jobs", job("steal", inputs=[{"name": "data", "url": {"url": url}}]))
    causes = refused_at(response)
    assert list(causes) == ["spec.inputs[0].url.url"]
    assert message in causes["spec.inputs[0].url.url"]
    assert "name a public host" in causes["spec.inputs[0].url.url"]


def test_a_git_source_aimed_at_the_api_server_is_refused_at_create(running: Running) -> None:
    api_host, api_port = endpoint(running.cluster.url)
    repo = f"https://x-access-token:s3cret@{api_host}:{api_port}/apis/nodus.dev/v1.git"
    response = post(running.cluster, running.project(), "jobs", job("steal", source={"git": {"repo": repo}}))
    causes = refused_at(response)
    assert "the control plane's own endpoint" in causes["spec.source.git.repo"]
    assert "s3cret" not in response.text


@pytest.mark.parametrize(
    ("egress", "field", "message"),
    [
        pytest.param(
            {"policy": "Deny"},
            "spec.inputs[0].url.url",
            "the Job's egress policy is Deny, so the agent reaches no host on its behalf",
            id="deny",
        ),
        pytest.param(
            {"policy": "AllowList", "allow": ["pypi.org"]},
            "spec.inputs[0].url.url",
            "localhost is not in the Job's egress allow list; add localhost to spec.network.egress.allow",
            id="allow-list",
        ),
    ],
)
def test_the_jobs_egress_governs_what_the_agent_fetches(
    running: Running, egress: dict[str, Any], field: str, message: str
) -> None:
    assert running.https is not None
    url = f"{running.https.url}/anything"
    body = job("fetch", inputs=[{"name": "data", "url": {"url": url}}], network={"egress": egress})
    causes = refused_at(post(running.cluster, running.project(), "jobs", body))
    assert message in causes[field]


def s3_connection(endpoint_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Connection",
        "metadata": {"name": "lake"},
        "spec": {
            "type": "S3",
            "s3": {"endpoint": endpoint_url, "region": "us-east-1", "bucket": "lake", "credentialsSecret": "aws"},
        },
    }


def test_an_s3_endpoint_on_loopback_is_refused_without_the_flag(running: Running, strict: clusters.Cluster) -> None:
    local = s3_connection("http://127.0.0.1:9000")
    causes = refused_at(post(strict, project_on(strict), "connections", local))
    assert "127.0.0.1 is loopback (this host): refused" in causes["spec.s3.endpoint"]
    assert "--allow-loopback-endpoints" in causes["spec.s3.endpoint"]
    # With the flag (tests, nodus dev) a local S3 server is fine; the control plane's endpoints never are.
    assert post(running.cluster, running.project(), "connections", local).status_code == 201
    api_host, api_port = endpoint(running.cluster.url)
    causes = refused_at(post(running.cluster, running.project(), "connections", s3_connection(running.cluster.url)))
    assert f"{api_host}:{api_port} is the control plane's own endpoint" in causes["spec.s3.endpoint"]


def test_an_input_url_on_loopback_is_refused_without_the_flag(strict: clusters.Cluster) -> None:
    body = job("fetch", inputs=[{"name": "data", "url": {"url": "https://localhost:8000/weights.bin"}}])
    causes = refused_at(post(strict, project_on(strict), "jobs", body))
    assert "localhost is loopback (this host): refused" in causes["spec.inputs[0].url.url"]


# --- At connect time: what admission cannot see (a redirect, a DSN in a Secret) is refused by the agent.


@pytest.mark.parametrize(
    ("hop", "message"),
    [
        pytest.param("metadata", "169.254.169.254 is link-local (the cloud metadata service): refused", id="metadata"),
        pytest.param("api-server", "the control plane's own endpoint", id="the-api-server"),
    ],
)
def test_a_redirect_to_the_host_fails_the_job_at_once(running: Running, hop: str, message: str) -> None:
    assert running.https is not None
    api_host, api_port = endpoint(running.cluster.url)
    path = f"/hop-{uuid.uuid4().hex[:8]}"
    running.https.redirects[path] = {
        "metadata": "https://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "api-server": f"https://{api_host}:{api_port}/apis/nodus.dev/v1/namespaces",
    }[hop]
    project = running.project()
    body = job("hop", inputs=[{"name": "data", "url": {"url": f"{running.https.url}{path}"}}])
    assert post(running.cluster, project, "jobs", body).status_code == 201
    failed = running.wait_phase(project, "hop", "Succeeded", "Failed", timeout=120)["status"]
    assert (failed["phase"], failed["reason"]) == ("Failed", "DestinationRefused"), failed
    assert f"{running.https.url}{path} redirects to https://" in failed["message"]
    assert message in failed["message"]
    assert len(running.attempts(project, "hop")) == 1  # refused again would be refused the same: not retried


def aimed_at_the_control_plane(database_url: str, how: str) -> str | None:
    """A DSN aimed at the cluster's own database as a tenant writes it; None when it has no TCP address."""
    parts = urlsplit(database_url)
    name, port = parts.path.lstrip("/"), parts.port or 5432
    if how == "socket":
        return f"host=/var/run/postgresql dbname={name} user=postgres"
    if how == "socket-uri":
        return f"postgresql://postgres@/{name}?host=/var/run/postgresql"
    if not parts.hostname:
        return None
    if how == "tcp":
        return f"postgresql://postgres@{parts.hostname}:{port}/{name}"
    return f"host=localhost port={port} dbname={name} user=postgres"


@pytest.mark.parametrize(
    ("how", "message"),
    [
        pytest.param("socket", "is a unix socket or path on the agent's host: refused", id="socket"),
        pytest.param("socket-uri", "is a unix socket or path on the agent's host: refused", id="socket-uri"),
        pytest.param("tcp", "the control plane's own endpoint", id="tcp"),
        pytest.param("localhost", "the control plane's own endpoint", id="localhost"),
    ],
)
def test_a_sink_aimed_at_the_control_plane_database_loads_nothing(running: Running, how: str, message: str) -> None:
    dsn = aimed_at_the_control_plane(running.cluster.database_url, how)
    if dsn is None:
        pytest.skip("the embedded database listens on a unix socket only")
    table = f"stolen_{uuid.uuid4().hex[:8]}"
    project = running.project()
    secret = {"apiVersion": "nodus.dev/v1", "kind": "Secret", "metadata": {"name": "pg"}, "stringData": {"dsn": dsn}}
    assert post(running.cluster, project, "secrets", secret).status_code == 201
    connection = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Connection",
        "metadata": {"name": "warehouse"},
        "spec": {"type": "Postgres", "postgres": {"dsnSecret": "pg"}},
    }
    assert post(running.cluster, project, "connections", connection).status_code == 201
    sink = {"connection": "warehouse", "table": table, "mode": "Append"}
    body = job(
        "exfiltrate",
        script="printf 'id\\n1\\n' > /nodus/outputs/rows.csv",
        outputs=[{"name": "rows", "path": "/nodus/outputs/rows.csv", "sink": sink}],
    )
    assert post(running.cluster, project, "jobs", body).status_code == 201
    done = running.wait_phase(project, "exfiltrate", "Succeeded", "Failed", timeout=120)["status"]
    assert done["phase"] == "Succeeded", done  # a failed sink does not fail the index
    loaded = next(output for output in done["outputs"] if output["name"] == "rows")["sink"]
    assert loaded["phase"] == "Failed", loaded
    assert f"the database for table {table} is refused: " in loaded["message"]
    assert message in loaded["message"]

    async def exists() -> object:
        conn = await asyncpg.connect(database.asyncpg_dsn(running.cluster.database_url))
        try:
            return await conn.fetchval("SELECT to_regclass($1)", table)
        finally:
            await conn.close()

    assert asyncio.run(exists()) is None
