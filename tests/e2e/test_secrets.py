"""Secrets and Connections through the real API server: values go in, and come out only to administrators."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from nodus.apimachinery.sealing import Keyring
from nodus.storage.database import asyncpg_dsn
from tests.support import cluster as clusters
from tests.support import kubectl
from tests.support.cluster import Cluster
from tests.support.objects import API

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
# Distinctive plaintexts: none of them may appear in any response body, stream or stored row.
PASSWORD = "pw-" + uuid.uuid4().hex
TOKEN = b"tok-" + uuid.uuid4().hex.encode()
NEW_PASSWORD = "pw2-" + uuid.uuid4().hex
PLAINTEXTS = (PASSWORD.encode(), TOKEN, NEW_PASSWORD.encode(), base64.b64encode(TOKEN))


@pytest.fixture(scope="module")
def sealed_cluster(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """An API server with a secret key file, on the session's database (the session cluster has none)."""
    directory = tmp_path_factory.mktemp("sealed")
    Keyring.generate(directory / "secret-keys")
    running = clusters.start(
        directory, database_url, extra_args=("--secret-key-file", str(directory / "secret-keys")), migrate=False
    )
    yield running
    running.stop()


def secrets_path(project: str, name: str = "") -> str:
    return f"{API}/namespaces/{project}/secrets" + (f"/{name}" if name else "")


def make_secret(name: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "nodus.dev/v1", "kind": "Secret", "metadata": {"name": name}, **fields}


def assert_no_values(body: bytes) -> None:
    for plaintext in PLAINTEXTS:
        assert plaintext not in body, f"a value leaked: {body[:300]!r}"


def values(admin: httpx.Client, project: str, name: str, **params: Any) -> httpx.Response:
    return admin.get(secrets_path(project, name) + "/values", params=params)


def create(client: httpx.Client, project: str, name: str) -> dict[str, Any]:
    response = client.post(
        secrets_path(project),
        json=make_secret(name, stringData={"password": PASSWORD}, data={"token": base64.b64encode(TOKEN).decode()}),
    )
    assert response.status_code == 201, response.text
    assert_no_values(response.content)
    return response.json()  # type: ignore[no-any-return]


async def stored_bodies(database_url: str, project: str, name: str) -> list[str]:
    conn = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        rows = await conn.fetch(
            "SELECT body FROM objects WHERE kind = 'Secret' AND namespace = $1 AND name = $2 "
            "UNION ALL SELECT body FROM events WHERE kind = 'Secret' AND namespace = $1 AND name = $2",
            project,
            name,
        )
    finally:
        await conn.close()
    return [row["body"] for row in rows]


def test_values_are_write_only(sealed_cluster: Cluster, project: str) -> None:
    with sealed_cluster.client("bob") as bob, sealed_cluster.client("admin") as admin:
        rv0 = bob.get(secrets_path(project)).json()["metadata"]["resourceVersion"]
        created = create(bob, project, "db")
        assert "data" not in created and "stringData" not in created and "sealed" not in created
        assert created["type"] == "Opaque"
        assert created["status"]["version"] == 1 and created["status"]["keys"] == ["password", "token"]

        # Every way of reading it back.
        for path, params, headers in [
            (secrets_path(project, "db"), {}, {}),
            (secrets_path(project, "db"), {}, {"Accept": "application/yaml"}),
            (secrets_path(project, "db"), {"includeObject": "Object"}, TABLE),
            (secrets_path(project), {}, {}),
            (secrets_path(project), {"limit": "1"}, {}),
            (f"{API}/secrets", {}, {}),
            (secrets_path(project), {"includeObject": "Object"}, TABLE),
        ]:
            response = bob.get(path, params=params, headers=headers)
            assert response.status_code == 200, response.text
            assert_no_values(response.content)
            assert b"sealed" not in response.content
        listed = bob.get(secrets_path(project)).json()["items"]
        assert [item["status"]["keys"] for item in listed] == [["password", "token"]]

        # A new version: dry run first (nothing stored, nothing shown), then for real.
        change = {"stringData": {"password": NEW_PASSWORD}}
        dry = bob.patch(secrets_path(project, "db"), params={"dryRun": "All"}, json=change, headers=MERGE)
        assert dry.status_code == 200 and dry.json()["status"]["version"] == 2
        assert_no_values(dry.content)
        updated = bob.patch(secrets_path(project, "db"), json=change, headers=MERGE)
        assert updated.status_code == 200, updated.text
        assert_no_values(updated.content)
        assert updated.json()["status"]["version"] == 2
        assert [v["version"] for v in updated.json()["status"]["versions"]] == [1, 2]

        # A read-modify-write of what clients see keeps the values.
        labelled = updated.json()
        labelled["metadata"]["labels"] = {"team": "ml"}
        put = bob.put(secrets_path(project, "db"), json=labelled)
        assert put.status_code == 200, put.text
        assert put.json()["status"]["version"] == 2

        # Watches: replayed from the log, with initial events, and JSON and Table.
        for params, headers in [
            ({"resourceVersion": rv0}, {}),
            ({}, {}),
            ({"resourceVersion": rv0}, TABLE),
        ]:
            query = {"watch": "true", "timeoutSeconds": "1", **params}
            streamed = bob.get(secrets_path(project), params=query, headers=headers, timeout=10)
            assert streamed.status_code == 200
            assert b"ADDED" in streamed.content
            assert_no_values(streamed.content)
            assert b"sealed" not in streamed.content

        first = values(admin, project, "db", version=1, uid=created["metadata"]["uid"])
        assert first.status_code == 200, first.text
        assert first.json()["data"] == {
            "password": base64.b64encode(PASSWORD.encode()).decode(),
            "token": base64.b64encode(TOKEN).decode(),
        }
        assert first.headers["cache-control"] == "no-store"
        second = values(admin, project, "db", version=2)
        assert second.json()["version"] == 2
        assert second.json()["data"] == {"password": base64.b64encode(NEW_PASSWORD.encode()).decode()}
        current = values(admin, project, "db")
        assert current.json()["version"] == 2

    for body in asyncio.run(stored_bodies(sealed_cluster.database_url, project, "db")):
        assert_no_values(body.encode())
    assert_no_values(sealed_cluster.logs().encode())


async def test_live_watch_never_sends_values(sealed_cluster: Cluster, project: str) -> None:
    async with sealed_cluster.async_client("bob") as bob:
        listed = await bob.get(secrets_path(project))
        rv = listed.json()["metadata"]["resourceVersion"]

        async def watch() -> bytes:
            params = {"watch": "true", "timeoutSeconds": "3", "resourceVersion": rv}
            response = await bob.get(secrets_path(project), params=params, timeout=15)
            return response.content

        watching = asyncio.ensure_future(watch())
        await asyncio.sleep(0.7)  # caught up: events now arrive through the live path
        response = await bob.post(secrets_path(project), json=make_secret("live", stringData={"password": PASSWORD}))
        assert response.status_code == 201, response.text
        patched = await bob.patch(
            secrets_path(project, "live"), json={"data": {"token": base64.b64encode(TOKEN).decode()}}, headers=MERGE
        )
        assert patched.status_code == 200
        body = await watching
    assert b'"ADDED"' in body and b'"MODIFIED"' in body
    assert_no_values(body)
    assert b"sealed" not in body


def test_values_endpoint_is_for_administrators(sealed_cluster: Cluster, project: str) -> None:
    with sealed_cluster.client("bob") as bob, sealed_cluster.client("admin") as admin:
        created = create(bob, project, "pinned")
        for user in ("alice", "bob", "carol", "dave"):
            with sealed_cluster.client(user) as client:
                refused = values(client, project, "pinned")
                assert refused.status_code == 403, refused.text
                assert_no_values(refused.content)
        old_uid = created["metadata"]["uid"]
        assert bob.delete(secrets_path(project, "pinned")).status_code == 200
        create(bob, project, "pinned")
        gone = values(admin, project, "pinned", version=1, uid=old_uid)
        assert gone.status_code == 404
        assert "was deleted and recreated" in gone.json()["message"] and old_uid in gone.json()["message"]
        missing = values(admin, project, "pinned", version=7)
        assert missing.status_code == 404 and "no version 7" in missing.json()["message"]
        assert values(admin, project, "nothing-here").status_code == 404


def test_invalid_values_are_not_echoed(sealed_cluster: Cluster, project: str) -> None:
    with sealed_cluster.client("bob") as bob:
        response = bob.post(
            secrets_path(project), json=make_secret("bad", data={"password": f"{PASSWORD}!!"}, stringData={"ok": "x"})
        )
        assert response.status_code == 422, response.text
        assert [c["field"] for c in response.json()["details"]["causes"]] == ["data[password]"]
        assert_no_values(response.content)


def test_server_without_key_file_refuses_secret_writes(cluster: Cluster, project: str) -> None:
    with cluster.client("bob") as bob:
        response = bob.post(secrets_path(project), json=make_secret("nokey", stringData={"password": PASSWORD}))
    assert response.status_code == 503, response.text
    assert "--secret-key-file" in response.json()["message"]
    assert_no_values(response.content)


def test_kubectl_apply_twice_keeps_the_version(sealed_cluster: Cluster, kubectl_binary: Path, project: str) -> None:
    config = sealed_cluster.kubeconfig("bob", project)

    def kc(*args: str, stdin: str | None = None) -> str:
        return kubectl.run(kubectl_binary, config, *args, stdin=stdin).stdout

    manifest = (
        f"apiVersion: nodus.dev/v1\nkind: Secret\nmetadata:\n  name: applied\nstringData:\n  password: {PASSWORD}\n"
    )
    kc("apply", "-f", "-", stdin=manifest)
    kc("apply", "-f", "-", stdin=manifest)
    shown = kc("get", "secrets.nodus.dev", "applied", "-o", "yaml")
    assert "version: 1" in shown and PASSWORD not in shown
    assert "last-applied-configuration" in shown
    kc("apply", "--server-side", "-f", "-", stdin=manifest)
    kc("apply", "--server-side", "-f", "-", stdin=manifest)
    table = kc("get", "secrets.nodus.dev")
    assert table.split("\n")[0].split() == ["NAME", "TYPE", "KEYS", "VERSION", "AGE"]
    assert table.split("\n")[1].split()[:4] == ["applied", "Opaque", "1", "1"]
    kc("apply", "-f", "-", stdin=manifest.replace(PASSWORD, NEW_PASSWORD))
    assert "version: 2" in kc("get", "secrets.nodus.dev", "applied", "-o", "yaml")
    # A file without values keeps them.
    kc("apply", "-f", "-", stdin="apiVersion: nodus.dev/v1\nkind: Secret\nmetadata:\n  name: applied\n")
    final = kc("get", "secrets.nodus.dev", "applied", "-o", "yaml")
    assert "version: 2" in final and PASSWORD not in final and NEW_PASSWORD not in final


def connection(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "nodus.dev/v1", "kind": "Connection", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "fields"),
    [
        pytest.param({"type": "S3", "s3": {"endpoint": "http://s3.example.com", "bucket": "b",
                                           "credentialsSecret": "aws"}}, ["spec.s3.endpoint"], id="remote-http"),
        pytest.param({"type": "Neon"}, ["spec.postgres"], id="postgres-missing"),
        pytest.param({"type": "Postgres", "postgres": {"dsnSecret": "db"},
                      "s3": {"endpoint": "https://s3.example.com", "bucket": "b", "credentialsSecret": "aws"}},
                     ["spec.s3"], id="other-block"),
        pytest.param({"type": "Redis"}, ["spec.type"], id="unknown-type"),
    ],
)  # fmt: skip
def test_connection_validation(cluster: Cluster, project: str, spec: dict[str, Any], fields: list[str]) -> None:
    with cluster.client("bob") as bob:
        response = bob.post(f"{API}/namespaces/{project}/connections", json=connection("c", **spec))
    assert response.status_code == 422, response.text
    assert [c["field"] for c in response.json()["details"]["causes"]] == fields


def test_connection_is_created_with_defaults(cluster: Cluster, project: str, kubectl_binary: Path) -> None:
    with cluster.client("bob") as bob:
        body = connection("neon", type="Neon", postgres={"dsnSecret": "neon-dsn"})
        response = bob.post(f"{API}/namespaces/{project}/connections", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["postgres"]["dsnKey"] == "dsn"
    table = kubectl.run(kubectl_binary, cluster.kubeconfig("bob", project), "get", "conn").stdout
    assert table.split("\n")[0].split() == ["NAME", "TYPE", "AGE"]
    assert table.split("\n")[1].split()[:2] == ["neon", "Neon"]
