"""A cluster that runs Jobs: its own database and API server, controllers and the simulated cloud.

It is separate from the session's API-only cluster so that Jobs created by the API tests are never
picked up and run, and so that these tests may kill and restart controllers.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodus.apimachinery.sealing import Keyring
from nodus.storage import database
from tests.agent.support_https import HttpsServer
from tests.support import cluster as clusters
from tests.support import controllers
from tests.support.objects import API

pytestmark = pytest.mark.e2e


@dataclass
class Running:
    """The job-running cluster: the API server, the leading controllers and a workspace."""

    cluster: clusters.Cluster
    controllers: controllers.ControllerProcess
    directory: Path
    # Standby controller processes some tests start; stopped with the cluster.
    others: list[controllers.ControllerProcess] = field(default_factory=list)
    # An HTTPS server with its own CA, which the simulated hosts' agents trust: files put in
    # ``www`` are served at ``https.url``.
    https: HttpsServer | None = None
    www: Path | None = None

    def client(self, user: str = "admin") -> httpx.Client:
        return self.cluster.client(user)

    def logs(self) -> str:
        apiserver, controllers = self.cluster.logs()[-20000:], self.controllers.logs()[-40000:]
        return f"--- apiserver ---\n{apiserver}\n--- controllers ---\n{controllers}"

    def project(self, credit: str | None = "1000") -> str:
        """A new project where alice is Owner, with ``credit`` USD granted (None: none)."""
        name = f"run-{uuid.uuid4().hex[:8]}"
        with self.client() as client:
            body = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": name}, "spec": {}}
            response = client.post(
                f"{API}/projects", json={**body, "spec": {"members": [{"name": "alice", "role": "Owner"}]}}
            )
            assert response.status_code == 201, response.text
            if credit is not None:
                granted = client.post(f"{API}/projects/{name}/credits", json={"amountUSD": credit, "key": "start"})
                assert granted.status_code == 201, granted.text
        return name

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float = 90) -> Any:
        """Poll ``check`` until it returns something truthy; fail with the process logs otherwise."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what} (last: {last!r})\n{self.logs()}")

    def job(self, project: str, name: str) -> dict[str, Any]:
        with self.client() as client:
            response = client.get(f"{API}/namespaces/{project}/jobs/{name}")
            assert response.status_code == 200, response.text
            return dict(response.json())

    def attempts(self, project: str, job: str) -> list[dict[str, Any]]:
        with self.client() as client:
            response = client.get(
                f"{API}/namespaces/{project}/attempts", params={"labelSelector": f"nodus.dev/job={job}"}
            )
            assert response.status_code == 200, response.text
            return list(response.json()["items"])

    def wait_phase(self, project: str, name: str, *phases: str, timeout: float = 90) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            job = self.job(project, name)
            return job if (job.get("status") or {}).get("phase") in phases else None

        return dict(self.wait_for(f"job {name} to reach {phases}", check, timeout))


# Storage in the test cluster: 256 KiB free per Job (the other tests' outputs stay below it) and 10 USD per
# GiB-hour, so that a Job keeping 1 MiB above the inclusion is charged a visible amount every (2 s) hour.
SHIPPED_STORAGE = 'storage: {rateUSDPerGiBMonth: "0.023", freePerJob: 10Gi}'
TEST_STORAGE = 'storage: {rateUSDPerGiBMonth: "7300", freePerJob: 256Ki}'
STORAGE_FREE_BYTES = 256 * 1024


# A100 PCIe hosts are shared between attempts in the test cluster (tests/e2e/running/test_shared_offerings.py; no
# other test uses them), as a deployment opts an accelerator in (ADR 0048).
SHARED_HOST = "  - accelerator: a100-pcie-40g\n"


def price_book_text() -> str:
    """The shipped price book with the test cluster's storage price and its A100 PCIe hosts shared."""
    shipped = resources.files("nodus.catalog").joinpath("pricebook.yaml").read_text(encoding="utf-8")
    assert shipped.count(SHIPPED_STORAGE) == 1, "the shipped price book's storage line changed: update the tests"
    assert shipped.count(SHARED_HOST) == 1, "the shipped price book's A100 PCIe entry changed: update the tests"
    return shipped.replace(SHIPPED_STORAGE, TEST_STORAGE).replace(SHARED_HOST, SHARED_HOST + "    shareable: true\n")


@pytest.fixture(scope="session")
def running(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    url = asyncio.run(database.create_database(database_server))
    database.migrate(url)
    directory = tmp_path_factory.mktemp("running")
    keys = directory / "secret-keys"
    Keyring.generate(keys)
    book = directory / "pricebook.yaml"
    book.write_text(price_book_text())
    extra = ("--watch-bookmark-interval", "1s", "--secret-key-file", str(keys), "--funded-window", "8s")
    extra += ("--price-book", str(book))
    # Its inputs, sources, S3 endpoints and customer databases are on this machine (ADR 0032).
    extra += ("--allow-loopback-endpoints",)
    cluster = clusters.start(directory, url, extra_args=extra, migrate=False)
    www = directory / "www"
    www.mkdir()
    https = HttpsServer(www, directory / "certificates")
    leader = controllers.start(cluster, directory, "first", ("--sim-agent-trust-ca", str(https.ca_file)))
    running = Running(cluster, leader, directory, https=https, www=www)
    try:
        controllers.wait_for_leader(cluster, "first")
        yield running
    finally:
        for process in {id(p): p for p in (leader, running.controllers, *running.others)}.values():
            process.stop()
        controllers.kill_leftover_agents(directory)
        cluster.stop()
        https.close()
        asyncio.run(database.drop_database(url))
