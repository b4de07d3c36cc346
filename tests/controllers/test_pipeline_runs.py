"""Re-runs of a Pipeline and content-addressed reuse: the stage a re-run names runs again, a downstream stage whose
template and input digests are unchanged reuses its earlier Job, and one whose input changed runs again."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodus.apis.v1 import labels, objects
from nodus.controllers import pipelineruns
from nodus.controllers.pipelineplanning import plan

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SPEC = {"image": "python:3.11", "command": ["true"], "resources": {"cpu": "1"}}
FIXED, STAMP_1, STAMP_2 = "1" * 64, "2" * 64, "3" * 64


def reads(output: str) -> dict[str, Any]:
    return {**SPEC, "inputs": [{"name": "x", "fromStage": {"stage": "b", "output": output}}]}


STAGES = [
    {"name": "a", "template": {"spec": SPEC}},
    {"name": "b", "dependsOn": ["a"], "template": {"spec": SPEC}},
    {"name": "c", "template": {"spec": reads("fixed")}},  # b's output that a re-run reproduces
    {"name": "d", "template": {"spec": reads("stamp")}},  # b's output that changes every run
]


def pipeline(status: dict[str, Any] | None = None, rerun: str | None = None) -> objects.Pipeline:
    annotations = {labels.RERUN_REQUESTED_AT: rerun, labels.RERUN_FROM: "b"} if rerun else {}
    return objects.read(
        objects.Pipeline,
        {
            "metadata": {"name": "p", "uid": "u", "generation": 1, "annotations": annotations},
            "spec": {"state": "Running", "stages": STAGES},
            "status": status or {},
        },
    )


def job(name: str, stage: str, stamp: str = STAMP_1, key: str | None = None) -> objects.Job:
    outputs = [{"name": "fixed", "sha256": FIXED}, {"name": "stamp", "sha256": stamp}] if stage == "b" else []
    return objects.read(
        objects.Job,
        {
            "metadata": {
                "name": name,
                "labels": {labels.STAGE: stage},
                "annotations": {labels.STAGE_KEY: key} if key else {},
                "creationTimestamp": "2026-12-03T11:00:00Z",
            },
            "spec": SPEC,
            "status": {"phase": "Succeeded", "outputs": outputs},
        },
    )


def key(stage: str, b: objects.Job) -> str:
    view = pipeline()
    found = pipelineruns.stage_key(next(s for s in view.spec.stages if s.name == stage), {"b": b})
    assert found is not None
    return found


def test_a_rerun_runs_the_named_stage_and_reuses_what_did_not_change() -> None:
    b1 = job("p-b", "b")
    first = [job("p-a", "a"), b1, job("p-c", "c", key=key("c", b1)), job("p-d", "d", key=key("d", b1))]
    done = plan(pipeline(), first, NOW)
    assert done.status["phase"] == "Succeeded" and done.create == []

    # The re-run from b: b runs again in run 2 even though nothing changed (it was asked for); c and d wait for it.
    asked = plan(pipeline(done.status, rerun="t1"), first, NOW)
    assert [(c.stage, c.job) for c in asked.create] == [("b", "p-b.r2")]
    assert asked.status["run"] == 2 and asked.status["rerunRequestedAt"] == "t1"
    phases = {s["name"]: (s["phase"], s.get("run", 1), s.get("job")) for s in asked.status["stages"]}
    assert phases == {
        "a": ("Succeeded", 1, "p-a"),
        "b": ("Running", 2, "p-b.r2"),
        "c": ("Waiting", 2, None),
        "d": ("Waiting", 2, None),
    }
    # A reconcile before the new Job is seen decides the same, once: the request is recorded.
    again = plan(pipeline(asked.status, rerun="t1"), first, NOW)
    assert [c.job for c in again.create] == ["p-b.r2"] and again.status["run"] == 2

    # b's second run committed the same "fixed" and a new "stamp": c reuses p-c, d runs again reading p-b.r2.
    b2 = job("p-b.r2", "b", stamp=STAMP_2)
    after = plan(pipeline(asked.status, rerun="t1"), [*first, b2], NOW)
    assert [(c.stage, c.job, c.producers) for c in after.create] == [("d", "p-d.r2", {"b": "p-b.r2"})]
    stages = {s["name"]: s for s in after.status["stages"]}
    assert stages["c"]["reused"] is True and stages["c"]["job"] == "p-c" and stages["c"]["phase"] == "Succeeded"
    assert "reused" not in stages["d"]

    # d's new Job succeeds: the run is over, c still shown reused.
    d2 = job("p-d.r2", "d", key=key("d", b2))
    over = plan(pipeline(after.status, rerun="t1"), [*first, b2, d2], NOW)
    assert over.create == [] and over.status["phase"] == "Succeeded"
    assert {s["name"]: s.get("reused", False) for s in over.status["stages"]} == {
        "a": False,
        "b": False,
        "c": True,
        "d": False,
    }


def test_an_input_not_pinned_by_its_spec_is_never_reused() -> None:
    def stage_with(volume: dict[str, Any]) -> Any:
        spec = {**SPEC, "inputs": [{"name": "d", "volume": volume}]}
        view = objects.read(
            objects.Pipeline,
            {"metadata": {"name": "p"}, "spec": {"stages": [{"name": "v", "template": {"spec": spec}}]}},
        )
        return view.spec.stages[0]

    # The latest revision of a Volume may change between runs; a pinned revision may not.
    assert pipelineruns.stage_key(stage_with({"name": "data"}), {}) is None
    assert pipelineruns.stage_key(stage_with({"name": "data", "revision": 3}), {}) is not None


def test_job_names_per_run() -> None:
    assert pipelineruns.job_name("p", "b", 1) == "p-b"
    assert pipelineruns.job_name("p", "b", 3) == "p-b.r3"
