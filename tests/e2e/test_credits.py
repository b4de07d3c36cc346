"""Credits end to end: granted by administrators (API and CLI; a replayed key says so), read by members and
kubectl, proven by ``nodus billing verify`` and listed by ``nodus billing statement``, both through the API
with an administrator's kubeconfig (refused to everyone else, the controllers included) and on the database
for operators."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_project
from tests.support import cluster as clusters
from tests.support.cluster import Cluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """This module's own cluster: ``nodus billing verify`` proves every project's display copy, and the shared
    cluster's other tests post holds and charges as the controllers would, with no credits reconciler there to
    copy them (ADR 0044)."""
    with clusters.on_own_database(database_server, tmp_path_factory.mktemp("credits")) as own:
        yield own


@pytest.fixture
def project(admin: httpx.Client) -> str:
    """A project without credit: these tests grant it themselves and check the exact figures."""
    return make_project(
        admin,
        [{"name": "alice", "role": "Owner"}, {"name": "bob", "role": "Editor"}, {"name": "carol", "role": "Viewer"}],
        credit=None,
    )


def credits_path(project: str) -> str:
    return f"/apis/nodus.dev/v1/projects/{project}/credits"


def nodus(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodus", *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def test_grants_are_idempotent_and_shown_everywhere(
    cluster: Cluster, admin: httpx.Client, project: str, kubectl_binary: Path
) -> None:
    granted = admin.post(credits_path(project), json={"amountUSD": "25.50", "key": "first", "memo": "trial"})
    assert granted.status_code == 201, granted.text
    assert granted.json() == {
        "kind": "Credits",
        "apiVersion": "nodus.dev/v1",
        "project": project,
        "balanceUSD": "25.50",
        "heldUSD": "0.00",
        "availableUSD": "25.50",
        "grant": {"key": "first", "amountUSD": "25.50", "replayed": False},
    }
    again = admin.post(credits_path(project), json={"amountUSD": "25.50", "key": "first"})
    # The same grant, once: the answer says nothing was granted now (200, not 201 Created).
    assert again.status_code == 200 and again.json()["balanceUSD"] == "25.50"
    assert again.json()["grant"] == {"key": "first", "amountUSD": "25.50", "replayed": True}
    reused = admin.post(credits_path(project), json={"amountUSD": "30", "key": "first"})
    assert reused.status_code == 409 and reused.json()["reason"] == "Conflict"

    with cluster.client("carol") as viewer:
        assert viewer.get(credits_path(project)).json()["availableUSD"] == "25.50"
        refused = viewer.post(credits_path(project), json={"amountUSD": "1"})
        assert refused.status_code == 403 and "administrators" in refused.json()["fix"]
    with cluster.client("dave") as stranger:
        assert stranger.get(credits_path(project)).status_code == 403
    for bad in ({"amountUSD": 1.5}, {"amountUSD": "-1"}, {"amountUSD": "0"}, {"amountUSD": "1.0000001"}, {}):
        assert admin.post(credits_path(project), json=bad).status_code == 400, bad

    shown = subprocess.run(
        [
            str(kubectl_binary),
            "--kubeconfig",
            str(cluster.kubeconfig("admin")),
            "get",
            "project",
            project,
            "-o",
            "jsonpath={.status.credits.availableUSD}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert shown.stdout == "25.50"

    env = {"KUBECONFIG": str(cluster.kubeconfig("admin")), "PATH": "/usr/bin:/bin"}
    cli = nodus("credits", "grant", project, "4.5", "--key", "second", "--memo", "top-up", env=env)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith(f"granted 4.50 USD to {project}") and "available 30.00" in cli.stdout
    replayed = nodus("credits", "grant", project, "4.5", "--key", "second", "--memo", "top-up", env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.startswith("already granted: key second granted 4.50 USD"), replayed.stdout
    assert "nothing more" in replayed.stdout and "available 30.00" in replayed.stdout
    env["NODUS_DATABASE_URL"] = cluster.database_url
    verified = nodus("billing", "verify", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    listed = nodus("billing", "statement", project, "--csv", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = list(csv.DictReader(io.StringIO(listed.stdout)))
    assert [(r["kind"], r["amountUSD"], r["memo"]) for r in rows] == [
        ("Grant", "25.50", "trial"),
        ("Grant", "4.50", "top-up"),
    ]


def statement_csv(env: dict[str, str], project: str, *flags: str) -> list[dict[str, str]]:
    listed = nodus("billing", "statement", project, "--csv", *flags, env=env)
    assert listed.returncode == 0, listed.stderr
    return list(csv.DictReader(io.StringIO(listed.stdout)))


def test_administrators_verify_and_read_statements_with_their_kubeconfig(
    cluster: Cluster, admin: httpx.Client, project: str
) -> None:
    """What ``nodus dev`` gives an administrator (a kubeconfig, no database URL) is enough: the API serves the
    ledger's verification and statements, the same as the operators' direct reading of the database."""
    for amount, key in (("12", "one"), ("0.004", "two")):
        assert admin.post(credits_path(project), json={"amountUSD": amount, "key": key}).status_code == 201
    env = {"KUBECONFIG": str(cluster.kubeconfig("admin")), "PATH": "/usr/bin:/bin"}
    verified = nodus("billing", "verify", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "the ledger is sound" in verified.stdout

    through_api = statement_csv(env, project)
    assert [(r["kind"], r["amountUSD"]) for r in through_api] == [("Grant", "12.00"), ("Grant", "0.004")]
    on_database = statement_csv({**env, "NODUS_DATABASE_URL": cluster.database_url}, project)
    assert on_database == through_api
    table = nodus("billing", "statement", project, env=env)
    assert table.returncode == 0, table.stderr
    amounts = [line.split()[2] for line in table.stdout.splitlines()[1:]]
    assert amounts == ["12.00", "<0.01"]  # to the cent, and a tiny grant is not shown as none
    later = statement_csv(env, project, "--from", "2999-01-01T00:00:00Z")
    assert later == []

    answered = admin.get("/apis/nodus.dev/v1/ledger/verify")
    assert answered.status_code == 200 and answered.json()["kind"] == "LedgerVerification"
    assert answered.json()["sound"] is True and answered.json()["breaches"] == []
    path = f"/apis/nodus.dev/v1/namespaces/{project}/ledger/statement"
    whole = admin.get(path)
    assert whole.status_code == 200, whole.text
    document = whole.json()  # one JSON document, streamed one item per line
    assert document["kind"] == "LedgerStatement" and document["project"] == project
    assert [item["amountUSD"] for item in document["items"]] == ["12.00", "0.004"]
    assert len(whole.text.splitlines()) == 2 + len(document["items"])
    bad = admin.get(path, params={"start": "yesterday"})
    assert bad.status_code == 400 and "start" in bad.json()["message"] and bad.json()["fix"]


def test_only_administrators_read_the_ledger(cluster: Cluster, project: str) -> None:
    """Members of the project, strangers and the controllers (whose rights are a fixed table without these reads)
    are refused with a 403 that names the fix."""
    paths = ("/apis/nodus.dev/v1/ledger/verify", f"/apis/nodus.dev/v1/namespaces/{project}/ledger/statement")
    for user in ("alice", "dave", "controllers"):
        with cluster.client(user) as client:
            for path in paths:
                refused = client.get(path)
                assert refused.status_code == 403, (user, path, refused.text)
                assert refused.json()["reason"] == "Forbidden" and refused.json()["fix"], refused.text
    env = {"KUBECONFIG": str(cluster.kubeconfig("alice")), "PATH": "/usr/bin:/bin"}
    refused_cli = nodus("billing", "verify", env=env)
    assert refused_cli.returncode != 0 and "Forbidden" in refused_cli.stderr and "fix:" in refused_cli.stderr


def test_verify_through_the_api_reports_a_display_copy_that_disagrees(
    cluster: Cluster, admin: httpx.Client, project: str
) -> None:
    """A breach is reported through the API, and the CLI exits 1: here a Project's status.credits written by
    hand to disagree with the ledger (put back afterwards, for the other tests' verify)."""
    assert admin.post(credits_path(project), json={"amountUSD": "5", "key": "k"}).status_code == 201
    status = f"/apis/nodus.dev/v1/projects/{project}/status"
    merge = {"Content-Type": "application/merge-patch+json"}
    wrong = {"status": {"credits": {"balanceUSD": "6.00", "heldUSD": "0.00", "availableUSD": "5.00"}}}
    assert admin.patch(status, json=wrong, headers=merge).status_code == 200
    try:
        env = {"KUBECONFIG": str(cluster.kubeconfig("admin")), "PATH": "/usr/bin:/bin"}
        verified = nodus("billing", "verify", env=env)
        assert verified.returncode == 1, verified.stdout + verified.stderr
        assert f"BREACH DisplayCopyEqualsLedger: project {project}: status.credits.balanceUSD shows 6.00" in (
            verified.stdout
        )
        breaches = admin.get("/apis/nodus.dev/v1/ledger/verify").json()
        assert breaches["sound"] is False
        assert {b["invariant"] for b in breaches["breaches"]} == {"DisplayCopyEqualsLedger"}
    finally:
        right = {"status": {"credits": {"balanceUSD": "5.00", "heldUSD": "0.00", "availableUSD": "5.00"}}}
        assert admin.patch(status, json=right, headers=merge).status_code == 200
