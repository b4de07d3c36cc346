"""The Job declaration and what ``kubectl get jobs`` shows for a Job."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.api import fieldmanagement
from nodus.api.kinds.job import JOB, JobSpec, JobStatus, JobStrategy
from nodus.api.kinds.job.columns import completions, cost
from tests.api.kinds.jobbuilder import make_job, stored


def column(name: str) -> Any:
    (found,) = [c for c in JOB.printer_columns if c.name == name]
    return found


def test_declaration() -> None:
    assert (JOB.kind, JOB.plural, JOB.singular, JOB.namespaced) == ("Job", "jobs", "job", True)
    assert JOB.short_names == ("nj",)
    assert JOB.categories == ("nodus",)
    assert JOB.field_selectors == ("metadata.name", "metadata.namespace", "status.phase")
    assert JOB.spec_model is JobSpec
    assert JOB.status_model is JobStatus
    assert isinstance(JOB.strategy, JobStrategy)
    assert JOB.description.startswith("Job is a run-to-completion container with checkpoints")
    assert JOB.description.endswith("Every index runs as Attempts.")


@pytest.mark.parametrize(
    ("field", "first", "second"),
    [
        pytest.param("env", {"name": "A", "value": "1"}, {"name": "B", "value": "2"}, id="env-by-name"),
        pytest.param(
            "volumes",
            {"volume": "data", "mountPath": "/data"},
            {"volume": "cache", "mountPath": "/cache"},
            id="volumes-by-mount-path",
        ),
        pytest.param("secrets", {"name": "hf-token"}, {"name": "wandb"}, id="secrets-by-name"),
    ],
)
def test_keyed_lists_merge_items_of_two_appliers(field: str, first: dict[str, str], second: dict[str, str]) -> None:
    """Server-side apply keeps each manager's items of a keyed list instead of replacing the list."""
    base = {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "p"}}
    live = None
    for manager, item in (("alice", first), ("bob", second)):
        applied = {**base, "spec": {field: [item]}}
        live = fieldmanagement.apply(
            live,
            applied,
            manager=manager,
            force=False,
            api_version="nodus.dev/v1",
            list_keys=JOB.list_map_keys,
            now="2026-11-29T12:00:00Z",
        )
    assert live is not None
    assert live["spec"][field] == [first, second]


def test_columns_in_order_without_name() -> None:
    """kubectl adds NAME from metadata.name; the kind lists only its own columns."""
    shown = [(c.name.upper(), c.priority) for c in JOB.printer_columns]
    assert shown == [
        ("PHASE", 0),
        ("COMPLETIONS", 0),
        ("COST", 0),
        ("AGE", 0),
        ("REASON", 1),
        ("OFFERING", 1),
        ("ATTEMPTS", 1),
        ("GANG", 1),
    ]
    assert column("Age").type == "date"
    assert column("Attempts").type == "integer"


def test_cells_of_a_running_job() -> None:
    job = stored(make_job().completions(4).parallelism(2).build())
    job["status"] = {
        "phase": "Running",
        "succeeded": 1,
        "reason": "CapacityRecovered",
        "placement": {"offering": "h100-sxm-80g-x8-us"},
        "attempts": {"current": 2, "max": 3, "total": 5},
        "cost": {"totalUSD": "12.5"},
    }
    cells = {c.name: c.extract(job) for c in JOB.printer_columns}
    assert cells == {
        "Phase": "Running",
        "Completions": "1/4",
        "Cost": "$12.50",
        "Age": "2026-11-29T12:00:00Z",
        "Reason": "CapacityRecovered",
        "Offering": "h100-sxm-80g-x8-us",
        "Attempts": 5,
        "Gang": None,
    }


def test_the_gang_column_counts_started_ranks() -> None:
    job = stored(make_job().build())
    job["status"] = {"gang": {"phase": "Starting", "size": 4, "started": 3, "epoch": 2}}
    assert column("Gang").extract(job) == "3/4 Starting e2"
    job["status"] = {"gang": {"phase": "Queued", "epoch": 0}}
    assert column("Gang").extract(job) == "Queued"


def test_cells_of_a_newly_created_job() -> None:
    job = stored(make_job().completions(3).build())
    cells = {c.name: c.extract(job) for c in JOB.printer_columns}
    assert cells["Phase"] == "Pending"
    assert cells["Completions"] == "0/3"
    assert cells["Cost"] == "$0.00"
    assert cells["Attempts"] is None


@pytest.mark.parametrize(
    ("spec", "status", "expected"),
    [
        pytest.param({"completions": 4}, {"succeeded": 0}, "0/4", id="none-yet"),
        pytest.param({"completions": 4}, {"succeeded": 4}, "4/4", id="all"),
        pytest.param({}, {}, "0/1", id="defaults"),
        pytest.param({"completions": "x"}, {"succeeded": None}, "0/1", id="malformed"),
    ],
)
def test_completions_column(spec: dict[str, Any], status: dict[str, Any], expected: str) -> None:
    assert completions({"spec": spec, "status": status}) == expected


@pytest.mark.parametrize(
    ("total", "expected"),
    [
        pytest.param(None, "$0.00", id="absent"),
        pytest.param("0", "$0.00", id="zero"),
        pytest.param("12.5", "$12.50", id="pads-cents"),
        pytest.param("12.50", "$12.50", id="cents"),
        pytest.param("3", "$3.00", id="whole"),
        pytest.param("0.004213", "<$0.01", id="micro-dollars-not-rounded-away"),
        pytest.param("0.005", "$0.01", id="half-a-cent-rounds-up"),
        pytest.param("4.705", "$4.71", id="to-the-cent"),
        pytest.param("7.100000", "$7.10", id="trailing-zeros-trimmed"),
        pytest.param("1234567.5", "$1,234,567.50", id="thousands"),
        pytest.param("garbage", "garbage", id="malformed-shown-as-stored"),
    ],
)
def test_cost_column(total: str | None, expected: str) -> None:
    status: dict[str, Any] = {"cost": {"totalUSD": total}} if total is not None else {}
    assert cost({"status": status}) == expected
