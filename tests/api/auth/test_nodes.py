"""The node authorizer's rules, as a table of requests against one node's bound Attempts (ADR 0035).

The graph is a list of Attempt objects like those the Job controller creates; end-to-end tests play the
same rules through the real server (tests/e2e/running/test_identities.py)."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.api.auth.nodes import Attributes, NodeAuthorizer
from nodus.api.auth.principal import NODES_GROUP, Principal
from nodus.api.errors import APIError

NODE = "n1"
MANIFEST = "sha256:" + "a" * 64
CHUNK = "sha256:" + "c" * 64
INPUT = "sha256:" + "1" * 64
OTHER = "sha256:" + "f" * 64
HOME = "sha256:" + "b" * 64  # a Workspace revision's manifest a running attempt mounts
HOME_CHUNK = "sha256:" + "d" * 64
OLD_HOME = "sha256:" + "e" * 64  # one an ended attempt mounted
OLD_HOME_CHUNK = "sha256:" + "9" * 64


def attempt(name: str, node: str = NODE, phase: str = "Running", namespace: str = "p", **spec: Any) -> dict[str, Any]:
    labels = {"nodus.dev/node": node, "nodus.dev/job": "j", "nodus.dev/gang-epoch": "1"}
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"node": node, **spec},
        "status": {"phase": phase},
    }


GRAPH = [
    attempt(
        "j-0-1",
        secrets=[{"name": "api", "uid": "u1", "version": 2}],
        inputs=[{"name": "data", "blob": INPUT}],
        volumes=[{"volume": "cache", "mountPath": "/cache", "readOnly": False}, {"volume": "ro", "readOnly": True}],
        restore={"manifest": MANIFEST, "seq": 3},
    ),
    attempt("j-1-1", phase="Succeeded", secrets=[{"name": "old", "uid": "u9", "version": 1}]),
    attempt("w-0-1", inputs=[{"name": "code", "blob": HOME, "workspace": {"name": "home", "revision": 2}}]),
    attempt(
        "w-0-0", phase="Failed", inputs=[{"name": "c", "blob": OLD_HOME, "workspace": {"name": "h", "revision": 1}}]
    ),
    attempt("x-0-1", namespace="q"),
]


class Graph:
    async def attempts_on(self, node: str, fresh: bool = False) -> list[dict[str, Any]]:
        return [a for a in GRAPH if a["metadata"]["labels"]["nodus.dev/node"] == node]

    async def manifest_chunks(self, namespace: str, digest: str) -> frozenset[str]:
        chunks = {MANIFEST: frozenset({CHUNK}), HOME: frozenset({HOME_CHUNK}), OLD_HOME: frozenset({OLD_HOME_CHUNK})}
        return chunks.get(digest, frozenset())


PRINCIPAL = Principal(user=f"system:node:{NODE}", groups=(NODES_GROUP,))


def request(
    verb: str, resource: str, namespace: str | None = None, name: str | None = None, sub: str = "", **kw: Any
) -> Attributes:
    return Attributes(PRINCIPAL, verb, resource, namespace, name, sub, **kw)


ALLOWED = [
    pytest.param(request("get", "offerings", name="o"), id="read-offerings"),
    pytest.param(request("list", "nodes"), id="list-nodes"),
    pytest.param(request("patch", "nodes", name=NODE, sub="status"), id="own-node-status"),
    pytest.param(request("create", "nodecredentials", name=NODE), id="rotate-own-credential"),
    pytest.param(request("patch", "leases", name=f"node.{NODE}"), id="renew-own-lease"),
    pytest.param(request("get", "leases", name=f"node.{NODE}"), id="read-own-lease"),
    pytest.param(request("watch", "attempts", label_selector=f"nodus.dev/node={NODE}"), id="watch-own-attempts"),
    pytest.param(request("list", "attempts", label_selector=f"nodus.dev/node in ({NODE})"), id="list-own-in"),
    pytest.param(
        request("watch", "attempts", "p", label_selector="nodus.dev/job=j,nodus.dev/gang-epoch=1"), id="gang-peers"
    ),
    pytest.param(request("get", "attempts", "p", "j-0-1"), id="get-own-attempt"),
    pytest.param(request("patch", "attempts", "p", "j-1-1", "status"), id="status-of-ended-own-attempt"),
    pytest.param(request("create", "attempts", "p", "j-0-1", "log"), id="append-own-log"),
    pytest.param(
        request("get", "secrets", "p", "api", "values", params={"uid": "u1", "version": "2"}), id="pinned-secret"
    ),
    pytest.param(request("get", "blobs", "p", params={"digest": INPUT, "method": "GET"}), id="pinned-input-blob"),
    pytest.param(request("get", "blobs", "p", params={"digest": MANIFEST, "method": "GET"}), id="restore-manifest"),
    pytest.param(request("get", "blobs", "p", params={"digest": CHUNK, "method": "GET"}), id="restore-chunk"),
    pytest.param(request("get", "blobs", "p", params={"digest": HOME, "method": "GET"}), id="workspace-manifest"),
    pytest.param(request("get", "blobs", "p", params={"digest": HOME_CHUNK, "method": "GET"}), id="workspace-chunk"),
    pytest.param(request("get", "blobs", "p", params={"digest": OTHER, "method": "HEAD"}), id="existence-check"),
    pytest.param(request("create", "blobs", "p"), id="upload-where-active"),
    pytest.param(request("create", "volumes", "p", "cache", "revisions"), id="writable-volume-revision"),
]

REFUSED = [
    pytest.param(request("patch", "nodes", name="n2", sub="status"), id="other-node-status"),
    pytest.param(request("update", "nodes", name=NODE), id="own-node-spec"),
    pytest.param(request("create", "nodes"), id="create-node"),
    pytest.param(request("create", "nodecredentials", name="n2"), id="credential-for-other-node"),
    pytest.param(request("patch", "leases", name="node.n2"), id="other-nodes-lease"),
    pytest.param(request("update", "leases", name="nodus-controllers"), id="the-controllers-lease"),
    pytest.param(request("patch", "leases", name=NODE), id="lease-named-like-the-node"),
    pytest.param(request("create", "leases"), id="create-a-lease"),
    pytest.param(request("delete", "leases", name=f"node.{NODE}"), id="delete-own-lease"),
    pytest.param(request("list", "leases"), id="list-leases"),
    pytest.param(request("list", "attempts"), id="list-every-attempt"),
    pytest.param(request("list", "attempts", label_selector="nodus.dev/node=n2"), id="list-other-nodes-attempts"),
    pytest.param(request("list", "attempts", label_selector=f"nodus.dev/node in ({NODE},n2)"), id="list-in-two-nodes"),
    pytest.param(request("list", "attempts", label_selector=f"nodus.dev/node!={NODE}"), id="list-not-own"),
    pytest.param(
        request("watch", "attempts", "p", label_selector="nodus.dev/job=k,nodus.dev/gang-epoch=1"), id="other-gang"
    ),
    pytest.param(request("watch", "attempts", "p", label_selector="nodus.dev/job=j"), id="gang-without-epoch"),
    pytest.param(request("get", "attempts", "p", "someone-else"), id="other-attempt"),
    pytest.param(request("patch", "attempts", "p", "j-0-1"), id="own-attempt-spec"),
    pytest.param(request("delete", "attempts", "p", "j-0-1"), id="delete-own-attempt"),
    pytest.param(
        request("get", "secrets", "p", "api", "values", params={"uid": "u1", "version": "1"}), id="unpinned-version"
    ),
    pytest.param(request("get", "secrets", "p", "api", "values", params={"uid": "u2", "version": "2"}), id="other-uid"),
    pytest.param(
        request("get", "secrets", "p", "api", "values", params={"uid": "", "version": ""}), id="current-version"
    ),
    pytest.param(
        request("get", "secrets", "p", "old", "values", params={"uid": "u9", "version": "1"}), id="ended-attempts-pin"
    ),
    pytest.param(
        request("get", "secrets", "q", "api", "values", params={"uid": "u1", "version": "2"}), id="other-project"
    ),
    pytest.param(request("get", "blobs", "p", params={"digest": OTHER, "method": "GET"}), id="unpinned-blob"),
    pytest.param(
        request("get", "blobs", "p", params={"digest": OLD_HOME_CHUNK, "method": "GET"}), id="ended-workspace-chunk"
    ),
    pytest.param(request("get", "blobs", "r", params={"digest": OTHER, "method": "HEAD"}), id="existence-elsewhere"),
    pytest.param(request("create", "blobs", "r"), id="upload-elsewhere"),
    pytest.param(request("create", "volumes", "p", "ro", "revisions"), id="read-only-volume-revision"),
    pytest.param(request("get", "jobs", "p", "j"), id="jobs"),
    pytest.param(request("get", "secrets", "p", "api"), id="secret-object"),
    pytest.param(request("create", "ledger", "p", sub="postings"), id="ledger"),
    pytest.param(request("create", "credits", name="p"), id="credits"),
    pytest.param(request("list", "bootstraptokens"), id="bootstrap-tokens"),
    pytest.param(request("get", "projects", name="p"), id="projects"),
]


@pytest.mark.parametrize("attrs", ALLOWED)
async def test_allowed(attrs: Attributes) -> None:
    await NodeAuthorizer(Graph()).authorize(attrs)


@pytest.mark.parametrize("attrs", REFUSED)
async def test_refused(attrs: Attributes) -> None:
    with pytest.raises(APIError) as refused:
        await NodeAuthorizer(Graph()).authorize(attrs)
    assert refused.value.reason == "Forbidden"
    assert f'User "system:node:{NODE}"' in refused.value.message
