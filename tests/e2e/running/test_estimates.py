"""Estimates on a running cluster: a create bound to a dry run's ETag (If-Match) stores that estimate and is
never placed above its rate plus 10 %; a stale or foreign ETag is a 412; earlier runs of the same program
give the duration; ``nodus estimate`` prints the table and creates a bound Job."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodus.apimachinery import estimates
from tests.e2e.running.conftest import Running
from tests.support.images import registry_python_image
from tests.support.objects import API

pytestmark = pytest.mark.e2e


def job(name: str, script: str = "echo estimated", **extra: Any) -> dict[str, Any]:
    return {
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


def test_a_create_bound_to_an_estimate_keeps_it_and_its_rate_ceiling(running: Running) -> None:
    project = running.project()
    path = f"{API}/namespaces/{project}/jobs"
    body = job("bound", expectedDuration="5s")
    with running.client() as client:
        dry = client.post(path, params={"dryRun": "All"}, json=body)
        assert dry.status_code == 201, dry.text
        etag = dry.headers["etag"]
        estimate = dry.json()["status"]["estimate"]

        other = job("bound", expectedDuration="10s")
        mismatch = client.post(path, json=other, headers={"If-Match": etag})
        assert mismatch.status_code == 412 and mismatch.json()["reason"] == "EstimateMismatch"
        forged = client.post(path, json=body, headers={"If-Match": '"bm9wZQ.bm9wZQ.bm9wZQ"'})
        assert forged.status_code == 412
        smuggled = job("smuggled", expectedDuration="5s")
        smuggled["metadata"]["annotations"] = {estimates.RATE_CEILING: "1000"}
        refused = client.post(path, json=smuggled)
        assert refused.status_code == 422 and estimates.RATE_CEILING in refused.text

        created = client.post(path, json=body, headers={"If-Match": etag})
        assert created.status_code == 201, created.text
        stored = created.json()
        assert stored["status"]["estimate"] == estimate
        ceiling = Decimal(stored["metadata"]["annotations"][estimates.RATE_CEILING])
        assert ceiling == (Decimal(estimate["rateUSDPerHour"]) * Decimal("1.1")).quantize(Decimal("0.000001"))
        changed = client.patch(
            f"{path}/bound",
            json={"metadata": {"annotations": {estimates.RATE_CEILING: "99"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert changed.status_code == 422

    done = running.wait_phase(project, "bound", "Succeeded")
    assert done["status"]["estimate"] == estimate  # the controllers keep the admission estimate
    (attempt,) = running.attempts(project, "bound")
    assert Decimal(attempt["spec"]["placement"]["maxRateUSDPerHour"]) == ceiling
    assert Decimal(attempt["status"]["placement"]["rateUSDPerHour"]) <= ceiling


def test_earlier_runs_of_the_same_program_give_the_duration(running: Running) -> None:
    project = running.project()
    path = f"{API}/namespaces/{project}/jobs"
    with running.client() as client:
        first = client.post(path, params={"dryRun": "All"}, json=job("again", "sleep 2"))
        assert "NoExpectedDuration" in {w["code"] for w in first.json()["status"]["estimate"]["warnings"]}
        assert client.post(path, json=job("first-run", "sleep 2")).status_code == 201
    running.wait_phase(project, "first-run", "Succeeded")
    with running.client() as client:
        again = client.post(path, params={"dryRun": "All"}, json=job("again", "sleep 2"))
        estimate = again.json()["status"]["estimate"]
        notes = {w["code"]: w["message"] for w in estimate["warnings"]}
        assert "DurationFromHistory" in notes and "1 earlier run" in notes["DurationFromHistory"]
        assert Decimal(estimate["costUSD"]["p50"]) < Decimal(first.json()["status"]["estimate"]["costUSD"]["p50"])
        other = client.post(path, params={"dryRun": "All"}, json=job("other", "sleep 3"))
        assert "NoExpectedDuration" in {w["code"] for w in other.json()["status"]["estimate"]["warnings"]}


def test_nodus_estimate_prints_the_table_and_creates_a_bound_job(running: Running, tmp_path: Path) -> None:
    project = running.project()
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job("from-cli", expectedDuration="3s")))
    env = {"KUBECONFIG": str(running.cluster.kubeconfig("alice")), "PATH": "/usr/bin:/bin"}
    shown = subprocess.run(
        [sys.executable, "-m", "nodus", "estimate", "-f", str(manifest), "-n", project],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert shown.returncode == 0, shown.stderr
    for label in ("Cost USD", "First hold USD", "Placement", "cpu-8c-us", "Startup cold", "Placement explained:"):
        assert label in shown.stdout, shown.stdout
    created = subprocess.run(
        [sys.executable, "-m", "nodus", "estimate", "-f", str(manifest), "-n", project, "-o", "yaml", "--create"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert created.returncode == 0, created.stderr
    printed = yaml.safe_load(created.stdout)
    assert printed["etag"] and printed["estimate"]["rateUSDPerHour"]
    stored = running.job(project, "from-cli")
    assert estimates.RATE_CEILING in stored["metadata"]["annotations"]
    assert stored["status"]["estimate"]["costUSD"] == printed["estimate"]["costUSD"]
