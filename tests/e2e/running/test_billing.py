"""Billing end to end: a Job's attempts hold credit, are charged exactly for the time they billed,
release the rest, and the ledger proves it; a project that cannot fund a hold runs nothing."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from datetime import datetime
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Any

import pytest

from nodus.apimachinery import money
from tests.e2e.running.conftest import Running
from tests.support.images import registry_python_image
from tests.support.objects import API

pytestmark = pytest.mark.e2e

MICRO = Decimal("0.000001")


def create_job(running: Running, project: str, name: str, script: str, **extra: Any) -> None:
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "image": registry_python_image(),
            "command": ["/bin/sh", "-c", script],
            "resources": {"cpu": "1"},
            "placement": {"offerings": ["cpu-8c-us"]},
            **extra,
        },
    }
    with running.client() as client:
        response = client.post(f"{API}/namespaces/{project}/jobs", json=body)
        assert response.status_code == 201, response.text


def seconds(start: str, end: str) -> Decimal:
    delta = datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(start.replace("Z", "+00:00"))
    return max(Decimal(str(delta.total_seconds())).quantize(Decimal("0.001")), Decimal(0))


def charge(rate: Decimal, billed: Decimal) -> Decimal:
    return (rate * billed / 3600).quantize(MICRO, rounding=ROUND_HALF_UP)


def credits(running: Running, project: str) -> dict[str, Any]:
    with running.client() as client:
        return dict(client.get(f"{API}/projects/{project}/credits").json())


def verify(running: Running) -> subprocess.CompletedProcess[str]:
    env = {"NODUS_DATABASE_URL": running.cluster.database_url, "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "nodus", "billing", "verify"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def statement(running: Running, project: str) -> list[dict[str, str]]:
    """The project's statement lines (``nodus billing statement --csv``, a real CLI process), oldest first."""
    env = {"NODUS_DATABASE_URL": running.cluster.database_url, "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "nodus", "billing", "statement", project, "--csv"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return list(csv.DictReader(io.StringIO(result.stdout)))


def test_a_job_is_charged_exactly_for_the_time_it_billed(running: Running) -> None:
    project = running.project(credit="10")
    create_job(running, project, "billed", "sleep 2")
    running.wait_phase(project, "billed", "Succeeded")
    job = running.wait_for(
        "the final charge", lambda: (j := running.job(project, "billed"))["status"].get("cost", {}).get("final") and j
    )
    [attempt] = running.attempts(project, "billed")
    status = attempt["status"]
    rate = Decimal(status["placement"]["rateUSDPerHour"])
    boot = seconds(status["provisioningTime"], status["startTime"])
    ran = seconds(status["startTime"], status["finishTime"])
    billed = max((((boot + ran) / 60).to_integral_value(rounding=ROUND_CEILING)) * 60, Decimal(60))
    expected = {
        "bootUSD": charge(rate, boot),
        "runningUSD": charge(rate, ran),
        "teardownUSD": charge(rate, billed - boot - ran),
    }
    cost = status["cost"]
    assert {k: Decimal(v) for k, v in cost["bySegment"].items()} == expected
    total = sum(expected.values(), Decimal(0))
    assert Decimal(cost["totalUSD"]) == total and cost["final"] is True and Decimal(cost["heldUSD"]) == 0
    assert Decimal(job["status"]["cost"]["totalUSD"]) == total
    assert Decimal(job["status"]["cost"]["rateUSDPerHour"]) == 0  # nothing bills any more
    left = credits(running, project)
    assert Decimal(left["availableUSD"]) == Decimal(10) - total and Decimal(left["heldUSD"]) == 0
    checked = verify(running)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def first_hold(running: Running, project: str, **extra: Any) -> Decimal:
    """The first hold of a cpu-8c-us Job, as the estimate quotes it (a dry run)."""
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": "priced"},
        "spec": {
            "image": registry_python_image(),
            "command": ["true"],
            "placement": {"offerings": ["cpu-8c-us"]},
            **extra,
        },
    }
    with running.client() as client:
        answered = client.post(f"{API}/namespaces/{project}/jobs", params={"dryRun": "All"}, json=body)
        assert answered.status_code == 201, answered.text
        return Decimal(answered.json()["status"]["estimate"]["holdUSD"])


def test_a_job_waits_for_credit_and_starts_once_it_is_granted(running: Running) -> None:
    # Credit for one and a half holds: the create is admitted (its first hold fits), index 0 runs and is
    # charged a minute, and then index 1's hold no longer fits: it waits, without capacity, until a grant.
    project = running.project(credit=None)
    hold = first_hold(running, project)
    with running.client() as client:
        budget = str(hold * Decimal("1.5"))
        granted = client.post(f"{API}/projects/{project}/credits", json={"amountUSD": budget, "key": "one-hold"})
        assert granted.status_code == 201, granted.text
    create_job(running, project, "unfunded", "echo ran-once-funded", completions=2)

    def waiting() -> dict[str, Any] | None:
        status = running.job(project, "unfunded")["status"]
        return status if status.get("reason") == "InsufficientCredits" else None

    status = running.wait_for("the Job to wait for credit", waiting)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Funded"] == "False"
    assert "credits grant" in status["fix"] and "available" in status["message"]
    waiters = [a for a in running.attempts(project, "unfunded") if a["status"].get("reason") == "InsufficientCredits"]
    assert len(waiters) == 1 and not waiters[0]["spec"].get("node")  # no capacity, nothing charged, while it waits
    assert Decimal(credits(running, project)["availableUSD"]) < hold
    with running.client() as client:
        granted = client.post(f"{API}/projects/{project}/credits", json={"amountUSD": "5", "key": "top-up"})
        assert granted.status_code == 201, granted.text
    done = running.wait_phase(project, "unfunded", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert {c["type"]: c["status"] for c in done["status"]["conditions"]}["Funded"] == "True"
    attempts = running.attempts(project, "unfunded")
    assert len(attempts) == 2, [(a["metadata"]["name"], a["status"]) for a in attempts]  # one per index
    with running.client() as client:
        assert "ran-once-funded" in client.get(f"{API}/namespaces/{project}/jobs/unfunded/log").text


def test_max_cost_holds_a_job_back_until_it_is_raised(running: Running) -> None:
    project = running.project(credit="10")
    # The cap fits the first hold (8 s of the tests' funded window plus one minute) but not index 1's hold
    # once index 0's minute is charged: index 1 waits for a higher cap.
    cap = first_hold(running, project) + Decimal("0.0001")
    create_job(running, project, "capped", "echo within-the-cap", maxCostUSD=str(cap), completions=2)

    def waiting() -> dict[str, Any] | None:
        status = running.job(project, "capped")["status"]
        return status if status.get("reason") == "MaxCostReached" else None

    status = running.wait_for("the Job to wait for a higher cap", waiting)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Funded"] == "False"
    assert "maxCostUSD" in status["fix"]
    assert Decimal(status["cost"]["limitUSD"]) == cap
    with running.client() as client:
        response = client.patch(
            f"{API}/namespaces/{project}/jobs/capped",
            json={"spec": {"maxCostUSD": "1"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text
    done = running.wait_phase(project, "capped", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    final = running.wait_for(
        "the final charge", lambda: (c := running.job(project, "capped")["status"].get("cost", {})).get("final") and c
    )
    assert Decimal(final["totalUSD"]) <= Decimal(1)


def test_a_running_job_that_reaches_its_cap_is_stopped_and_waits(running: Running) -> None:
    project = running.project(credit="10")
    # The first hold (0.007616 USD: 8 s of the tests' funded window plus a minute) fits 0.0085, its first
    # extension does not, and the hold no longer covers what a stop costs (the grace and the rounding to a
    # minute): the attempt is stopped at once, and the Job waits for a higher cap.
    create_job(running, project, "spender", "sleep 300", maxCostUSD="0.0085")

    def stopped_for_the_cap() -> dict[str, Any] | None:
        status = running.job(project, "spender")["status"]
        return status if status.get("reason") == "MaxCostReached" else None

    status = running.wait_for("the cap to stop the Job", stopped_for_the_cap, timeout=120)
    assert {c["type"]: c["status"] for c in status["conditions"]}["Funded"] == "False"
    first = sorted(running.attempts(project, "spender"), key=lambda a: a["spec"]["number"])[0]
    why = str((first["spec"].get("stop") or {}).get("reason")) + str(first["status"].get("message"))
    assert first["status"]["phase"] == "Stopped" and "MaxCostReached" in why
    final = running.wait_for(
        "the stopped attempt's final charge",
        lambda: (c := running.attempts(project, "spender")[0]["status"].get("cost", {})).get("final") and c,
    )
    assert Decimal(final["totalUSD"]) <= Decimal("0.0085")  # the stop came while the hold still covered it
    with running.client() as client:
        response = client.patch(
            f"{API}/namespaces/{project}/jobs/spender",
            json={"spec": {"state": "Cancelled"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text
    running.wait_phase(project, "spender", "Cancelled")
    checked = verify(running)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_credit_for_exactly_one_hold_does_not_churn_attempts(running: Running) -> None:
    # With the tests' 8 s window a hold is smaller than what a stop needs, so the first attempt is stopped
    # for credit as soon as it bills. Its replacement and index 1 must wait, not loop through new attempts.
    project = running.project(credit=None)
    hold = first_hold(running, project)
    with running.client() as client:
        granted = client.post(f"{API}/projects/{project}/credits", json={"amountUSD": str(hold), "key": "exact"})
        assert granted.status_code == 201, granted.text
    create_job(running, project, "tight", "echo tight", completions=2)
    running.wait_for(
        "the Job to wait for credit",
        lambda: running.job(project, "tight")["status"].get("reason") == "InsufficientCredits",
    )
    with running.client() as client:
        granted = client.post(f"{API}/projects/{project}/credits", json={"amountUSD": "5", "key": "more"})
        assert granted.status_code == 201, granted.text
    done = running.wait_phase(project, "tight", "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert len(running.attempts(project, "tight")) <= 3  # at most one money stop, then one attempt per index
    checked = verify(running)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_statement_names_each_attempt_even_after_its_job_is_gone(running: Running) -> None:
    """``nodus billing statement`` with an administrator's kubeconfig (what ``nodus dev`` gives) names the attempt
    every hold, charge and release paid for, never its bare uid, shows the rounding to the billing increment as
    Rounding and rates to four decimals; once the Job and its Attempt are deleted it still names the attempt
    (the name is kept with its hold), through the API and on the database alike."""
    project = running.project(credit="10")
    create_job(running, project, "named", "sleep 1")
    running.wait_for("the final charge", lambda: running.job(project, "named")["status"].get("cost", {}).get("final"))
    [attempt] = running.attempts(project, "named")
    uid, rate = attempt["metadata"]["uid"], attempt["status"]["placement"]["rateUSDPerHour"]
    env = {"KUBECONFIG": str(running.cluster.kubeconfig("admin")), "PATH": "/usr/bin:/bin"}

    shown = subprocess.run(
        [sys.executable, "-m", "nodus", "billing", "statement", project],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout
    paid = [line for line in table.splitlines()[1:] if line.startswith("20") and " Grant " not in line]
    assert paid and all(line.endswith("  attempt/named-0-1") for line in paid), table
    assert uid not in table
    charges = [line for line in paid if " Charge " in line]
    assert charges and all(f" {money.rate_cell(rate)} " in line for line in charges), table
    assert any(" Rounding " in line for line in charges) and not any(" Teardown " in line for line in paid), table
    assert "Rounding: the billed time rounded up to the billing increment" in table

    name = attempt["metadata"]["name"]
    with running.client() as client:
        assert client.delete(f"{API}/namespaces/{project}/jobs/named").status_code == 200
        running.wait_for(
            "the attempt to be gone",
            lambda: client.get(f"{API}/namespaces/{project}/attempts/{name}").status_code == 404,
        )
    for where in (env, {**env, "NODUS_DATABASE_URL": running.cluster.database_url}):
        listed = subprocess.run(
            [sys.executable, "-m", "nodus", "billing", "statement", project, "--csv"],
            capture_output=True,
            text=True,
            timeout=60,
            env=where,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
        rows = [row for row in csv.DictReader(io.StringIO(listed.stdout)) if row["subject"] == uid]
        assert {"Hold", "Charge", "Release"} <= {row["kind"] for row in rows}, rows
        assert {row["subjectName"] for row in rows} == {"attempt/named-0-1"}, rows
