"""A host of a shareable offering runs several attempts at once (ADR 0048): a 1-GPU Job no longer takes a 4-GPU
host. The test cluster's price book shares its A100 PCIe hosts (conftest.price_book_text); two 1-GPU Jobs restricted
to the 4-GPU offering run together on one simulated host, each with its own GPU and a quarter of the host's rate.

The second Job is created once the first runs: Works of one cycle that each cold-start a shareable offering get a
host each (a host joins the room once its Node is Ready), which the closing note of issue 19 records."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_jobs import create, job_log
from tests.support.objects import API

pytestmark = pytest.mark.e2e

OFFERING = "a100-pcie-40g-x4-asia"


def test_two_1_gpu_jobs_share_a_host_of_a_shareable_offering(running: Running) -> None:
    project = running.project()
    with running.client() as client:
        offering = client.get(f"{API}/offerings/{OFFERING}").json()
    assert offering["spec"]["shareable"] is True and offering["spec"]["gpus"] == 4
    quarter = (Decimal(offering["spec"]["rateUSDPerHour"]) / 4).quantize(Decimal("0.000001"))
    spec: dict[str, Any] = {
        "command": ["/bin/sh", "-c", "echo devices=$NVIDIA_VISIBLE_DEVICES; sleep 8"],
        "resources": {"gpu": {"count": 1, "type": ["a100-pcie-40g"]}, "cpu": "2", "memory": "8Gi"},
        "placement": {"offerings": [OFFERING]},
    }
    create(running, project, "left", **spec)
    running.wait_phase(project, "left", "Running")
    create(running, project, "right", **spec)

    def both_running() -> list[dict[str, Any]] | None:
        live = [a for job in ("left", "right") for a in running.attempts(project, job)]
        return live if len(live) == 2 and all(a["status"].get("phase") == "Running" for a in live) else None

    left, right = running.wait_for("both jobs to run at once", both_running, timeout=120)
    assert left["spec"]["node"] == right["spec"]["node"], "one host holds both"
    gpus = [a["status"]["placement"]["gpuIndexes"] for a in (left, right)]
    assert all(len(g) == 1 for g in gpus) and gpus[0] != gpus[1]
    for attempt in (left, right):
        assert Decimal(attempt["status"]["placement"]["rateUSDPerHour"]) == quarter, attempt["status"]["placement"]
    for name, attempt in (("left", left), ("right", right)):
        done = running.wait_phase(project, name, "Succeeded", "Failed")
        assert done["status"]["phase"] == "Succeeded", done["status"]
        index = attempt["status"]["placement"]["gpuIndexes"][0]
        assert job_log(running, project, name).strip() == f"devices={index}"
