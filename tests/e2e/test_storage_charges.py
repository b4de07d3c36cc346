"""The ledger door's post-paid charges (storage by the hour): the price it serves, each hour charged once,
never below zero, and only in the shape the storage billing controller sends."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.conftest import make_project
from tests.support.cluster import Cluster

pytestmark = pytest.mark.e2e

API = "/apis/nodus.dev/v1"


def charge(job: str, hour: int, amount: str, **extra: Any) -> dict[str, Any]:
    return {
        "operation": "Charge",
        "key": f"storage:{job}:{hour}",
        "subject": job,
        "segment": "Storage",
        "seconds": "3600",
        "rateUSDPerHour": amount,
        "amountUSD": amount,
        **extra,
    }


def test_storage_hours_are_charged_once_from_available_credit(cluster: Cluster, admin: httpx.Client) -> None:
    project = make_project(admin, [{"name": "alice", "role": "Owner"}], credit="1")
    job = str(uuid.uuid4())
    state = admin.get(f"{API}/namespaces/{project}/ledger/storage/{job}")
    assert state.status_code == 200, state.text
    assert state.json() == {
        "kind": "LedgerStorage",
        "apiVersion": "nodus.dev/v1",
        "project": project,
        "subject": job,
        "price": {
            "pricebookVersion": "2026-11",
            "rateUSDPerGiBMonth": "0.023",
            "freeBytes": 10 * 2**30,
            "hoursPerMonth": 730,
        },
        "chargedUSD": "0.00",
        "hours": 0,
        "credits": {"balanceUSD": "1.00", "heldUSD": "0.00", "availableUSD": "1.00"},
    }
    with cluster.client("alice") as owner:
        assert owner.get(f"{API}/namespaces/{project}/ledger/storage/{job}").status_code == 403
        assert owner.post(f"{API}/namespaces/{project}/ledger/postings", json=charge(job, 0, "0.4")).status_code == 403

    postings = f"{API}/namespaces/{project}/ledger/postings"
    first = admin.post(postings, json=charge(job, 0, "0.4", memo="hour 0"))
    assert first.status_code == 201, first.text
    assert (first.json()["hours"], first.json()["lastHour"], first.json()["chargedUSD"]) == (1, 0, "0.40")
    again = admin.post(postings, json=charge(job, 0, "0.4", memo="hour 0"))
    assert again.status_code == 201 and again.json()["chargedUSD"] == "0.40"  # a retry charges nothing more
    assert admin.post(postings, json=charge(job, 0, "0.5")).status_code == 409
    second = admin.post(postings, json=charge(job, 1, "0.4")).json()
    assert (second["hours"], second["lastHour"], second["chargedUSD"]) == (2, 1, "0.80")
    assert second["credits"]["availableUSD"] == "0.20"

    refused = admin.post(postings, json=charge(job, 2, "0.4"))
    assert refused.status_code == 402 and refused.json()["reason"] == "InsufficientCredits", refused.text
    assert "0.20" in refused.json()["message"] and "credits grant" in refused.json()["fix"]
    after = admin.get(f"{API}/namespaces/{project}/ledger/storage/{job}").json()
    assert (after["hours"], after["lastHour"], after["credits"]["availableUSD"]) == (2, 1, "0.20")


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"segment": "Running"}, id="a-hold-segment"),
        pytest.param({"key": "storage:someone-else:0"}, id="key-of-another-subject"),
        pytest.param({"key": "storage:{job}:x"}, id="key-without-an-hour"),
        pytest.param({"amountUSD": "0.41"}, id="amount-not-rate-times-time"),
        pytest.param({"seconds": "-1"}, id="negative-seconds"),
        pytest.param({"amountUSD": "0", "rateUSDPerHour": "0"}, id="nothing"),
        pytest.param({"subject": ""}, id="no-subject"),
        pytest.param({"memo": 7}, id="memo-not-text"),
    ],
)
def test_a_charge_not_in_the_controllers_shape_is_refused(admin: httpx.Client, change: dict[str, Any]) -> None:
    project = make_project(admin, credit="1")
    job = str(uuid.uuid4())
    body = charge(job, 0, "0.4")
    body.update({k: v.format(job=job) if isinstance(v, str) else v for k, v in change.items()})
    refused = admin.post(f"{API}/namespaces/{project}/ledger/postings", json=body)
    assert refused.status_code == 400, refused.text
    state = admin.get(f"{API}/namespaces/{project}/ledger/storage/{job}").json()
    assert (state["hours"], state["credits"]["availableUSD"]) == (0, "1.00")
