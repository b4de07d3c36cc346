"""Budgets end to end against a real ``nodus apiserver``: written and read with kubectl, enforced by the
ledger door on every hold of a matching Job, and their figures read back from the ledger."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support import kubectl
from tests.support.cluster import Cluster
from tests.support.objects import API, job, jobs_path

pytestmark = pytest.mark.e2e


def budget(name: str, limit: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Budget",
        "metadata": {"name": name},
        "spec": {"limitUSD": limit, **spec},
    }


@pytest.fixture
def kc(cluster: Cluster, kubectl_binary: Path, project: str):  # type: ignore[no-untyped-def]
    config = cluster.kubeconfig("admin", namespace=project)

    def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return kubectl.run(kubectl_binary, config, *args, stdin=stdin, check=check)

    return run


def test_kubectl_creates_lists_and_explains_budgets(kc, project: str) -> None:  # type: ignore[no-untyped-def]
    manifest = budget("gpu-team", "250", period="Daily", selector={"matchLabels": {"team": "gpu"}})
    assert "budget.nodus.dev/gpu-team created" in kc("apply", "-f", "-", stdin=yaml.safe_dump(manifest)).stdout
    kc("apply", "-f", "-", stdin=yaml.safe_dump(budget("everything", "1000")))
    table = kc("get", "budgets").stdout.splitlines()
    assert table[0].split() == ["NAME", "LIMIT", "PERIOD", "SPENT", "HELD", "REMAINING", "AGE"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["gpu-team"][1:3] == ["250.00", "Daily"]  # to the cent, as every table shows an amount
    assert rows["everything"][1:3] == ["1,000.00", "Monthly"]  # the default period
    stored = json.loads(kc("get", "budget", "everything", "-o", "json").stdout)
    assert stored["metadata"]["namespace"] == project and stored["spec"]["period"] == "Monthly"
    assert "LimitUSD is the most" in kc("explain", "budgets.spec.limitUSD").stdout
    refused = kc("apply", "-f", "-", stdin=yaml.safe_dump(budget("broken", "0", period="Weekly")), check=False)
    assert refused.returncode != 0
    assert "spec.limitUSD" in refused.stderr and "spec.period" in refused.stderr


def test_the_ledger_door_holds_a_matching_job_to_its_budget(
    cluster: Cluster, admin: httpx.Client, project: str
) -> None:
    for body in (
        budget("team-a", "5", selector={"matchLabels": {"team": "a"}}),
        budget("others", "100", selector={"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}),
    ):
        assert admin.post(f"{API}/namespaces/{project}/budgets", json=body).status_code == 201
    created = admin.post(jobs_path(project), json=job("train", labels={"team": "a"}))
    assert created.status_code == 201, created.text
    uid = created.json()["metadata"]["uid"]
    granted = admin.post(f"{API}/projects/{project}/credits", json={"amountUSD": "50", "key": "budgets"})
    assert granted.status_code == 201, granted.text
    postings = f"{API}/namespaces/{project}/ledger/postings"

    def hold(hold_id: str, amount: str) -> httpx.Response:
        body = {"operation": "Hold", "key": f"hold:{hold_id}", "hold": hold_id, "subject": uid, "job": "train"}
        return admin.post(postings, json={**body, "amountUSD": amount})

    first = f"h-{uuid.uuid4().hex[:8]}"
    assert hold(first, "4").status_code == 201
    refused = hold(f"h-{uuid.uuid4().hex[:8]}", "1.5")
    assert refused.status_code == 402, refused.text
    status = refused.json()
    assert status["reason"] == "BudgetExceeded" and status["details"]["name"] == "team-a"
    assert "5.00" in status["message"] and "4.00" in status["message"] and "1.50" in status["message"]
    assert "limitUSD" in status["fix"] and "5.50" in status["fix"]
    # An extension names the Job too, and must fit as well.
    extend = {"operation": "Extend", "key": f"extend:{first}", "hold": first, "job": "train", "amountUSD": "1.5"}
    assert admin.post(postings, json=extend).json()["reason"] == "BudgetExceeded"

    figures = admin.get(f"{API}/namespaces/{project}/ledger/budgets/team-a")
    assert figures.status_code == 200, figures.text
    shown = figures.json()
    assert (shown["limitUSD"], shown["spentUSD"], shown["heldUSD"], shown["remainingUSD"]) == (
        "5.00",
        "0.00",
        "4.00",
        "1.00",
    )
    assert shown["period"] == "Monthly" and shown["periodStart"] < shown["periodEnd"]
    others = admin.get(f"{API}/namespaces/{project}/ledger/budgets/others").json()
    assert others["heldUSD"] == "0.00"  # the Job does not match it
    assert admin.get(f"{API}/namespaces/{project}/ledger/budgets/missing").status_code == 404
    with cluster.client("alice") as owner:
        assert owner.get(f"{API}/namespaces/{project}/ledger/budgets/team-a").status_code == 403

    # Raising the limit makes room at once.
    patched = admin.patch(
        f"{API}/namespaces/{project}/budgets/team-a",
        json={"spec": {"limitUSD": "10"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert patched.status_code == 200, patched.text
    assert hold(f"h-{uuid.uuid4().hex[:8]}", "1.5").status_code == 201
