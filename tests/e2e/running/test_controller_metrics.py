"""``nodus controllers --metrics-address``: a real controllers process serves its work queues' figures while it
runs (a standby too: its queues fill while it waits to lead) and stops serving when it stops (ADR 0060)."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.running.conftest import Running
from tests.support import controllers
from tests.support.cluster import free_port
from tests.support.objects import API, job

pytestmark = pytest.mark.e2e


def _samples(address: str) -> dict[str, float]:
    """The endpoint's samples; none while nothing listens there yet."""
    try:
        text = httpx.get(f"http://{address}/metrics", timeout=5).text
    except httpx.ConnectError:
        return {}
    lines = (line.rpartition(" ") for line in text.splitlines() if line and not line.startswith("#"))
    return {name: float(value) for name, _, value in lines}


def test_a_controllers_process_serves_its_queues_while_it_runs(running: Running) -> None:
    address = f"127.0.0.1:{free_port()}"
    standby = controllers.start(
        running.cluster, running.directory / "metrics", "metrics-standby", ("--metrics-address", address)
    )
    running.others.append(standby)
    try:
        # Served from its start, before the informers have listed.
        running.wait_for("the metrics endpoint", lambda: _samples(address), timeout=60)
        project = running.project()
        with running.client("alice") as client:
            response = client.post(f"{API}/namespaces/{project}/jobs", json=job("measured"))
            assert response.status_code == 201, response.text

        def jobs_queue_saw_it() -> dict[str, float] | None:
            samples = _samples(address)
            return samples if samples.get('nodus_workqueue_adds_total{name="jobs"}', 0) >= 1 else None

        samples = running.wait_for("the Job in the standby's queue", jobs_queue_saw_it, timeout=60)
        for queue in ("jobs", "billing", "provisioner"):
            assert f'nodus_workqueue_depth{{name="{queue}"}}' in samples
        assert samples["nodus_client_requests_total"] >= 1  # its Lease reads, at least
    finally:
        standby.stop()
    assert standby.process.returncode == 0, standby.logs()[-4000:]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://{address}/metrics", timeout=5)
