"""``/nodes/{name}/drain`` through the real server: who may drain which host, and what a drain writes.

Moving the work (checkpoint, Lost/Drained, replacement) is played with real agents in
tests/e2e/running/test_pools.py; here the API's rules: administrators drain any host, a project's Owners
the hosts of its Pools and nothing else, and a bad grace is a 422 naming the field.
"""

from __future__ import annotations

import uuid

import httpx

from tests.support.cluster import Cluster

NODES = "/apis/nodus.dev/v1/nodes"


def _node(admin: httpx.Client, pool: tuple[str, str] | None) -> str:
    name = f"drain-{uuid.uuid4().hex[:8]}"
    spec: dict[str, object] = {"offering": "cpu-4c-us", "provider": "manual"}
    if pool is not None:
        spec = {"pool": {"project": pool[0], "name": pool[1]}, "provider": "pool"}
    body = {"apiVersion": "nodus.dev/v1", "kind": "Node", "metadata": {"name": name}, "spec": spec}
    created = admin.post(NODES, json=body)
    assert created.status_code == 201, created.text
    return name


def test_an_owner_drains_and_uncordons_a_host_of_their_pool(
    cluster: Cluster, admin: httpx.Client, project: str
) -> None:
    name = _node(admin, (project, "lab"))
    with cluster.client("alice") as alice:
        drained = alice.post(f"{NODES}/{name}/drain", json={"kind": "NodeDrain", "spec": {"gracePeriodSeconds": 60}})
        assert drained.status_code == 202, drained.text
        status = drained.json()["status"]
        assert status["phase"] == "Drained"  # nothing runs there
        assert status["unschedulable"] is True and status["gracePeriodSeconds"] == 60
        node = admin.get(f"{NODES}/{name}").json()
        assert node["spec"]["unschedulable"] is True
        assert node["metadata"]["annotations"]["nodus.dev/drain-grace-seconds"] == "60"
        assert alice.get(f"{NODES}/{name}/drain").json()["status"]["phase"] == "Drained"
        undone = alice.delete(f"{NODES}/{name}/drain")
        assert undone.status_code == 200, undone.text
        assert undone.json()["status"]["phase"] == "NotDraining"
    node = admin.get(f"{NODES}/{name}").json()
    assert "unschedulable" not in node["spec"]
    assert "nodus.dev/drain-requested-at" not in (node["metadata"].get("annotations") or {})


def test_only_owners_of_the_pools_project_drain_its_hosts(cluster: Cluster, admin: httpx.Client, project: str) -> None:
    name = _node(admin, (project, "lab"))
    for user in ("bob", "carol", "dave"):  # Editor, Viewer, outsider
        with cluster.client(user) as client:
            refused = client.post(f"{NODES}/{name}/drain")
            assert refused.status_code == 403, (user, refused.text)
            assert f"Owners of project {project}" in refused.text
    assert "unschedulable" not in admin.get(f"{NODES}/{name}").json()["spec"]


def test_a_providers_host_is_drained_by_administrators_only(
    cluster: Cluster, admin: httpx.Client, project: str
) -> None:
    name = _node(admin, None)
    with cluster.client("alice") as alice:
        refused = alice.post(f"{NODES}/{name}/drain")
        assert refused.status_code == 403, refused.text
        assert "administrators" in refused.text
    assert admin.post(f"{NODES}/{name}/drain").status_code == 202
    assert admin.get(f"{NODES}/{name}").json()["spec"]["unschedulable"] is True


def test_a_bad_grace_is_refused_naming_the_field(admin: httpx.Client) -> None:
    name = _node(admin, None)
    refused = admin.post(f"{NODES}/{name}/drain", json={"spec": {"gracePeriodSeconds": -1}})
    assert refused.status_code == 422, refused.text
    assert refused.json()["details"]["causes"][0]["field"] == "spec.gracePeriodSeconds"
    missing = admin.post(f"{NODES}/no-such-node/drain")
    assert missing.status_code == 404, missing.text
    assert "unschedulable" not in admin.get(f"{NODES}/{name}").json()["spec"]
