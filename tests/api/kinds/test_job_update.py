"""Updates of a Job: immutability, the raise-only cost cap, the one-way Cancelled state, a finished Job's state,
status and warnings."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodus.api.kinds.job import JOB
from nodus.apimachinery.fieldpath import ErrorType
from tests.api.kinds.jobbuilder import JobBuilder, kinds_and_fields, make_job, stored, update

INVALID, FORBIDDEN = ErrorType.INVALID, ErrorType.FORBIDDEN


def rich_job() -> JobBuilder:
    """A Job with something in most fields, so that changing any of them is a change."""
    return (
        make_job()
        .gpus(8, "H100")
        .completions(4)
        .parallelism(2)
        .env({"name": "A", "value": "1"}, {"name": "B", "value": "2"})
        .inputs({"name": "raw", "volume": {"name": "datasets"}})
        .outputs({"name": "model", "path": "/out/model"})
        .volumes({"volume": "scratch", "mountPath": "/scratch"})
        .set("spec.maxCostUSD", "50")
        .set("spec.timeout", "2h")
        .set("spec.ttlSecondsAfterFinished", 700000)
        .set("spec.workingDir", "/workspace")
    )


def edited(old: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``old`` with one dotted path of its spec set (``None`` removes it), as a client would send it back."""
    new = copy.deepcopy(old)
    *parents, leaf = path.split(".")
    target = new["spec"]
    for key in parents:
        target = target.setdefault(key, {})
    if value is None:
        target.pop(leaf, None)
    else:
        target[leaf] = value
    return new


@pytest.mark.parametrize(
    ("path", "value", "field", "shown"),
    [
        pytest.param("completions", 8, "spec.completions", "8", id="completions"),
        pytest.param("image", "ghcr.io/acme/train:2.0", "spec.image", '"ghcr.io/acme/train:2.0"', id="image"),
        pytest.param("command", ["python", "eval.py"], "spec.command[1]", '"eval.py"', id="command-item"),
        pytest.param("command", ["python"], "spec.command", None, id="command-length"),
        pytest.param(
            "env",
            [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}],
            "spec.env[1].value",
            '"3"',
            id="env-value",
        ),
        pytest.param("env", [{"name": "A", "value": "1"}], "spec.env", None, id="env-removed"),
        pytest.param("resources.gpu.count", 4, "spec.resources.gpu.count", "4", id="gpu-count"),
        pytest.param("resources.gpu.type", ["A100"], "spec.resources.gpu.type[0]", '"A100"', id="gpu-type"),
        pytest.param("resources.memory", "64Gi", "spec.resources.memory", '"64Gi"', id="memory-added"),
        pytest.param("inputs", None, "spec.inputs", None, id="inputs-removed"),
        pytest.param(
            "outputs",
            [{"name": "model", "path": "/out/model"}, {"name": "log", "path": "/out/log"}],
            "spec.outputs",
            None,
            id="output-added",
        ),
        pytest.param(
            "volumes",
            [{"volume": "scratch", "mountPath": "/tmp/x", "readOnly": False}],
            "spec.volumes[0].mountPath",
            '"/tmp/x"',
            id="mount-path",
        ),
        pytest.param("placement.profile", "Cost", "spec.placement.profile", '"Cost"', id="placement-profile"),
        pytest.param("placement.queueTimeout", "1h", "spec.placement.queueTimeout", '"1h"', id="queue-timeout"),
        pytest.param("recovery.continuity", "Ephemeral", "spec.recovery.continuity", '"Ephemeral"', id="continuity"),
        pytest.param("recovery.checkpoint.maxSize", "2Ti", "spec.recovery.checkpoint.maxSize", '"2Ti"', id="max-size"),
        pytest.param("recovery.checkpoint.format", "Dcp", "spec.recovery.checkpoint.format", '"Dcp"', id="format"),
        pytest.param("network.egress.policy", "Deny", "spec.network.egress.policy", '"Deny"', id="egress"),
        pytest.param("workingDir", "/src", "spec.workingDir", '"/src"', id="working-dir"),
        pytest.param("serviceAccountName", "ci", "spec.serviceAccountName", '"ci"', id="service-account-added"),
        pytest.param("expectedDuration", "3h", "spec.expectedDuration", '"3h"', id="expected-duration"),
        pytest.param(
            "completeByTime", "2027-01-01T00:00:00Z", "spec.completeByTime", '"2027-01-01T00:00:00Z"', id="complete-by"
        ),
        pytest.param("scaledownWindow", "5m", "spec.scaledownWindow", '"5m"', id="scaledown"),
        pytest.param("secrets", ["token"], "spec.secrets", None, id="secrets-added"),
    ],
)
def test_immutable_field_change_is_refused_at_that_field(path: str, value: Any, field: str, shown: str | None) -> None:
    old = stored(rich_job().build())
    _, errors = update(edited(old, path, value), old)
    assert kinds_and_fields(errors) == [(INVALID, field)]
    expected = f"Invalid value: {shown}: field is immutable" if shown else "Invalid value: field is immutable"
    assert errors[0].message() == expected


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param("parallelism", 4, id="parallelism"),
        pytest.param("backoffLimit", 0, id="backoff-limit"),
        pytest.param("timeout", "6h", id="timeout"),
        pytest.param("timeout", None, id="timeout-removed"),
        pytest.param("activeDeadlineSeconds", 600, id="deadline-alias"),
        pytest.param("maxCostUSD", "75.5", id="max-cost-raised"),
        pytest.param("maxCostUSD", "50.000", id="max-cost-same-amount"),
        pytest.param("recovery.maxAttempts", 10, id="max-attempts"),
        pytest.param("recovery.checkpoint.interval", "15m", id="checkpoint-interval"),
        pytest.param("recovery.checkpoint.retainAfterFinish", "24h", id="retain-after-finish"),
        pytest.param("ttlSecondsAfterFinished", 60, id="ttl"),
        pytest.param("ttlSecondsAfterFinished", None, id="ttl-removed"),
        pytest.param("state", "Suspended", id="suspend"),
        pytest.param("state", "Cancelled", id="cancel"),
    ],
)
def test_mutable_field_change_is_accepted(path: str, value: Any) -> None:
    old = stored(rich_job().build())
    new, errors = update(edited(old, path, value), old)
    assert [error.message() for error in errors] == []
    if value is not None and path != "activeDeadlineSeconds":
        assert edited(new, path, value) == new, "the new value is what is stored"


def test_every_changed_immutable_field_is_reported() -> None:
    old = stored(rich_job().build())
    new = edited(edited(edited(old, "completions", 8), "image", "other:1"), "resources.gpu.count", 4)
    new = edited(new, "parallelism", 3)  # mutable: no error
    _, errors = update(new, old)
    assert sorted(kinds_and_fields(errors)) == [
        (INVALID, "spec.completions"),
        (INVALID, "spec.image"),
        (INVALID, "spec.resources.gpu.count"),
    ]


def test_update_also_applies_the_create_rules() -> None:
    old = stored(rich_job().build())
    _, errors = update(edited(old, "parallelism", 5), old)
    assert kinds_and_fields(errors) == [(INVALID, "spec.parallelism")]


def test_update_that_omits_defaulted_fields_keeps_them() -> None:
    """A client that sends back only what it wrote (kubectl replace of the original manifest) changes nothing."""
    manifest = rich_job().build()
    old = stored(manifest)
    new, errors = update(manifest, old)
    assert errors == []
    assert new["spec"] == old["spec"]


def test_update_that_sends_a_default_explicitly_is_no_change() -> None:
    old = stored(rich_job().build())
    _, errors = update(edited(old, "placement", {"interruptible": "Never"}), old)
    assert errors == []


# maxCostUSD can only be raised


@pytest.mark.parametrize(
    ("old_cap", "new_cap", "expected"),
    [
        pytest.param(None, "20", [], id="added"),
        pytest.param("50", "80", [], id="raised"),
        pytest.param("50", "50.00", [], id="unchanged-spelling"),
        pytest.param("50", "49.999999", [(INVALID, "spec.maxCostUSD")], id="lowered"),
        pytest.param("50", None, [(FORBIDDEN, "spec.maxCostUSD")], id="removed"),
        pytest.param("50", "1.1234567", [(INVALID, "spec.maxCostUSD")], id="malformed-reported-once"),
    ],
)
def test_max_cost_can_only_be_raised(
    old_cap: str | None, new_cap: str | None, expected: list[tuple[ErrorType, str]]
) -> None:
    old = stored(make_job().set("spec.maxCostUSD", old_cap).build() if old_cap else make_job().build())
    _, errors = update(edited(old, "maxCostUSD", new_cap), old)
    assert kinds_and_fields(errors) == expected


def test_lowering_the_cap_says_the_current_cap() -> None:
    old = stored(make_job().set("spec.maxCostUSD", "50").build())
    _, errors = update(edited(old, "maxCostUSD", "10"), old)
    assert "it is 50 now; set 50 or more" in errors[0].detail


# state: Cancelled is one-way


@pytest.mark.parametrize(
    ("old_state", "new_state", "allowed"),
    [
        pytest.param("Running", "Suspended", True, id="running-to-suspended"),
        pytest.param("Suspended", "Running", True, id="suspended-to-running"),
        pytest.param("Running", "Cancelled", True, id="running-to-cancelled"),
        pytest.param("Suspended", "Cancelled", True, id="suspended-to-cancelled"),
        pytest.param("Cancelled", "Cancelled", True, id="cancelled-stays"),
        pytest.param("Cancelled", "Running", False, id="cancelled-to-running"),
        pytest.param("Cancelled", "Suspended", False, id="cancelled-to-suspended"),
    ],
)
def test_state_transitions(old_state: str, new_state: str, allowed: bool) -> None:
    old = stored(make_job().set("spec.state", old_state).build())
    _, errors = update(edited(old, "state", new_state), old)
    assert kinds_and_fields(errors) == ([] if allowed else [(INVALID, "spec.state")])


@pytest.mark.parametrize("phase", ["Succeeded", "Failed", "Cancelled"])
@pytest.mark.parametrize("state", ["Running", "Suspended", "Cancelled"])
def test_a_finished_job_keeps_its_state(phase: str, state: str) -> None:
    """Nothing is left to suspend, resume or cancel: a changed state would only contradict the phase."""
    old_state = "Cancelled" if phase == "Cancelled" else "Running"
    old = stored(make_job().set("spec.state", old_state).build())
    old["status"] = {"phase": phase}
    _, errors = update(make_job().set("spec.state", state).build(), old)
    if state == old_state:
        assert errors == []
        return
    assert kinds_and_fields(errors) == [(INVALID, "spec.state")]
    assert f"has finished (phase {phase})" in errors[0].detail and "create a new Job" in errors[0].detail


@pytest.mark.parametrize("phase", ["Pending", "Queued", "Running", "Suspending", "Suspended"])
def test_a_job_not_finished_may_change_state(phase: str) -> None:
    old = stored(make_job().build())
    old["status"] = {"phase": phase}
    _, errors = update(make_job().set("spec.state", "Suspended").build(), old)
    assert errors == []


def test_omitting_state_does_not_leave_cancelled() -> None:
    """An update without state defaults it to Running, which would leave Cancelled: refused."""
    old = stored(make_job().set("spec.state", "Cancelled").build())
    _, errors = update(make_job().build(), old)
    assert kinds_and_fields(errors) == [(INVALID, "spec.state")]
    assert "create a new Job" in errors[0].detail


# Aliases on update


def test_resource_nodes_on_update_matching_the_gang_is_no_change() -> None:
    old = stored(make_job().gpus(8).distributed(nodes=4).build())
    _, errors = update(edited(old, "resources.nodes", 4), old)
    assert errors == []


def test_resource_nodes_on_update_resizing_the_gang_is_refused_once() -> None:
    old = stored(make_job().gpus(8).distributed(nodes=4).build())
    _, errors = update(edited(old, "resources.nodes", 2), old)
    assert kinds_and_fields(errors) == [(INVALID, "spec.resources.nodes")]


# Status and generation


def test_update_carries_the_old_status_and_ignores_the_clients() -> None:
    old = stored(make_job().build())
    old["status"] = {"phase": "Running", "succeeded": 0}
    new = copy.deepcopy(old)
    new["status"] = {"phase": "Succeeded"}
    result, _ = update(new, old)
    assert result["status"] == {"phase": "Running", "succeeded": 0}


@pytest.mark.parametrize(
    ("path", "value", "changed"),
    [
        pytest.param("state", "Suspended", True, id="state"),
        pytest.param("parallelism", 2, True, id="parallelism"),
        pytest.param("placement", {"interruptible": "Never"}, False, id="default-spelled-out"),
    ],
)
def test_spec_changed_moves_generation_only_for_a_real_change(path: str, value: Any, changed: bool) -> None:
    old = stored(make_job().completions(2).build())
    new, _ = update(edited(old, path, value), old)
    assert JOB.strategy.spec_changed(new, old) is changed


def test_metadata_change_is_not_a_spec_change() -> None:
    old = stored(make_job().build())
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "ml"}
    result, _ = update(new, old)
    assert JOB.strategy.spec_changed(result, old) is False


# Warnings on update


def test_update_warns_when_ttl_drops_below_retention() -> None:
    old = stored(make_job().build())
    new, errors = update(edited(old, "ttlSecondsAfterFinished", 60), old)
    assert errors == []
    (warning,) = JOB.strategy.warnings_on_update(new, old)
    assert "60s" in warning
    assert "168h" in warning


def test_unrelated_update_does_not_repeat_the_warning() -> None:
    old = stored(make_job().set("spec.ttlSecondsAfterFinished", 60).build())
    new, _ = update(edited(old, "state", "Suspended"), old)
    assert JOB.strategy.warnings_on_update(new, old) == []
