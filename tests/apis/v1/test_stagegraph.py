"""The stage graph: edges from dependsOn and fromStage, cycles named, and the stage Job's spec."""

from __future__ import annotations

from nodus.apis.v1 import stagegraph


def test_cycles_are_named_along_their_edges() -> None:
    assert stagegraph.find_cycle({"a": [], "b": ["a"], "c": ["a", "b"]}) is None
    assert stagegraph.find_cycle({"a": ["c"], "b": ["a"], "c": ["b"]}) == ["a", "c", "b", "a"]
    assert stagegraph.find_cycle({"a": ["gone"]}) is None


def test_downstream_follows_every_path() -> None:
    assert stagegraph.downstream({"a": [], "b": ["a"], "c": ["b"], "d": []}, "a") == {"b", "c"}


def test_from_stage_is_rewritten_to_the_producing_jobs_output() -> None:
    template = {"image": "x", "inputs": [{"name": "m", "fromStage": {"stage": "train", "output": "model"}}]}
    spec = stagegraph.stage_job_spec("etl", template)
    assert spec["inputs"] == [{"name": "m", "output": {"job": "etl-train", "name": "model"}}]
    assert "fromStage" in template["inputs"][0]  # the template itself is left as it is
