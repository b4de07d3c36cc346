"""Least privilege, played as an attacker (ADR 0035): node credentials, bootstrap tokens, the controllers'
identity and Nodus's finalizers, through the real API server, controllers and agents.

The attacker holds a node credential: it joined with a bootstrap token as node ``rogue-*`` (a host it
controls) and now tries what a compromised host would. Every attempt outside its Node and the Attempts
bound to it is a 403; a deleted Node's credential stops working.
"""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_agent import OFFERING, join_token
from tests.e2e.running.test_dataplane import create as create_object
from tests.e2e.running.test_jobs import create, shell
from tests.support.objects import API

pytestmark = pytest.mark.e2e

EXCHANGE = f"{API}/nodecredentials"


def exchange(running: Running, token: str, node: str, offering: str | None = OFFERING, **spec: Any) -> httpx.Response:
    body = {"apiVersion": "nodus.dev/v1", "kind": "NodeCredentialRequest", "spec": {"nodeName": node, **spec}}
    if offering:
        body["spec"]["offering"] = offering
    with httpx.Client(base_url=running.cluster.url, verify=running.cluster.tls(), timeout=30) as client:
        return client.post(EXCHANGE, json=body, headers={"Authorization": f"Bearer {token}"})


def as_token(running: Running, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=running.cluster.url,
        verify=running.cluster.tls(),
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


@pytest.fixture
def rogue(running: Running) -> Iterator[tuple[str, str]]:
    """(node name, node credential) of a host the attacker controls, joined the regular way."""
    name = f"rogue-{uuid.uuid4().hex[:6]}"
    response = exchange(running, join_token(running), name)
    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    yield name, response.json()["status"]["token"]
    with running.client() as client:
        client.delete(f"{API}/nodes/{name}")


@pytest.fixture
def victim(running: Running) -> Iterator[dict[str, Any]]:
    """Another project's Job that pins a Secret, running on a simulated host (not the rogue one)."""
    project = running.project()
    value = f"victim-{uuid.uuid4().hex}"
    create_object(
        running,
        project,
        "secrets",
        {"apiVersion": "nodus.dev/v1", "kind": "Secret", "metadata": {"name": "api"}, "stringData": {"token": value}},
    )
    create(running, project, "victim", **shell("sleep 600", secrets=["api"]))
    running.wait_phase(project, "victim", "Running")
    attempt = running.attempts(project, "victim")[0]
    yield {"project": project, "attempt": attempt, "value": value}
    with running.client() as client:
        client.patch(
            f"{API}/namespaces/{project}/jobs/victim",
            json={"spec": {"state": "Cancelled"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )


def test_a_node_credential_reaches_nothing_but_its_own(
    running: Running, rogue: tuple[str, str], victim: dict[str, Any]
) -> None:
    name, credential = rogue
    project, attempt = victim["project"], victim["attempt"]
    pinned = attempt["spec"]["secrets"][0]
    other_node = attempt["spec"]["node"]
    with as_token(running, credential) as node:
        # Its own: read its Node, write its status.
        assert node.get(f"{API}/nodes/{name}").status_code == 200
        heartbeat = {"status": {"heartbeatTime": "2026-12-01T00:00:00.000000Z"}}
        merge = {"Content-Type": "application/merge-patch+json"}
        assert node.patch(f"{API}/nodes/{name}/status", json=heartbeat, headers=merge).status_code == 200
        renewal = {"spec": {"holderIdentity": name, "renewTime": "2026-12-01T00:00:00.000000Z"}}

        refused = {
            "another project's Secret values": node.get(
                f"{API}/namespaces/{project}/secrets/api/values",
                params={"uid": pinned["uid"], "version": pinned["version"]},
            ),
            "a credit grant": node.post(f"{API}/projects/{project}/credits", json={"amountUSD": "1000", "key": "x"}),
            "another Node's status": node.patch(f"{API}/nodes/{other_node}/status", json=heartbeat, headers=merge),
            "another node's Attempt": node.patch(
                f"{API}/namespaces/{project}/attempts/{attempt['metadata']['name']}/status",
                json={"status": {"phase": "Succeeded"}},
                headers=merge,
            ),
            "another node's Attempt (read)": node.get(
                f"{API}/namespaces/{project}/attempts/{attempt['metadata']['name']}"
            ),
            "every Attempt": node.get(f"{API}/attempts"),
            "another node's Attempts": node.get(
                f"{API}/attempts", params={"labelSelector": f"nodus.dev/node={other_node}"}
            ),
            "Jobs": node.get(f"{API}/namespaces/{project}/jobs"),
            "Secrets": node.get(f"{API}/namespaces/{project}/secrets"),
            "Projects": node.get(f"{API}/projects/{project}"),
            "the ledger": node.post(f"{API}/namespaces/{project}/ledger/postings", json={"operation": "Grant"}),
            "a blob upload": node.post(f"{API}/namespaces/{project}/blobs", content=b"x"),
            "bootstrap tokens": node.get(f"{API}/bootstraptokens"),
            "a Node of its own making": node.post(
                f"{API}/nodes",
                json={
                    "apiVersion": "nodus.dev/v1",
                    "kind": "Node",
                    "metadata": {"name": "forged"},
                    "spec": {"offering": OFFERING},
                },
            ),
            "a credential for another node": node.post(
                EXCHANGE, json={"kind": "NodeCredentialRequest", "spec": {"nodeName": other_node}}
            ),
            # Heartbeats (ADR 0055): renewing another node's Lease would keep a dead host alive, the controllers'
            # would steal leadership, a Lease of its own making would name any node.
            "another node's Lease": node.patch(f"{API}/leases/node.{other_node}", json=renewal, headers=merge),
            "the controllers' Lease": node.patch(f"{API}/leases/nodus-controllers", json=renewal, headers=merge),
            "a Lease of its own making": node.post(
                f"{API}/leases",
                json={"apiVersion": "nodus.dev/v1", "kind": "Lease", "metadata": {"name": f"node.{name}"}},
            ),
            "every Lease": node.get(f"{API}/leases"),
        }
        for what, response in refused.items():
            assert response.status_code == 403, f"{what}: {response.status_code} {response.text}"
            assert response.json()["reason"] == "Forbidden", what
        # The node's own list, narrowed by its label, is allowed and shows nothing of others.
        mine = node.get(f"{API}/attempts", params={"labelSelector": f"nodus.dev/node={name}"})
        assert mine.status_code == 200 and mine.json()["items"] == []
    assert victim["value"].encode() not in b"".join(r.content for r in refused.values())


def test_the_agent_running_an_attempt_reads_only_what_it_pins(running: Running, victim: dict[str, Any]) -> None:
    """The real agent's credential (read from its host's work dir) gets the pinned Secret version, and not
    an unpinned version nor the same Secret by another uid."""
    attempt = victim["attempt"]
    credential_file = running.directory / "hosts" / attempt["spec"]["node"] / "identity" / "credential"
    credential = orjson.loads(credential_file.read_bytes())["token"]
    pinned = attempt["spec"]["secrets"][0]
    path = f"{API}/namespaces/{victim['project']}/secrets/api/values"
    with as_token(running, credential) as node:
        good = node.get(path, params={"uid": pinned["uid"], "version": pinned["version"]})
        assert good.status_code == 200, good.text
        assert base64.b64decode(good.json()["data"]["token"]).decode() == victim["value"]
        assert node.get(path).status_code == 403  # "the current version": never
        assert node.get(path, params={"uid": "other", "version": pinned["version"]}).status_code == 403
        assert node.get(path, params={"uid": pinned["uid"], "version": pinned["version"] + 1}).status_code == 403


def test_deleting_the_node_revokes_its_credential(running: Running) -> None:
    name = f"revoked-{uuid.uuid4().hex[:6]}"
    response = exchange(running, join_token(running), name)
    assert response.status_code == 201, response.text
    credential = response.json()["status"]["token"]
    with as_token(running, credential) as node:
        assert node.get(f"{API}/nodes/{name}").status_code == 200
        with running.client() as admin:
            assert admin.delete(f"{API}/nodes/{name}").status_code == 200
        # Within the authenticator's cache time (2 s), the credential is dead.
        running.wait_for("the credential to stop working", lambda: node.get(f"{API}/nodes/{name}").status_code == 401)
        # Recreating a Node of the same name does not bring it back (it names the old Node's uid).
        with running.client() as admin:
            body = {
                "apiVersion": "nodus.dev/v1",
                "kind": "Node",
                "metadata": {"name": name},
                "spec": {"offering": OFFERING},
            }
            assert admin.post(f"{API}/nodes", json=body).status_code == 201
            time.sleep(2.5)
            assert node.get(f"{API}/nodes/{name}").status_code == 401
            admin.delete(f"{API}/nodes/{name}")


def test_a_credential_expires(running: Running) -> None:
    name = f"brief-{uuid.uuid4().hex[:6]}"
    response = exchange(running, join_token(running), name, expirationSeconds=10)
    assert response.status_code == 201, response.text
    with as_token(running, response.json()["status"]["token"]) as node:
        assert node.get(f"{API}/nodes/{name}").status_code == 200
        running.wait_for("the credential to expire", lambda: node.get(f"{API}/nodes/{name}").status_code == 401, 30)
    with running.client() as admin:
        admin.delete(f"{API}/nodes/{name}")


def test_a_bootstrap_token_does_nothing_but_join(running: Running) -> None:
    bound = f"bound-{uuid.uuid4().hex[:6]}"
    token = join_token(running, node_name=bound)
    with as_token(running, token) as joining:
        for path in (f"{API}/nodes", f"{API}/attempts", f"{API}/projects", f"{API}/bootstraptokens"):
            response = joining.get(path)
            assert response.status_code == 403, f"{path}: {response.text}"
    wrong = exchange(running, token, "someone-else")
    assert wrong.status_code == 403 and "registers node" in wrong.json()["message"], wrong.text
    assert exchange(running, "abcdef.0123456789abcdef", bound).status_code == 401  # no such token
    assert exchange(running, token.split(".")[0] + ".0000000000000000", bound).status_code == 401  # wrong secret
    joined = exchange(running, token, bound)
    assert joined.status_code == 201, joined.text
    with running.client() as admin:
        status = admin.get(f"{API}/bootstraptokens/{token.split('.')[0]}").json()["status"]
        assert status["nodes"] == [bound] and status["lastUsedTime"]
        # Revoked: deleting the token ends it at once.
        assert admin.delete(f"{API}/bootstraptokens/{token.split('.')[0]}").status_code == 200
        admin.delete(f"{API}/nodes/{bound}")
    assert exchange(running, token, bound).status_code == 401
    # Users cannot read or make bootstrap tokens.
    with running.client("alice") as alice:
        assert alice.get(f"{API}/bootstraptokens").status_code == 403


def test_the_controllers_identity_has_only_the_controllers_rights(running: Running, victim: dict[str, Any]) -> None:
    project, pinned = victim["project"], victim["attempt"]["spec"]["secrets"][0]
    with running.client("controllers") as controllers:
        refused = {
            "a credit grant": controllers.post(
                f"{API}/projects/{project}/credits", json={"amountUSD": "5", "key": "c"}
            ),
            "Secret values": controllers.get(
                f"{API}/namespaces/{project}/secrets/api/values",
                params={"uid": pinned["uid"], "version": pinned["version"]},
            ),
            "a Project": controllers.post(
                f"{API}/projects", json={"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": "x"}}
            ),
            "a Project's deletion": controllers.delete(f"{API}/projects/{project}"),
            "a Volume": controllers.post(
                f"{API}/namespaces/{project}/volumes",
                json={"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": "v"}, "spec": {}},
            ),
            "blob bytes": controllers.get(f"{API}/namespaces/{project}/blobs/sha256:{'0' * 64}"),
        }
        for what, response in refused.items():
            assert response.status_code == 403, f"{what}: {response.status_code} {response.text}"
        assert controllers.get(f"{API}/namespaces/{project}/jobs/victim").status_code == 200


def test_an_editor_cannot_strip_nodus_finalizers(running: Running) -> None:
    project = running.project()  # alice is its Owner (an Editor's rights and more)
    create(running, project, "held", **shell("sleep 600"))
    job = running.wait_for(
        "the Job to carry a nodus.dev finalizer",
        lambda: (j := running.job(project, "held"))["metadata"].get("finalizers") and j,
    )
    finalizers = job["metadata"]["finalizers"]
    assert any(f.startswith("nodus.dev/") for f in finalizers)
    with running.client("alice") as alice:
        merge = alice.patch(
            f"{API}/namespaces/{project}/jobs/held",
            json={"metadata": {"finalizers": None}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert merge.status_code == 403, merge.text
        assert "managed by Nodus" in merge.json()["message"]
        json_patch = alice.patch(
            f"{API}/namespaces/{project}/jobs/held",
            json=[{"op": "remove", "path": "/metadata/finalizers"}],
            headers={"Content-Type": "application/json-patch+json"},
        )
        assert json_patch.status_code == 403, json_patch.text
        added = alice.patch(
            f"{API}/namespaces/{project}/jobs/held",
            json={"metadata": {"finalizers": [*finalizers, "nodus.dev/forever"]}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert added.status_code == 403, added.text
        # Their own finalizers stay theirs.
        own = alice.patch(
            f"{API}/namespaces/{project}/jobs/held",
            json={"metadata": {"finalizers": [*finalizers, "example.com/mine"]}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert own.status_code == 200, own.text
        alice.patch(
            f"{API}/namespaces/{project}/jobs/held",
            json={"spec": {"state": "Cancelled"}, "metadata": {"finalizers": finalizers}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
    assert running.job(project, "held")["metadata"]["finalizers"] == finalizers


def test_an_agent_stops_a_run_whose_attempt_is_gone(running: Running) -> None:
    project = running.project()
    create(running, project, "orphaned", **shell("echo started; sleep 600"))
    running.wait_phase(project, "orphaned", "Running")
    attempt = running.attempts(project, "orphaned")[0]
    name, node = attempt["metadata"]["name"], attempt["spec"]["node"]
    work = running.directory / "hosts" / node / "attempts" / f"{project}.{name}"
    with running.client() as admin:
        # An administrator removes the Attempt outright (finalizers stripped): the agent must not run it on.
        path = f"{API}/namespaces/{project}/attempts/{name}"
        admin.patch(
            path, json={"metadata": {"finalizers": None}}, headers={"Content-Type": "application/merge-patch+json"}
        )
        assert admin.delete(path).status_code in (200, 202)
    running.wait_for("the agent to stop the run", lambda: not _sleeping_in(work), timeout=60)


def _sleeping_in(work: Path) -> bool:
    """Whether a process of the attempt (the program's sleep) is still alive on the host."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if b"sleep\x00600" in (proc / "cmdline").read_bytes():
                environ = (proc / "environ").read_bytes()
                if f"NODUS_ATTEMPT={work.name.split('.', 1)[1]}".encode() in environ:
                    return True
        except OSError:
            continue
    return False


def test_programs_see_no_credential(running: Running, tmp_path: Path) -> None:
    """A host whose credentials live outside /tmp (private in every sandbox anyway): its work dir (the node
    credential), its join token file and a kubeconfig with a token file beside it are invisible to programs."""
    base = Path("/var/tmp") / f"nodus-identities-{uuid.uuid4().hex[:8]}"
    work, secrets_dir = base / "work", base / "etc"
    secrets_dir.mkdir(parents=True)
    token_file = secrets_dir / "join-token"
    token_file.write_text(join_token(running, ttl="10m"))
    (secrets_dir / "kube-token").write_text("kube-token-secret")
    kubeconfig = secrets_dir / "kubeconfig"
    cluster = f"{{server: '{running.cluster.url}', certificate-authority: '{running.cluster.ca_file}'}}"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {cluster}}}]\n"
        "users: [{name: u, user: {tokenFile: kube-token}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    node = f"private-{uuid.uuid4().hex[:6]}"
    agent_log = (tmp_path / "agent.log").open("wb")
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nodus",
            "agent",
            "--kubeconfig",
            str(kubeconfig),
            "--join-token-file",
            str(token_file),
            "--node-name",
            node,
            "--offering",
            OFFERING,
            "--gpus",
            "0",
            "--runtime",
            "bubblewrap",
            "--work-dir",
            str(work),
            "--heartbeat-interval",
            "500ms",
        ],
        stdout=agent_log,
        stderr=subprocess.STDOUT,
    )
    try:
        running.wait_for("the agent to join", (work / "identity" / "credential").exists)
        paths = [work / "identity" / "credential", token_file, kubeconfig, secrets_dir / "kube-token"]
        script = "; ".join(
            f"cat {p} 2>/dev/null && echo LEAK-{i}; ls {p.parent} 2>/dev/null" for i, p in enumerate(paths)
        )
        project = running.project()
        create(
            running,
            project,
            "snoop",
            **shell(script + "; echo done", placement={"offerings": [OFFERING], "profile": "Speed"}),
        )
        done = running.wait_phase(project, "snoop", "Succeeded", "Failed", timeout=120)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert running.attempts(project, "snoop")[0]["spec"]["node"] == node  # it ran on the private host
        with running.client() as admin:
            log = admin.get(f"{API}/namespaces/{project}/jobs/snoop/log").text
        assert "done" in log
        assert "LEAK" not in log and "kube-token-secret" not in log and "nodus-node." not in log, log
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
        agent_log.close()
        with running.client() as admin:
            admin.delete(f"{API}/nodes/{node}")
        subprocess.run(["rm", "-rf", str(base)], check=False)
