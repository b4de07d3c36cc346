"""The Pipeline strategy without a server: templates canonicalised as Jobs, and every invalid graph or template
named by its field, all at once."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodus.api.kinds.pipeline import PIPELINE

IMAGE = "localhost:5000/nodus/python:3.11"


def stage(name: str, *, depends: list[str] | None = None, reads: list[tuple[str, str]] = (), **spec: Any) -> Any:
    template_spec: dict[str, Any] = {"image": IMAGE, "command": ["true"], "resources": {"cpu": "1"}, **spec}
    if reads:
        template_spec["inputs"] = [
            {"name": f"in_{producer}_{output}".replace("-", "_"), "fromStage": {"stage": producer, "output": output}}
            for producer, output in reads
        ]
    out: dict[str, Any] = {"name": name, "template": {"spec": template_spec}}
    if depends is not None:
        out["dependsOn"] = depends
    return out


def make_pipeline(*stages: Any, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Pipeline",
        "metadata": {"name": "etl", "namespace": "p"},
        "spec": {"stages": list(stages), **spec},
    }


def problems(obj: dict[str, Any]) -> dict[str, str]:
    PIPELINE.strategy.prepare_for_create(obj)
    return {error.field: error.message() for error in PIPELINE.strategy.validate(obj)}


def test_fan_in_is_valid_and_templates_are_defaulted_like_jobs() -> None:
    obj = make_pipeline(
        stage("a", outputs=[{"name": "rows", "path": "/workspace/rows"}]),
        stage("b"),
        stage("c", reads=[("a", "rows"), ("b", "outputs")]),
    )
    obj["status"] = {"phase": "Succeeded"}
    assert problems(obj) == {}
    assert obj["status"] == {"phase": "Pending"}
    assert obj["spec"]["state"] == "Running"
    # The Job kind's defaults are written into each template, as on a Job.
    assert obj["spec"]["stages"][0]["template"]["spec"]["backoffLimit"] is not None


@pytest.mark.parametrize(
    ("stages", "field", "says"),
    [
        pytest.param([stage("a"), stage("a")], "spec.stages[1].name", "Duplicate", id="duplicate-name"),
        pytest.param([stage("A_b")], "spec.stages[0].name", "RFC 1123 label", id="name-not-dns-label"),
        pytest.param([stage("a", depends=["zz"])], "spec.stages[0].dependsOn[0]", "its stages are a", id="no-stage"),
        pytest.param([stage("a", depends=["a"])], "spec.stages[0].dependsOn[0]", "itself", id="self-edge"),
        pytest.param(
            [stage("a", depends=["b"]), stage("b", depends=["c"]), stage("c", reads=[("a", "outputs")])],
            "spec.stages",
            "a -> b -> c -> a",
            id="cycle-named",
        ),
        pytest.param(
            [stage("a"), stage("b", reads=[("nope", "outputs")])],
            "spec.stages[1].template.spec.inputs[0].fromStage.stage",
            "names no stage",
            id="from-stage-no-stage",
        ),
        pytest.param(
            [stage("a", outputs=[{"name": "rows", "path": "/workspace/rows"}]), stage("b", reads=[("a", "model")])],
            "spec.stages[1].template.spec.inputs[0].fromStage.output",
            "its outputs are outputs, rows",
            id="from-stage-undeclared-output",
        ),
        pytest.param(
            [stage("a", image="")],
            "spec.stages[0].template.spec.image",
            "",
            id="template-not-a-job-spec",
        ),
        pytest.param(
            [stage("a", volumes=[{"volume": "v", "mountPath": "/etc/x"}])],
            "spec.stages[0].template.spec.volumes[0].mountPath",
            "system path",
            id="template-job-cross-field-rule",
        ),
    ],
)
def test_invalid_pipelines_name_the_field(stages: list[Any], field: str, says: str) -> None:
    found = problems(make_pipeline(*stages))
    assert field in found, found
    assert says in found[field]


def test_every_problem_is_reported_together() -> None:
    found = problems(
        make_pipeline(stage("a", depends=["zz"]), stage("a"), stage("b", reads=[("a", "model")], image=""))
    )
    assert {
        "spec.stages[0].dependsOn[0]",
        "spec.stages[1].name",
        "spec.stages[2].template.spec.inputs[0].fromStage.output",
        "spec.stages[2].template.spec.image",
    } <= set(found)


def test_stages_are_fixed_and_a_cancel_is_final() -> None:
    old = make_pipeline(stage("a"), state="Cancelled")
    PIPELINE.strategy.prepare_for_create(old)
    new = copy.deepcopy(old)
    new["spec"]["state"] = "Running"
    new["spec"]["stages"].append(stage("b"))
    PIPELINE.strategy.prepare_for_update(new, old)
    found = {e.field: e.message() for e in PIPELINE.strategy.validate_update(new, old)}
    assert set(found) == {"spec.stages", "spec.state"}
    suspended = copy.deepcopy(old)
    suspended["spec"]["state"] = "Suspended"
    running = copy.deepcopy(suspended)
    running["spec"]["state"] = "Running"
    assert PIPELINE.strategy.validate_update(running, suspended) == []


def test_the_stage_job_name_must_fit() -> None:
    obj = make_pipeline(stage("a" * 63))
    obj["metadata"]["name"] = "p" * 200
    assert "spec.stages[0].name" in problems(obj)


def test_a_rerun_needs_a_finished_run_and_a_stage() -> None:
    old = make_pipeline(stage("a"), stage("b", depends=["a"]))
    PIPELINE.strategy.prepare_for_create(old)
    old["status"] = {"phase": "Running"}
    new = copy.deepcopy(old)
    new["metadata"]["annotations"] = {"nodus.dev/rerun-requested-at": "t1", "nodus.dev/rerun-from": "zz"}
    found = {e.field: e.message() for e in PIPELINE.strategy.validate_update(new, old)}
    assert "stages are a, b" in found["metadata.annotations[nodus.dev/rerun-from]"]
    assert "is Running" in found["metadata.annotations[nodus.dev/rerun-requested-at]"]
    old["status"] = {"phase": "Succeeded"}
    new["metadata"]["annotations"]["nodus.dev/rerun-from"] = "b"
    assert PIPELINE.strategy.validate_update(new, old) == []
    # At create there is no run to re-run.
    fresh = make_pipeline(stage("a"))
    fresh["metadata"]["annotations"] = {"nodus.dev/rerun-requested-at": "t1"}
    assert "metadata.annotations[nodus.dev/rerun-requested-at]" in problems(fresh)


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"stages": [{"name": "a", "dependsOn": 5, "template": {"spec": {}}}]}, id="depends-on-not-a-list"),
        pytest.param({"stages": [1, "x", None]}, id="stages-not-objects"),
        pytest.param({"stages": [{"name": 3, "template": {"spec": {"inputs": "x"}}}]}, id="wrong-types"),
        pytest.param({"stages": "a"}, id="stages-not-a-list"),
        pytest.param(None, id="no-spec"),
    ],
)
def test_malformed_specs_are_field_errors_not_crashes(spec: Any) -> None:
    obj = make_pipeline()
    obj["spec"] = spec
    assert problems(obj)
