"""Cost estimates before launch, end to end: a dry run (curl-style and ``kubectl create --dry-run=server``)
answers ``status.estimate`` and stores nothing; a create stores it; a create whose first hold cannot fit
is refused with a 402 naming the amounts and the fix (credit, maxCostUSD), while its dry run reports the
same reasons as blocking."""

from __future__ import annotations

import re
import subprocess
import sys
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from nodus.apimachinery.money import charge
from tests.conftest import make_project
from tests.support.cluster import Cluster

pytestmark = pytest.mark.e2e
API = "/apis/nodus.dev/v1"
MEMBERS = [{"name": "alice", "role": "Owner"}]


def job(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"image": "python:3.12", "command": ["python", "-c", "print('estimate me')"]}
    body.update(spec)
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": name}, "spec": body}


def jobs(project: str) -> str:
    return f"{API}/namespaces/{project}/jobs"


def test_a_dry_run_answers_the_estimate_and_stores_nothing(cluster: Cluster, admin: httpx.Client) -> None:
    project = make_project(admin, MEMBERS, credit="50")
    with cluster.client("alice") as alice:
        answered = alice.post(
            jobs(project), params={"dryRun": "All"}, json=job("sized", expectedDuration="30m", completions=3)
        )
        single = alice.post(jobs(project), params={"dryRun": "All"}, json=job("single", expectedDuration="30m"))
        assert answered.status_code == 201, answered.text
        estimate = answered.json()["status"]["estimate"]
        assert alice.get(f"{jobs(project)}/sized").status_code == 404

        preview = estimate["placementPreview"]
        offering = admin.get(f"{API}/offerings/{preview['offering']}").json()
        rate = Decimal(offering["spec"]["rateUSDPerHour"])
        assert Decimal(estimate["rateUSDPerHour"]) == rate
        assert estimate["pricebookVersion"] == offering["spec"]["pricebookVersion"]
        assert preview["explain"] and preview["regionClass"] == offering["spec"]["regionClass"]
        # One index: the boot band of the offering plus 30 minutes, rounded up to the minute, as billed.
        boot = Decimal(str(_seconds(offering["spec"]["boot"]["p50"])))
        running = Decimal(1800)
        billed = ((boot + running) / 60).to_integral_value(rounding=ROUND_CEILING) * 60
        per_index = charge(rate, boot) + charge(rate, running) + charge(rate, billed - boot - running)
        one = single.json()["status"]["estimate"]
        assert Decimal(one["costUSD"]["p50"]) == per_index
        assert Decimal(one["overheadUSD"]["p50"]) == per_index - charge(rate, running)
        # Three indexes: the sum of three skewed allocations, above three medians and below three P90s.
        assert per_index * 3 < Decimal(estimate["costUSD"]["p50"]) < Decimal(estimate["costUSD"]["p90"])
        assert Decimal(estimate["costUSD"]["p90"]) < Decimal(one["costUSD"]["p90"]) * 3
        assert Decimal(estimate["minimumChargeUSD"]) == charge(rate, Decimal(60))
        hold = Decimal(estimate["holdUSD"])
        # The funded window of this server is the default 10 minutes.
        assert hold == (rate * 600 / 3600 + charge(rate, Decimal(60))).quantize(
            Decimal("0.000001"), rounding=ROUND_CEILING
        )
        assert Decimal(estimate["concurrentHoldUSD"]) == hold  # parallelism 1
        assert estimate["startup"]["cold"]["p50"] and estimate["validUntil"]
        assert "ColdStart" in {w["code"] for w in estimate["warnings"]}
        assert "blockingReasons" not in estimate

        unknown = alice.post(jobs(project), params={"dryRun": "All"}, json=job("unsized"))
        codes = {w["code"] for w in unknown.json()["status"]["estimate"]["warnings"]}
        assert "NoExpectedDuration" in codes

        created = alice.post(jobs(project), json=job("sized", expectedDuration="30m", completions=3))
        assert created.status_code == 201, created.text
        stored = alice.get(f"{jobs(project)}/sized").json()["status"]["estimate"]
        assert stored["costUSD"] == estimate["costUSD"] and stored["holdUSD"] == estimate["holdUSD"]


def test_a_create_whose_first_hold_cannot_fit_is_refused_with_the_amounts(
    cluster: Cluster, admin: httpx.Client
) -> None:
    poor = make_project(admin, MEMBERS, credit=None)
    with cluster.client("alice") as alice:
        refused = alice.post(jobs(poor), json=job("broke", expectedDuration="10m"))
        assert refused.status_code == 402, refused.text
        status = refused.json()
        assert status["reason"] == "InsufficientCredits" and "0.00 USD available" in status["message"]
        assert f"nodus credits grant {poor}" in status["fix"]
        assert alice.get(f"{jobs(poor)}/broke").status_code == 404

        dry = alice.post(jobs(poor), params={"dryRun": "All"}, json=job("broke", expectedDuration="10m"))
        assert dry.status_code == 201
        reasons = dry.json()["status"]["estimate"]["blockingReasons"]
        assert [r["code"] for r in reasons] == ["InsufficientCredits"]
        assert reasons[0]["message"] == status["message"].split("cannot be created: ", 1)[1]

        assert admin.post(f"{API}/projects/{poor}/credits", json={"amountUSD": "100", "key": "g"}).status_code == 201
        capped = alice.post(jobs(poor), json=job("capped", expectedDuration="10m", maxCostUSD="0.000001"))
        assert capped.status_code == 402 and capped.json()["reason"] == "MaxCostBelowHold"
        assert "spec.maxCostUSD" in capped.json()["fix"]
        assert alice.post(jobs(poor), json=job("funded", expectedDuration="10m")).status_code == 201


def test_kubectl_dry_run_server_shows_the_estimate(cluster: Cluster, admin: httpx.Client, kubectl_binary: Path) -> None:
    project = make_project(admin, MEMBERS, credit=None)
    manifest = yaml.safe_dump(job("viewed", expectedDuration="2h"))
    shown = subprocess.run(
        [
            str(kubectl_binary),
            "--kubeconfig",
            str(cluster.kubeconfig("alice")),
            "-n",
            project,
            "create",
            "--dry-run=server",
            "-o",
            "yaml",
            "-f",
            "-",
        ],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    estimate = yaml.safe_load(shown.stdout)["status"]["estimate"]
    assert estimate["costUSD"]["p50"] and estimate["blockingReasons"][0]["code"] == "InsufficientCredits"
    created = subprocess.run(
        [str(kubectl_binary), "--kubeconfig", str(cluster.kubeconfig("alice")), "-n", project, "create", "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert created.returncode != 0
    assert "0.00 USD available" in created.stderr, created.stderr


def _seconds(duration: str) -> float:
    from nodus.apimachinery.units import parse_duration

    return parse_duration(duration).total_seconds()


def test_a_matching_budget_without_room_blocks_the_create_and_others_do_not(
    cluster: Cluster, admin: httpx.Client
) -> None:
    project = make_project(admin, MEMBERS, credit="100")
    budget = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Budget",
        "metadata": {"name": "team-a"},
        "spec": {"limitUSD": "0.000001", "period": "Total", "selector": {"matchLabels": {"team": "a"}}},
    }
    assert admin.post(f"{API}/namespaces/{project}/budgets", json=budget).status_code == 201
    with cluster.client("alice") as alice:
        team_a = job("team-a-job", expectedDuration="10m")
        team_a["metadata"]["labels"] = {"team": "a"}
        dry = alice.post(jobs(project), params={"dryRun": "All"}, json=team_a)
        reasons = dry.json()["status"]["estimate"]["blockingReasons"]
        assert [r["code"] for r in reasons] == ["BudgetExceeded"] and "Budget team-a" in reasons[0]["message"]
        refused = alice.post(jobs(project), json=team_a)
        assert refused.status_code == 402 and refused.json()["reason"] == "BudgetExceeded"
        other = job("team-b-job", expectedDuration="10m")
        other["metadata"]["labels"] = {"team": "b"}
        assert alice.post(jobs(project), json=other).status_code == 201


def estimate_table(cluster: Cluster, tmp_path: Path, project: str, body: dict[str, Any]) -> dict[str, str]:
    """``nodus estimate -f`` (a real CLI process, alice's kubeconfig) as its rows: label -> value."""
    manifest = tmp_path / f"{body['metadata']['name']}.yaml"
    manifest.write_text(yaml.safe_dump(body))
    env = {"KUBECONFIG": str(cluster.kubeconfig("alice")), "PATH": "/usr/bin:/bin"}
    shown = subprocess.run(
        [sys.executable, "-m", "nodus", "estimate", "-f", str(manifest), "-n", project],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert shown.returncode == 0, shown.stderr
    rows = {}
    for line in shown.stdout.splitlines():
        label, _, value = line.partition("  ")
        if value and not line.startswith((" ", "warning", "BLOCKED")):
            rows[label.strip()] = value.strip()
    return rows


def test_the_estimate_table_says_when_the_duration_is_a_guess(
    cluster: Cluster, admin: httpx.Client, tmp_path: Path
) -> None:
    """hello.yaml's first estimate (no expectedDuration, no earlier run) priced an hour per index and printed it
    like any other figure: the table now has a Duration row that says it is a guess, and marks the cost. Money is
    printed to the cent and rates to four decimals."""
    project = make_project(admin, MEMBERS, credit="100")
    hello = {
        "command": ["/bin/sh", "-c", "echo guessed"],
        "completions": 4,
        "parallelism": 2,
        "resources": {"gpu": {"type": ["L4"], "count": 1}},
    }
    guessed = estimate_table(cluster, tmp_path, project, job("guessed", **hello))
    assert guessed["Duration"] == (
        "A GUESS: 1h0m0s per index (P90 2h0m0s): no spec.expectedDuration, no earlier run of this program"
    ), guessed
    assert guessed["Cost USD"].endswith("A GUESS: see Duration"), guessed
    cents = r"[0-9,]+\.[0-9]{2}"
    assert re.fullmatch(rf"{cents} \(P50\)  {cents} \(P90\)  A GUESS: see Duration", guessed["Cost USD"])
    assert re.fullmatch(r"[0-9]+\.[0-9]{4}", guessed["Rate USD/h"]), guessed
    for label in ("First hold USD", "Concurrent hold USD", "Minimum charge USD"):
        assert re.fullmatch(rf"<0\.01|{cents}", guessed[label]), (label, guessed)

    declared = estimate_table(cluster, tmp_path, project, job("declared", expectedDuration="5s", **hello))
    assert declared["Duration"] == "5s per index, from spec.expectedDuration", declared
    assert "GUESS" not in declared["Cost USD"]
    assert re.fullmatch(rf"{cents} \(P50\)  {cents} \(P90\)", declared["Cost USD"]), declared
