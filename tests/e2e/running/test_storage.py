"""Storage billing end to end: a Job's outputs above the free inclusion are charged hour after hour while
the Job exists (an hour lasts 2 s in the test cluster, billed as an hour), the hour of its deletion too, and
an hour the project cannot pay waits, the outputs kept, until credit is granted."""

from __future__ import annotations

import time
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest

from tests.e2e.running.conftest import STORAGE_FREE_BYTES, Running
from tests.e2e.running.test_billing import statement, verify
from tests.support.images import registry_python_image
from tests.support.objects import API

pytestmark = pytest.mark.e2e

KEPT = STORAGE_FREE_BYTES + 2**20  # 1 MiB above the test cluster's free inclusion
TEST_RATE_PER_GIB_HOUR = Decimal(10)  # the test price book: 7300 USD per GiB-month of 730 hours
FINALIZER = "nodus.dev/storage-charges"


def hourly(billed: int) -> Decimal:
    return (Decimal(billed) * TEST_RATE_PER_GIB_HOUR / 2**30).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)


def keep_a_file(running: Running, project: str, name: str) -> dict[str, Any]:
    """Run a Job that commits one output of ``KEPT`` bytes, and wait for it to succeed."""
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "image": registry_python_image(),
            "command": ["/bin/sh", "-c", f"head -c {KEPT} /dev/urandom > /workspace/blob.bin"],
            "resources": {"cpu": "1"},
            "placement": {"offerings": ["cpu-8c-us"]},
            "outputs": [{"name": "blob", "path": "/workspace/blob.bin"}],
        },
    }
    with running.client() as client:
        response = client.post(f"{API}/namespaces/{project}/jobs", json=body)
        assert response.status_code == 201, response.text
    job = running.wait_phase(project, name, "Succeeded", "Failed", timeout=120)
    assert job["status"]["phase"] == "Succeeded", job["status"]
    return job


def storage_lines(running: Running, project: str) -> list[dict[str, str]]:
    """The project's statement lines for storage, oldest first."""
    return [row for row in statement(running, project) if row["segment"] == "Storage"]


def assert_hours(lines: list[dict[str, str]], uid: str, amount: Decimal) -> None:
    """Hours 0, 1, 2, ... of the Job, each once, each an hour of its billed bytes."""
    assert [row["key"] for row in lines] == [f"storage:{uid}:{n}" for n in range(len(lines))]
    for row in lines:
        assert (row["kind"], row["subject"], row["seconds"]) == ("Charge", uid, "3600")
        assert Decimal(row["amountUSD"]) == amount and Decimal(row["rateUSDPerHour"]) == amount


def credits(running: Running, project: str) -> dict[str, Any]:
    with running.client() as client:
        return dict(client.get(f"{API}/projects/{project}/credits").json())


def wait_gone(running: Running, project: str, name: str) -> None:
    def gone() -> bool:
        with running.client() as client:
            return client.get(f"{API}/namespaces/{project}/jobs/{name}").status_code == 404

    running.wait_for(f"job {name} to be gone", gone)


def delete(running: Running, project: str, name: str) -> None:
    with running.client() as client:
        response = client.delete(f"{API}/namespaces/{project}/jobs/{name}")
        assert response.status_code in (200, 202), response.text


def wait_verified(running: Running) -> None:
    """``nodus billing verify`` exits 0 (a display copy may lag a moment behind the last movement)."""
    deadline = time.monotonic() + 30
    while True:
        checked = verify(running)
        if checked.returncode == 0:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"nodus billing verify found breaches:\n{checked.stdout}{checked.stderr}")
        time.sleep(0.5)


def test_outputs_above_the_free_inclusion_are_charged_by_the_hour_until_the_job_is_deleted(running: Running) -> None:
    project = running.project(credit="10")
    job = keep_a_file(running, project, "kept")
    uid = job["metadata"]["uid"]
    [blob] = job["status"]["outputs"]
    assert blob["size"] == KEPT and blob["committedTime"] and job["status"]["storage"]["bytes"] == KEPT
    amount = hourly(KEPT - STORAGE_FREE_BYTES)
    assert amount == Decimal("0.009766")

    def billed() -> dict[str, Any] | None:
        status = running.job(project, "kept")["status"]
        return status if (status.get("storage") or {}).get("billedBytes") == KEPT - STORAGE_FREE_BYTES else None

    running.wait_for("status.storage.billedBytes", billed)
    lines = running.wait_for("two hours charged", lambda: (rows := storage_lines(running, project))[1:] and rows)
    assert_hours(lines, uid, amount)

    def shown() -> dict[str, Any] | None:
        cost = running.job(project, "kept")["status"].get("cost") or {}
        return cost if Decimal(cost.get("bySegment", {}).get("storageUSD") or 0) >= 2 * amount else None

    cost = running.wait_for("the storage charges in status.cost", shown)
    segments = {k: Decimal(v) for k, v in cost["bySegment"].items() if k != "coveredByNodus"}
    assert segments["storageUSD"] % amount == 0  # whole hours, as charged
    assert Decimal(cost["totalUSD"]) == sum(segments.values())  # compute and storage in one total
    assert cost["final"] is False  # storage is charged while the Job exists
    assert FINALIZER in running.job(project, "kept")["metadata"]["finalizers"]

    before = len(storage_lines(running, project))
    delete(running, project, "kept")
    wait_gone(running, project, "kept")
    lines = storage_lines(running, project)
    assert len(lines) >= before  # the hour of its deletion is charged whole
    assert_hours(lines, uid, amount)
    settled = len(lines)
    left = credits(running, project)
    assert Decimal(left["availableUSD"]) >= 0 and Decimal(left["heldUSD"]) == 0
    wait_verified(running)
    assert len(storage_lines(running, project)) == settled  # nothing more once it is gone


def test_an_hour_the_project_cannot_pay_waits_with_the_outputs_kept_until_credit_is_granted(
    running: Running,
) -> None:
    # Enough for the Job's first hold; after its charge (one minute of cpu-8c-us, 0.00672 USD) at most
    # one storage hour (0.009766 USD) fits, and then the project runs short.
    project = running.project(credit="0.02")
    job = keep_a_file(running, project, "short")
    uid = job["metadata"]["uid"]
    amount = hourly(KEPT - STORAGE_FREE_BYTES)

    def unpaid() -> dict[str, Any] | None:
        status = running.job(project, "short")["status"]
        condition = {c["type"]: c for c in status.get("conditions") or []}.get("StoragePaid") or {}
        return condition if condition.get("status") == "False" else None

    condition = running.wait_for("StoragePaid=False", unpaid)
    assert condition["reason"] == "InsufficientCredits"
    assert "could not be charged" in condition["message"] and "outputs are kept" in condition["message"]
    available = Decimal(credits(running, project)["availableUSD"])
    assert 0 <= available < amount  # never below zero: the hour is owed, not charged
    lines = storage_lines(running, project)
    assert len(lines) <= 1
    assert_hours(lines, uid, amount)
    with running.client() as client:
        assert client.get(f"{API}/namespaces/{project}/jobs/short/outputs/blob", params={"index": 0}).status_code == 200

    with running.client() as client:
        granted = client.post(f"{API}/projects/{project}/credits", json={"amountUSD": "1", "key": "top-up"})
        assert granted.status_code == 201, granted.text

    def paid() -> dict[str, Any] | None:
        status = running.job(project, "short")["status"]
        condition = {c["type"]: c for c in status.get("conditions") or []}.get("StoragePaid") or {}
        return condition if condition.get("status") == "True" else None

    running.wait_for("StoragePaid=True", paid)
    lines = running.wait_for("the owed hours charged", lambda: (rows := storage_lines(running, project))[2:] and rows)
    assert_hours(lines, uid, amount)
    delete(running, project, "short")
    wait_gone(running, project, "short")
    assert_hours(storage_lines(running, project), uid, amount)
    wait_verified(running)
