"""Credits end to end: granted by administrators (API and CLI), read by members and kubectl, proven by
``nodus billing verify`` and listed by ``nodus billing statement``."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_project
from tests.support.cluster import Cluster

pytestmark = pytest.mark.e2e


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
    }
    again = admin.post(credits_path(project), json={"amountUSD": "25.50", "key": "first"})
    assert again.status_code == 201 and again.json()["balanceUSD"] == "25.50"  # the same grant, once
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
    assert "available 30.00" in cli.stdout
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
