"""Pools through a real API server (ADR 0047): the kind and who writes it, join tokens, and a pool host's
credential exchange (a Node in the pool, maxHosts, name conflicts, expired, revoked and foreign tokens)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodus.apimachinery.sealing import Keyring
from nodus.storage import database
from tests.conftest import make_project
from tests.support import cluster as clusters
from tests.support import kubectl
from tests.support.cluster import Cluster
from tests.support.objects import API

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
EXCHANGE = f"{API}/nodecredentials"


@pytest.fixture(scope="module")
def keyed(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """An API server that issues node credentials (a secret key file), on a database of its own: the projects its
    tests make (dave owns one) stay out of the session cluster, whose tests count a user's projects."""
    url = asyncio.run(database.create_database(database_server))
    database.migrate(url)
    directory = tmp_path_factory.mktemp("pools")
    Keyring.generate(directory / "secret-keys")
    running = clusters.start(
        directory, url, extra_args=("--secret-key-file", str(directory / "secret-keys")), migrate=False
    )
    try:
        yield running
    finally:
        running.stop()
        asyncio.run(database.drop_database(url))


@pytest.fixture
def owned(keyed: Cluster) -> str:
    """A project where alice is Owner, bob Editor and carol Viewer."""
    with keyed.client() as admin:
        return make_project(
            admin,
            [
                {"name": "alice", "role": "Owner"},
                {"name": "bob", "role": "Editor"},
                {"name": "carol", "role": "Viewer"},
            ],
            credit=None,
        )


def pool_body(name: str = "lab", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "nodus.dev/v1", "kind": "Pool", "metadata": {"name": name}, "spec": spec}


def pools(project: str, name: str = "") -> str:
    return f"{API}/namespaces/{project}/pools" + (f"/{name}" if name else "")


def make_pool(cluster: Cluster, project: str, name: str = "lab", **spec: Any) -> dict[str, Any]:
    with cluster.client("alice") as alice:
        response = alice.post(pools(project), json=pool_body(name, **spec))
        assert response.status_code == 201, response.text
        return dict(response.json())


def mint(cluster: Cluster, project: str, pool: str = "lab", user: str = "alice", **spec: Any) -> httpx.Response:
    with cluster.client(user) as client:
        body = {"kind": "PoolJoinTokenRequest", "spec": spec} if spec else None
        return client.post(f"{pools(project, pool)}/jointokens", json=body)


def token_of(cluster: Cluster, project: str, pool: str = "lab") -> str:
    response = mint(cluster, project, pool)
    assert response.status_code == 201, response.text
    return str(response.json()["status"]["token"])


def exchange(cluster: Cluster, token: str, node: str, **spec: Any) -> httpx.Response:
    body = {"apiVersion": "nodus.dev/v1", "kind": "NodeCredentialRequest", "spec": {"nodeName": node, **spec}}
    with httpx.Client(base_url=cluster.url, verify=cluster.tls(), timeout=30) as client:
        return client.post(EXCHANGE, json=body, headers={"Authorization": f"Bearer {token}"})


def node_name() -> str:
    return f"host-{uuid.uuid4().hex[:8]}"


# --- the kind ------------------------------------------------------------------------------------


def test_only_owners_write_pools_and_every_member_reads_them(keyed: Cluster, owned: str) -> None:
    with keyed.client("bob") as bob:
        refused = bob.post(pools(owned), json=pool_body())
        assert refused.status_code == 403, refused.text
        assert "Owner" in refused.json()["message"] + refused.json()["fix"]
    created = make_pool(keyed, owned, maxHosts=2, description="the lab's machines")
    assert created["metadata"]["finalizers"] == ["nodus.dev/pool-hosts"]
    with keyed.client("carol") as carol:
        assert carol.get(pools(owned, "lab")).json()["spec"]["maxHosts"] == 2
        assert carol.patch(pools(owned, "lab"), json={"spec": {"maxHosts": 3}}, headers=MERGE).status_code == 403
    with keyed.client("bob") as bob:
        assert bob.patch(pools(owned, "lab"), json={"spec": {"maxHosts": 3}}, headers=MERGE).status_code == 403
        assert bob.delete(pools(owned, "lab")).status_code == 403
    with keyed.client("dave") as dave:
        assert dave.get(pools(owned, "lab")).status_code == 403
    with keyed.client("alice") as alice:
        patched = alice.patch(pools(owned, "lab"), json={"spec": {"maxHosts": 3}}, headers=MERGE)
        assert patched.status_code == 200 and patched.json()["metadata"]["generation"] == 2
        # The finalizer is Nodus's: an Owner cannot strip it to skip revoking the pool's hosts.
        stripped = alice.patch(pools(owned, "lab"), json={"metadata": {"finalizers": []}}, headers=MERGE)
        assert stripped.status_code == 200 and stripped.json()["metadata"]["finalizers"] == ["nodus.dev/pool-hosts"]


def test_an_invalid_pool_is_refused_naming_the_field(keyed: Cluster, owned: str) -> None:
    with keyed.client("alice") as alice:
        response = alice.post(pools(owned), json=pool_body(maxHosts=0, nodeLabels={"nodus.dev/pool": "x"}))
    assert response.status_code == 422, response.text
    fields = {cause["field"] for cause in response.json()["details"]["causes"]}
    assert fields == {"spec.maxHosts", "spec.nodeLabels[nodus.dev/pool]"}


def test_the_pool_table_shows_hosts_gpus_and_limits(keyed: Cluster, owned: str) -> None:
    make_pool(keyed, owned, maxHosts=4)
    with keyed.client() as admin:
        status = {"hosts": 3, "readyHosts": 2, "busyHosts": 1, "freeGPUs": 5, "totalGPUs": 8}
        written = admin.patch(f"{pools(owned, 'lab')}/status", json={"status": status}, headers=MERGE)
        assert written.status_code == 200, written.text
    with keyed.client("carol") as carol:
        table = carol.get(pools(owned), headers=TABLE).json()
    names = [column["name"] for column in table["columnDefinitions"]]
    assert names[:7] == ["Name", "Hosts", "GPUs", "Busy", "Max", "Last-Join", "Age"]
    [row] = table["rows"]
    assert row["cells"][:5] == ["lab", "2/3", "5/8", 1, "4"]


def test_pools_are_served_with_a_short_name(keyed: Cluster) -> None:
    with keyed.client("carol") as carol:
        resources = carol.get(API).json()["resources"]
    [pool] = [r for r in resources if r["name"] == "pools"]
    assert pool["namespaced"] and pool["kind"] == "Pool" and "pl" in pool["shortNames"]
    assert any(r["name"] == "pools/status" for r in resources)


def test_kubectl_applies_and_lists_pools(keyed: Cluster, owned: str, kubectl_binary: Path) -> None:
    config = keyed.kubeconfig("alice", namespace=owned)
    manifest = "apiVersion: nodus.dev/v1\nkind: Pool\nmetadata: {name: racks}\nspec: {maxHosts: 8}\n"
    assert (
        "pool.nodus.dev/racks created" in kubectl.run(kubectl_binary, config, "apply", "-f", "-", stdin=manifest).stdout
    )
    table = kubectl.run(kubectl_binary, config, "get", "pl").stdout.splitlines()
    assert table[0].split() == ["NAME", "HOSTS", "GPUS", "BUSY", "MAX", "LAST-JOIN", "AGE"]
    assert table[1].split()[:6] == ["racks", "0/0", "0/0", "0", "8", "<unknown>"]
    explained = kubectl.run(kubectl_binary, config, "explain", "pools.spec.maxHosts").stdout
    assert "most hosts" in explained


# --- join tokens ---------------------------------------------------------------------------------


def test_an_owner_mints_lists_and_revokes_join_tokens(keyed: Cluster, owned: str) -> None:
    make_pool(keyed, owned)
    response = mint(keyed, owned, expirationSeconds=600, description="rack 4")
    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    status = response.json()["status"]
    token_id, secret = re.fullmatch(r"([a-z0-9]{6})\.([a-z0-9]{16})", status["token"]).groups()  # type: ignore[union-attr]
    assert status["id"] == token_id
    assert status["command"] == (
        f"nodus agent --server {keyed.url} --certificate-authority ca.crt --join-token {status['token']}"
    )
    # The BootstrapToken behind it: bound to the pool, labelled with it, its secret only as a hash.
    with keyed.client() as admin:
        stored = admin.get(f"{API}/bootstraptokens/{token_id}").json()
    assert stored["spec"]["pool"] == {"project": owned, "name": "lab"}
    assert stored["metadata"]["labels"] == {"nodus.dev/pool": "lab", "nodus.dev/pool-project": owned}
    assert secret not in str(stored) and "nodeName" not in stored["spec"]

    with keyed.client("alice") as alice:
        listed = alice.get(f"{pools(owned, 'lab')}/jointokens")
        assert listed.status_code == 200, listed.text
        [entry] = listed.json()["items"]
        assert entry["id"] == token_id and entry["description"] == "rack 4" and entry["expired"] is False
        assert secret not in listed.text and "secretHash" not in listed.text
        assert alice.delete(f"{pools(owned, 'lab')}/jointokens/zzzzzz").status_code == 404
        assert alice.delete(f"{pools(owned, 'lab')}/jointokens/{token_id}").status_code == 200
        assert alice.get(f"{pools(owned, 'lab')}/jointokens").json()["items"] == []
    assert exchange(keyed, status["token"], node_name()).status_code == 401  # revoked


def test_only_the_pools_owners_touch_its_tokens(keyed: Cluster, owned: str) -> None:
    make_pool(keyed, owned)
    with keyed.client() as admin:
        # dave owns a project of his own: that makes him nothing in this one.
        make_project(admin, [{"name": "dave", "role": "Owner"}], credit=None)
    for user in ("bob", "carol", "dave"):
        assert mint(keyed, owned, user=user).status_code == 403, user
        with keyed.client(user) as client:
            assert client.get(f"{pools(owned, 'lab')}/jointokens").status_code == 403, user
    token_id = token_of(keyed, owned).split(".")[0]
    with keyed.client("bob") as bob:
        assert bob.delete(f"{pools(owned, 'lab')}/jointokens/{token_id}").status_code == 403
    with keyed.client("alice") as alice:
        # BootstrapTokens themselves stay administrators' and the controllers'.
        assert alice.get(f"{API}/bootstraptokens").status_code == 403
        # A token of another pool is not this pool's to revoke.
        make_pool(keyed, owned, "other")
        assert alice.delete(f"{pools(owned, 'other')}/jointokens/{token_id}").status_code == 404


def test_join_token_requests_are_checked(keyed: Cluster, owned: str) -> None:
    assert mint(keyed, owned, pool="nowhere").status_code == 404
    make_pool(keyed, owned)
    response = mint(keyed, owned, expirationSeconds=5, color="red")
    assert response.status_code == 422, response.text
    fields = {cause["field"] for cause in response.json()["details"]["causes"]}
    assert fields == {"spec.expirationSeconds", "spec.color"}
    assert mint(keyed, owned).json()["spec"] == {"pool": {"project": owned, "name": "lab"}}  # no body: defaults


# --- joining -------------------------------------------------------------------------------------


def test_a_pool_token_registers_the_host_in_the_pool(keyed: Cluster, owned: str) -> None:
    make_pool(keyed, owned, nodeLabels={"example.com/rack": "r4"})
    token = token_of(keyed, owned)
    name = node_name()
    response = exchange(keyed, token, name)
    assert response.status_code == 201, response.text
    assert response.json()["status"]["node"]["name"] == name
    with keyed.client("carol") as carol:
        node = carol.get(f"{API}/nodes/{name}").json()
        table = carol.get(f"{API}/nodes/{name}", headers=TABLE).json()
    assert node["spec"] == {"pool": {"project": owned, "name": "lab"}, "provider": "pool"}
    assert node["metadata"]["labels"] == {
        "example.com/rack": "r4",
        "nodus.dev/pool": "lab",
        "nodus.dev/pool-project": owned,
    }
    assert table["rows"][0]["cells"][1] == f"pool:{owned}/lab"
    # The same host again (a restart without its credential): the same Node.
    again = exchange(keyed, token, name)
    assert again.status_code == 201 and again.json()["status"]["node"]["uid"] == node["metadata"]["uid"]
    with keyed.client("alice") as alice:
        [entry] = alice.get(f"{pools(owned, 'lab')}/jointokens").json()["items"]
    assert entry["nodes"] == [name] and entry["lastUsedTime"]
    # Its credential works as any node's.
    credential = response.json()["status"]["token"]
    with httpx.Client(
        base_url=keyed.url, verify=keyed.tls(), headers={"Authorization": f"Bearer {credential}"}
    ) as host:
        assert host.get(f"{API}/nodes/{name}").status_code == 200


def test_a_pool_host_names_no_offering(keyed: Cluster, owned: str) -> None:
    make_pool(keyed, owned)
    response = exchange(keyed, token_of(keyed, owned), node_name(), offering="cpu-32c-eu")
    assert response.status_code == 422, response.text
    [cause] = response.json()["details"]["causes"]
    assert cause["field"] == "spec.offering" and "without --offering" in cause["message"]


def test_a_full_pool_refuses_another_host(keyed: Cluster, owned: str) -> None:
    make_pool(keyed, owned, maxHosts=1)
    token = token_of(keyed, owned)
    first = node_name()
    assert exchange(keyed, token, first).status_code == 201
    refused = exchange(keyed, token, node_name())
    assert refused.status_code == 403, refused.text
    assert refused.json()["details"]["causes"][0]["reason"] == "PoolFull"
    assert "maxHosts" in refused.json()["fix"]
    # A Lost host leaves its place to another.
    with keyed.client() as admin:
        lost = admin.patch(f"{API}/nodes/{first}/status", json={"status": {"phase": "Lost"}}, headers=MERGE)
        assert lost.status_code == 200, lost.text
    assert exchange(keyed, token, node_name()).status_code == 201


def test_a_name_that_is_something_elses_is_refused(keyed: Cluster, owned: str) -> None:
    make_pool(keyed, owned)
    make_pool(keyed, owned, "other")
    taken = node_name()
    with keyed.client() as admin:
        body = {"apiVersion": "nodus.dev/v1", "kind": "Node", "metadata": {"name": taken}, "spec": {"offering": "x"}}
        assert admin.post(f"{API}/nodes", json=body).status_code == 201
    refused = exchange(keyed, token_of(keyed, owned), taken)
    assert refused.status_code == 409, refused.text
    assert "--node-name" in refused.json()["fix"]
    # A host of one pool is not taken over with another pool's token.
    host = node_name()
    assert exchange(keyed, token_of(keyed, owned), host).status_code == 201
    assert exchange(keyed, token_of(keyed, owned, "other"), host).status_code == 409


def test_expired_tokens_and_pools_being_deleted_or_gone_join_nothing(keyed: Cluster, owned: str) -> None:
    make_pool(keyed, owned)
    with keyed.client() as admin:
        spec = {
            "pool": {"project": owned, "name": "lab"},
            "secret": "a" * 16,
            "expiration": "2020-01-01T00:00:00Z",
        }
        body = {"apiVersion": "nodus.dev/v1", "kind": "BootstrapToken", "metadata": {"name": "exp001"}, "spec": spec}
        admin.delete(f"{API}/bootstraptokens/exp001")
        assert admin.post(f"{API}/bootstraptokens", json=body).status_code == 201, "an expired token is storable"
    assert exchange(keyed, "exp001." + "a" * 16, node_name()).status_code == 401
    token = token_of(keyed, owned)
    with keyed.client("alice") as alice:
        assert alice.delete(pools(owned, "lab")).status_code == 202  # waits on its finalizer (no controllers here)
    deleting = exchange(keyed, token, node_name())
    assert deleting.status_code == 409 and "being deleted" in deleting.json()["message"]
    with keyed.client() as admin:
        gone = admin.patch(pools(owned, "lab"), json={"metadata": {"finalizers": []}}, headers=MERGE)
        assert gone.status_code == 200
    missing = exchange(keyed, token, node_name())
    assert missing.status_code == 404 and "not found" in missing.json()["message"]
