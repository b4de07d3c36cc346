"""Defaults and write-time aliases of the Job spec: what a created Job stores and shows back."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.api.kinds.job import JOB, JobSpec, aliases, defaults
from nodus.apimachinery.fieldpath import ErrorType
from tests.api.kinds.jobbuilder import create, kinds_and_fields, make_job, stored, update


def at(obj: dict[str, Any], path: str) -> Any:
    current: Any = obj
    for key in path.split("."):
        current = current[key]
    return current


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("spec.completions", 1, id="completions"),
        pytest.param("spec.parallelism", 1, id="parallelism"),
        pytest.param("spec.backoffLimit", 6, id="backoff-limit"),
        pytest.param("spec.state", "Running", id="state"),
        pytest.param("spec.recovery.maxAttempts", 3, id="max-attempts"),
        pytest.param("spec.recovery.continuity", "Checkpointed", id="continuity"),
        pytest.param("spec.recovery.onInterruption", "Resume", id="on-interruption"),
        pytest.param("spec.recovery.minProgressDuration", "2m", id="min-progress-duration"),
        pytest.param("spec.recovery.checkpoint.interval", "auto", id="checkpoint-interval"),
        pytest.param("spec.recovery.checkpoint.integration", "Auto", id="checkpoint-integration"),
        pytest.param("spec.recovery.checkpoint.format", "Snapshot", id="checkpoint-format"),
        pytest.param("spec.recovery.checkpoint.paths", ["/nodus/state"], id="checkpoint-paths"),
        pytest.param("spec.recovery.checkpoint.maxSize", "1Ti", id="checkpoint-max-size"),
        pytest.param("spec.recovery.checkpoint.retainAfterFinish", "168h", id="checkpoint-retain"),
        pytest.param("spec.placement.interruptible", "Never", id="interruptible"),
        pytest.param("spec.placement.profile", "Balanced", id="profile"),
        pytest.param("spec.placement.queueTimeout", "24h", id="queue-timeout"),
        pytest.param("spec.network.egress.policy", "Open", id="egress-policy"),
    ],
)
def test_minimal_job_stores_default(path: str, expected: Any) -> None:
    assert at(stored(make_job().build()), path) == expected


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("spec.timeout", id="timeout-means-no-limit"),
        pytest.param("spec.ttlSecondsAfterFinished", id="ttl-means-keep"),
        pytest.param("spec.distributed", id="distributed-only-when-asked"),
        pytest.param("spec.maxCostUSD", id="no-cap"),
        pytest.param("spec.placement.dedicated", id="dedicated"),
    ],
)
def test_minimal_job_leaves_unset(path: str) -> None:
    spec = stored(make_job().build())["spec"]
    *parents, leaf = path.split(".")[1:]
    for key in parents:
        spec = spec[key]
    assert leaf not in spec


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param("spec.completions", 4, id="completions"),
        pytest.param("spec.backoffLimit", 0, id="backoff-limit-zero"),
        pytest.param("spec.state", "Suspended", id="state"),
        pytest.param("spec.recovery.maxAttempts", 10, id="max-attempts"),
        pytest.param("spec.recovery.checkpoint.interval", "30m", id="interval"),
        pytest.param("spec.recovery.checkpoint.format", "Dcp", id="format-dcp-without-gang"),
        pytest.param("spec.recovery.checkpoint.paths", ["/ckpt", "/opt/state"], id="paths"),
        pytest.param("spec.placement.queueTimeout", "0s", id="queue-forever"),
        pytest.param("spec.network.egress.policy", "Deny", id="egress-deny"),
    ],
)
def test_user_value_is_kept(path: str, value: Any) -> None:
    job = make_job().set(path, value).build()
    assert at(stored(job), path) == value


def test_defaults_fill_siblings_of_a_partial_object() -> None:
    job = make_job().set("spec.recovery", {"maxAttempts": 5, "checkpoint": {"interval": "1h"}}).build()
    recovery = stored(job)["spec"]["recovery"]
    assert recovery["maxAttempts"] == 5
    assert recovery["continuity"] == "Checkpointed"
    assert recovery["checkpoint"] == {
        "interval": "1h",
        "integration": "Auto",
        "maxSize": "1Ti",
        "paths": ["/nodus/state"],
        "retainAfterFinish": "168h",
        "format": "Snapshot",
    }


def test_distributed_job_gets_gang_defaults_and_dcp() -> None:
    spec = stored(make_job().gpus(8).distributed(nodes=2).build())["spec"]
    assert spec["distributed"] == {
        "nodes": 2,
        "launcher": "Plain",
        "maxAssemblyRetries": 2,
        "network": "Colocated",
        "startupTimeout": "15m",
        "transport": "Direct",
    }
    assert spec["recovery"]["checkpoint"]["format"] == "Dcp"


def test_distributed_job_keeps_explicit_snapshot_format() -> None:
    job = make_job().gpus(8).distributed(nodes=2).set("spec.recovery.checkpoint.format", "Snapshot").build()
    assert stored(job)["spec"]["recovery"]["checkpoint"]["format"] == "Snapshot"


def test_list_items_get_their_defaults() -> None:
    job = (
        make_job()
        .outputs({"name": "model", "path": "/out/model", "sink": {"connection": "pg", "table": "runs"}})
        .inputs({"name": "weights", "output": {"job": "pretrain", "name": "model"}})
        .sidecars({"name": "proxy", "command": ["proxy"]})
        .volumes({"volume": "data", "mountPath": "/data"})
        .build()
    )
    spec = stored(job)["spec"]
    assert spec["outputs"][0]["fromRanks"] == "Zero"
    assert spec["outputs"][0]["sink"]["mode"] == "Append"
    assert spec["inputs"][0]["output"]["index"] == 0
    assert spec["sidecars"][0]["startupTimeout"] == "5m"
    assert spec["volumes"][0]["readOnly"] is False


def test_null_means_unset_and_is_defaulted() -> None:
    assert stored(make_job().set("spec.completions", None).build())["spec"]["completions"] == 1


def test_stored_spec_is_a_fixed_point_of_the_model() -> None:
    """Every default written is one the model declares: decoding and re-encoding changes nothing."""
    spec = stored(make_job().gpus(8).distributed(nodes=2).outputs({"name": "m", "path": "/m"}).build())["spec"]
    assert JobSpec.model_validate(spec, strict=True).to_json() == spec


def test_schema_shows_the_defaults_that_are_written() -> None:
    properties = JobSpec.model_json_schema(by_alias=True)["properties"]
    spec = stored(make_job().build())["spec"]
    for name in ("completions", "parallelism", "backoffLimit", "state"):
        assert properties[name]["default"] == spec[name]


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param("not an object", id="spec-string"),
        pytest.param(["a"], id="spec-list"),
        pytest.param({"recovery": "fast"}, id="recovery-string"),
        pytest.param({"recovery": {"checkpoint": 3}}, id="checkpoint-number"),
        pytest.param({"placement": []}, id="placement-list"),
        pytest.param({"network": {"egress": "open"}}, id="egress-string"),
        pytest.param({"distributed": 2}, id="distributed-number"),
        pytest.param({"outputs": "model"}, id="outputs-string"),
        pytest.param({"outputs": ["model", 3, None]}, id="output-items-not-objects"),
        pytest.param({"env": {"A": "1"}}, id="env-map"),
        pytest.param({"secrets": "token"}, id="secrets-string"),
        pytest.param({"resources": {"nodes": "two"}}, id="nodes-string"),
        pytest.param({"resources": "big"}, id="resources-string"),
        pytest.param({"activeDeadlineSeconds": "1h"}, id="deadline-string"),
        pytest.param({"activeDeadlineSeconds": True, "timeout": 5}, id="deadline-bool"),
    ],
)
def test_defaulting_tolerates_wrong_types(spec: Any) -> None:
    job = {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": spec}
    JOB.strategy.prepare_for_create(job)  # must not raise
    if isinstance(spec, dict):
        for key, value in spec.items():
            assert job["spec"][key] == value, "a malformed field is left for validation to report"
    assert JOB.strategy.validate(job), "and validation reports it"


def test_create_replaces_client_status_with_pending() -> None:
    job, _ = create(make_job().status(phase="Succeeded", succeeded=1).build())
    assert job["status"] == {"phase": "Pending"}


# Aliases


@pytest.mark.parametrize(
    ("spec", "expected_timeout"),
    [
        pytest.param({"activeDeadlineSeconds": 3600}, "1h0m0s", id="alone"),
        pytest.param({"activeDeadlineSeconds": 90}, "1m30s", id="seconds"),
        pytest.param({"activeDeadlineSeconds": 3600, "timeout": "60m"}, "60m", id="agrees-keeps-timeout"),
        pytest.param({"activeDeadlineSeconds": 3600, "timeout": "1h"}, "1h", id="agrees-same-spelling"),
    ],
)
def test_active_deadline_folds_into_timeout(spec: dict[str, Any], expected_timeout: str) -> None:
    job = make_job()
    for key, value in spec.items():
        job.set(f"spec.{key}", value)
    result = stored(job.build())["spec"]
    assert result["timeout"] == expected_timeout
    assert "activeDeadlineSeconds" not in result


def test_active_deadline_null_is_dropped() -> None:
    assert "activeDeadlineSeconds" not in stored(make_job().set("spec.activeDeadlineSeconds", None).build())["spec"]


def test_active_deadline_disagreeing_with_timeout_is_kept_and_refused() -> None:
    job, errors = create(make_job().set("spec.timeout", "2h").set("spec.activeDeadlineSeconds", 3600).build())
    assert job["spec"]["timeout"] == "2h"
    assert kinds_and_fields(errors) == [(ErrorType.INVALID, "spec.activeDeadlineSeconds")]
    assert "spec.timeout (2h)" in errors[0].detail


@pytest.mark.parametrize("nodes", [0, 1, None], ids=["zero", "one", "null"])
def test_resource_nodes_of_one_is_dropped(nodes: int | None) -> None:
    spec = stored(make_job().set("spec.resources", {"nodes": nodes, "cpu": "8"}).build())["spec"]
    assert spec["resources"] == {"cpu": "8"}
    assert "distributed" not in spec


def test_resource_nodes_alone_leaves_no_empty_resources() -> None:
    assert "resources" not in stored(make_job().set("spec.resources", {"nodes": 1}).build())["spec"]


def test_resource_nodes_above_one_is_stored_as_distributed_nodes() -> None:
    spec = stored(make_job().gpus(8).set("spec.resources.nodes", 4).build())["spec"]
    assert "nodes" not in spec["resources"]
    assert spec["distributed"]["nodes"] == 4
    assert spec["distributed"]["launcher"] == "Plain", "and gets the gang defaults"
    assert spec["recovery"]["checkpoint"]["format"] == "Dcp"


def test_resource_nodes_fills_an_existing_distributed() -> None:
    spec = stored(make_job().gpus(8).distributed(launcher="Torchrun").set("spec.resources.nodes", 2).build())["spec"]
    assert spec["distributed"]["nodes"] == 2
    assert spec["distributed"]["launcher"] == "Torchrun"


def test_resource_nodes_agreeing_with_distributed_is_dropped() -> None:
    spec = stored(make_job().gpus(8).distributed(nodes=4).set("spec.resources.nodes", 4).build())["spec"]
    assert "nodes" not in spec["resources"]
    assert spec["distributed"]["nodes"] == 4


@pytest.mark.parametrize(
    ("distributed", "expected"),
    [
        pytest.param({"nodes": 2}, (ErrorType.INVALID, "spec.resources.nodes"), id="disagrees-with-nodes"),
        pytest.param({"totalGPUs": 16}, (ErrorType.FORBIDDEN, "spec.resources.nodes"), id="with-total-gpus"),
    ],
)
def test_resource_nodes_conflict_is_kept_and_refused(
    distributed: dict[str, Any], expected: tuple[ErrorType, str]
) -> None:
    job, errors = create(make_job().gpus(8).set("spec.distributed", distributed).set("spec.resources.nodes", 4).build())
    assert job["spec"]["resources"]["nodes"] == 4
    assert kinds_and_fields(errors) == [expected]


def test_bare_secret_names_become_objects() -> None:
    spec = stored(make_job().set("spec.secrets", ["hf-token", {"name": "wandb", "version": 3}]).build())["spec"]
    assert spec["secrets"] == [{"name": "hf-token"}, {"name": "wandb", "version": 3}]


def test_aliases_are_folded_on_update_too() -> None:
    """The bare secret name of an update is the same mount as the stored object form: no change."""
    old = stored(make_job().set("spec.secrets", [{"name": "token"}]).build())
    new = make_job().set("spec.activeDeadlineSeconds", 600).set("spec.secrets", ["token"]).build()
    result, errors = update(new, old)
    assert errors == []
    assert result["spec"]["timeout"] == "10m0s"
    assert result["spec"]["secrets"] == [{"name": "token"}]


def test_alias_on_update_replaces_the_carried_over_timeout() -> None:
    """A merge patch of activeDeadlineSeconds arrives with the stored timeout still in the body."""
    old = stored(make_job().set("spec.timeout", "2h").build())
    new = {**old, "spec": {**old["spec"], "activeDeadlineSeconds": 1800}}
    result, errors = update(new, old)
    assert errors == []
    assert result["spec"]["timeout"] == "30m0s"
    assert "activeDeadlineSeconds" not in result["spec"]


def test_alias_on_update_disagreeing_with_a_new_timeout_is_refused() -> None:
    old = stored(make_job().set("spec.timeout", "2h").build())
    new = {**old, "spec": {**old["spec"], "timeout": "3h", "activeDeadlineSeconds": 1800}}
    _, errors = update(new, old)
    assert kinds_and_fields(errors) == [(ErrorType.INVALID, "spec.activeDeadlineSeconds")]


def test_canonicalize_and_defaults_ignore_non_objects() -> None:
    for value in (None, 3, "spec", []):
        aliases.canonicalize(value)
        defaults.apply_defaults(value)
