"""Deleting a project (ADR 0037), through the real server: the project ``nodus dev`` creates stays, and the credit
of a deleted project goes with it, so a project created again under its name starts with none."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from nodus.storage import database
from tests.conftest import make_project
from tests.e2e.test_dev import _start, _stop
from tests.support import kubectl
from tests.support.cluster import Cluster, free_port
from tests.support.objects import API

pytestmark = pytest.mark.e2e


def wait_gone(admin: httpx.Client, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while admin.get(f"{API}/projects/{name}").status_code != 404:
        assert time.monotonic() < deadline, f"project {name} was not deleted"
        time.sleep(0.2)


def credits(admin: httpx.Client, name: str) -> dict[str, Decimal]:
    body = admin.get(f"{API}/projects/{name}/credits").json()
    return {key: Decimal(body[key]) for key in ("availableUSD", "heldUSD", "balanceUSD")}


def grant(admin: httpx.Client, name: str, amount: str, key: str) -> httpx.Response:
    return admin.post(f"{API}/projects/{name}/credits", json={"amountUSD": amount, "key": key})


def test_a_project_created_again_under_a_deleted_ones_name_starts_with_no_credit(
    cluster: Cluster, admin: httpx.Client, kubectl_binary: Path
) -> None:
    name = make_project(admin, credit="40")
    deleted = kubectl.run(kubectl_binary, cluster.kubeconfig("admin"), "delete", "project", name)
    said = deleted.stdout + deleted.stderr
    assert f"project {name} holds 40.00 USD of credit" in said and "starts with none" in said, said
    wait_gone(admin, name)

    body = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": name}, "spec": {}}
    assert admin.post(f"{API}/projects", json=body).status_code == 201
    assert credits(admin, name) == {"availableUSD": 0, "heldUSD": 0, "balanceUSD": 0}
    # The key that granted the deleted project's credit is spent: refused, not answered "already granted".
    again = grant(admin, name, "40", "start")
    assert again.status_code == 409, again.text
    assert "earlier project" in again.json()["message"] and again.json()["fix"], again.text
    assert grant(admin, name, "10", "new").status_code == 201
    assert credits(admin, name)["availableUSD"] == 10


def test_no_credit_is_granted_to_a_project_being_deleted(admin: httpx.Client) -> None:
    name = make_project(admin, credit="5")
    # A Budget that a finalizer of the user's keeps: the project stays Terminating until it is lifted.
    budget = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Budget",
        "metadata": {"name": "kept", "finalizers": ["example.com/keep"]},
        "spec": {"limitUSD": "1"},
    }
    budgets = f"{API}/namespaces/{name}/budgets"
    created = admin.post(budgets, json=budget)
    assert created.status_code == 201, created.text
    assert admin.delete(f"{API}/projects/{name}").status_code in (200, 202)
    refused = grant(admin, name, "50", "late")
    assert refused.status_code == 403, refused.text
    assert refused.json()["details"]["causes"][0]["reason"] == "ProjectTerminating", refused.text
    lifted = admin.patch(
        f"{budgets}/kept",
        json={"metadata": {"finalizers": None}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert lifted.status_code == 200, lifted.text
    wait_gone(admin, name)


@pytest.mark.slow  # a whole nodus dev (registry, image push, podman hosts), about 30 s (slow tier)
def test_nodus_dev_refuses_deleting_its_default_project(
    database_server: str, tmp_path: Path, kubectl_binary: Path
) -> None:
    url = asyncio.run(database.create_database(database_server))
    data_dir = tmp_path / "data"
    try:
        process, _ = _start(data_dir, free_port(), url)
        try:
            config = data_dir.resolve() / "kubeconfig"
            refused = kubectl.run(kubectl_binary, config, "delete", "project", "default", check=False)
            said = refused.stdout + refused.stderr
            assert refused.returncode != 0, said
            assert 'projects.nodus.dev "default" is forbidden: this project may not be deleted' in said, said
            left = kubectl.run(kubectl_binary, config, "get", "project", "default", "-o", "jsonpath={.metadata}")
            assert "deletionTimestamp" not in left.stdout
        finally:
            assert _stop(process) == 0
    finally:
        asyncio.run(database.drop_database(url))
