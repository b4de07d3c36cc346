"""Budgets end to end with controllers: a Job whose hold does not fit a Budget it matches waits, unfunded
and without capacity, and starts by itself once the Budget's limit is raised; the Budget shows what
its Jobs spent; a Job the Budget does not select is not held back."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_billing import verify
from tests.support.images import registry_python_image
from tests.support.objects import API

pytestmark = pytest.mark.e2e

MERGE = {"Content-Type": "application/merge-patch+json"}


def create(running: Running, project: str, plural: str, body: dict[str, Any]) -> None:
    with running.client() as client:
        response = client.post(f"{API}/namespaces/{project}/{plural}", json=body)
        assert response.status_code == 201, response.text


def patch(running: Running, project: str, path: str, body: dict[str, Any]) -> None:
    with running.client() as client:
        response = client.patch(f"{API}/namespaces/{project}/{path}", json=body, headers=MERGE)
        assert response.status_code == 200, response.text


def job(name: str, team: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"team": team}},
        "spec": {
            "image": registry_python_image(),
            "command": ["/bin/sh", "-c", f"echo {name}-ran"],
            "resources": {"cpu": "1"},
            "placement": {"offerings": ["cpu-8c-us"]},
            **spec,
        },
    }


def budget(running: Running, project: str, name: str) -> dict[str, Any]:
    with running.client() as client:
        response = client.get(f"{API}/namespaces/{project}/budgets/{name}")
        assert response.status_code == 200, response.text
        return dict(response.json())


def test_a_job_over_its_budget_waits_until_the_limit_is_raised(running: Running) -> None:
    project = running.project(credit="10")
    # Suspended while the Budget is set up, so that its first hold is certainly tried against it.
    create(running, project, "jobs", job("held-back", "a", state="Suspended"))
    # 0.005 USD is less than the first hold of cpu-8c-us: 8 s (the tests' funded window) plus one minute.
    selector = {"matchLabels": {"team": "a"}}
    body = {"apiVersion": "nodus.dev/v1", "kind": "Budget", "metadata": {"name": "team-a"}}
    create(
        running, project, "budgets", {**body, "spec": {"limitUSD": "0.005", "period": "Daily", "selector": selector}}
    )
    patch(running, project, "jobs/held-back", {"spec": {"state": "Running"}})
    create(running, project, "jobs", job("other-team", "b"))

    def waiting() -> dict[str, Any] | None:
        status = running.job(project, "held-back")["status"]
        return status if status.get("reason") == "BudgetExceeded" else None

    status = running.wait_for("the Job to wait for room in its Budget", waiting)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Funded"] == "False"
    assert "team-a" in status["message"] and "0.005" in status["message"] and "limitUSD" in status["fix"]
    [attempt] = running.attempts(project, "held-back")
    assert not attempt["spec"].get("node")  # no capacity, nothing charged, while it waits
    # The Budget selects team a only: team b's Job runs meanwhile.
    assert running.wait_phase(project, "other-team", "Succeeded", "Failed")["status"]["phase"] == "Succeeded"
    assert running.job(project, "held-back")["status"]["reason"] == "BudgetExceeded"

    patch(running, project, "budgets/team-a", {"spec": {"limitUSD": "1"}})
    done = running.wait_phase(project, "held-back", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert {c["type"]: c["status"] for c in done["status"]["conditions"]}["Funded"] == "True"
    assert len(running.attempts(project, "held-back")) == 1  # the same attempt waited, then ran
    cost = running.wait_for(
        "the final charge",
        lambda: (c := running.job(project, "held-back")["status"].get("cost", {})).get("final") and c,
    )

    def shown() -> dict[str, Any] | None:
        status = budget(running, project, "team-a").get("status") or {}
        return status if status.get("spentUSD") == cost["totalUSD"] and status.get("heldUSD") == "0.00" else None

    status = running.wait_for("the Budget to show what its Job spent", shown)
    assert Decimal(status["remainingUSD"]) == Decimal(1) - Decimal(cost["totalUSD"])
    assert {c["type"]: c["status"] for c in status["conditions"]}["Exhausted"] == "False"
    assert status["periodStart"] < status["periodEnd"]
    checked = verify(running)
    assert checked.returncode == 0, checked.stdout + checked.stderr
