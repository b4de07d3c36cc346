"""``nodus run``'s Job from a file and flags: the flags win, GPU types come from the catalog, names are derived."""

from __future__ import annotations

import re
from typing import Any

import pytest

from nodus.apis.v1 import accelerators
from nodus.cli.jobbuilding import BuildError, Flags, build, derived_name, gpu_request, load_manifest, with_default_image

MANIFEST = """
apiVersion: nodus.dev/v1
kind: Job
metadata: {name: from-file, labels: {team: vision}}
spec:
  image: file-image:1
  command: [python, file.py]
  completions: 3
  resources: {cpu: "2", memory: 8Gi, gpu: {type: [A100], count: 2, minMemory: 80Gi}}
  expectedDuration: 10m
"""


def fixed() -> str:
    return "abcde"


def test_a_file_without_flags_is_kept_as_written() -> None:
    manifest = load_manifest(MANIFEST, "job.yaml")
    job = build(manifest, Flags())
    assert job == manifest
    assert job is not manifest and job["spec"] is not manifest["spec"]


def test_flags_win_over_the_file_and_leave_the_rest() -> None:
    manifest = load_manifest(MANIFEST, "job.yaml")
    flags = Flags(
        name="mine",
        image="python:3.12",
        gpu="h100:8",
        cpu="500m",
        memory="16Gi",
        completions=5,
        command=["python", "train.py", "--lr", "3e-4"],
    )
    job = build(manifest, flags)
    assert job["metadata"] == {"name": "mine", "labels": {"team": "vision"}}
    spec = job["spec"]
    assert spec["image"] == "python:3.12"
    assert spec["command"] == ["python", "train.py", "--lr", "3e-4"]
    assert spec["completions"] == 5
    # the GPU request is replaced whole: A100's minMemory does not leak onto H100
    assert spec["resources"] == {"cpu": "500m", "memory": "16Gi", "gpu": {"type": ["H100"], "count": 8}}
    assert spec["expectedDuration"] == "10m"
    assert manifest["spec"]["resources"]["gpu"]["type"] == ["A100"], "the manifest itself is not modified"


def test_flags_alone_make_a_job_with_a_derived_name() -> None:
    job = build(None, Flags(command=["python", "-c", "print(42)"]), suffix=fixed)
    assert job == {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": "python-abcde"},
        "spec": {"command": ["python", "-c", "print(42)"]},
    }


def test_without_a_command_anywhere_the_error_says_where_it_goes() -> None:
    with pytest.raises(BuildError, match=r"put the command after --"):
        build(None, Flags(image="python:3.11"))


@pytest.mark.parametrize(
    ("command", "name"),
    [
        pytest.param(["python", "-c", "print(42)"], "python-abcde", id="python-c"),
        pytest.param(["python3", "src/Train_Model.py", "--epochs", "3"], "train-model-abcde", id="script"),
        pytest.param(["python", "-u", "train.py"], "train-abcde", id="interpreter-flag"),
        pytest.param(["python", "-m", "pkg.finetune"], "finetune-abcde", id="module"),
        pytest.param(["/usr/bin/env"], "env-abcde", id="absolute-program"),
        pytest.param(["./run_ALL.sh"], "run-all-abcde", id="dns-1123"),
        pytest.param(["日本"], "job-abcde", id="nothing-usable"),
        pytest.param(["x" * 100], "x" * 40 + "-abcde", id="long"),
    ],
)
def test_derived_names_are_dns_1123_labels(command: list[str], name: str) -> None:
    derived = derived_name(command, "abcde")
    assert derived == name
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", derived) and len(derived) <= 63


def test_two_runs_of_one_command_get_two_names() -> None:
    names = {build(None, Flags(command=["python", "t.py"]))["metadata"]["name"] for _ in range(20)}
    assert len(names) == 20
    assert all(re.fullmatch(r"t-[a-z0-9]{5}", name) for name in names)


@pytest.mark.parametrize(
    ("text", "request_"),
    [
        pytest.param("H100:8", {"type": ["H100"], "count": 8}, id="family"),
        pytest.param("l4:1", {"type": ["L4"], "count": 1}, id="family-any-case"),
        pytest.param("h100-sxm-80g:2", {"type": ["h100-sxm-80g"], "count": 2}, id="variant"),
        pytest.param("4", {"type": ["L4", "A10G"], "count": 4}, id="any-offered"),
    ],
)
def test_gpu_requests(text: str, request_: dict[str, Any]) -> None:
    assert gpu_request(text, offered=["L4", "A10G", "L4"]) == request_


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("X100:8", r"unknown GPU type 'X100'; known types: B200, H200, H100, A100", id="unknown-type"),
        pytest.param("H100-SXM-80G:1", r"unknown GPU type", id="variant-ids-are-exact"),
        pytest.param("H100:3", r"one of 1, 2, 4 or 8", id="count-3"),
        pytest.param("H100:16", r"one of 1, 2, 4 or 8", id="count-16"),
        pytest.param("H100:x", r"write TYPE:COUNT", id="count-not-a-number"),
        pytest.param("H100", r"write TYPE:COUNT", id="no-count"),
        pytest.param("1", r"offers no GPU hosts; name a type", id="any-but-none-offered"),
    ],
)
def test_gpu_errors_name_the_fix(text: str, message: str) -> None:
    with pytest.raises(BuildError, match=message):
        gpu_request(text)


def test_the_unknown_type_error_lists_every_family() -> None:
    with pytest.raises(BuildError) as raised:
        gpu_request("V100:1")
    assert all(family in str(raised.value) for family in accelerators.FAMILIES)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        pytest.param(Flags(cpu="four"), r"--cpu four: not a quantity; write it like 4 or 500m", id="cpu"),
        pytest.param(Flags(memory="16GB"), r"--memory 16GB: not a quantity; write it like 16Gi", id="memory-unit"),
        pytest.param(Flags(memory="0"), r"--memory 0: must be more than zero", id="memory-zero"),
        pytest.param(Flags(cpu="-1"), r"--cpu -1: ", id="cpu-negative"),
        pytest.param(Flags(completions=0), r"at least one index", id="completions-zero"),
        pytest.param(Flags(image=" "), r"--image is empty", id="image-empty"),
    ],
)
def test_bad_flags_are_one_line_errors(flags: Flags, message: str) -> None:
    flags = Flags(**{**flags.__dict__, "command": ["true"]})
    with pytest.raises(BuildError, match=message) as raised:
        build(None, flags)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("kind: Pipeline\nspec: {}", r"kind is 'Pipeline'; nodus run runs a Job", id="other-kind"),
        pytest.param("[1, 2]", r"expected a Job manifest", id="a-list"),
        pytest.param("a: [", r"not YAML or JSON", id="broken-yaml"),
        pytest.param("kind: Job\n---\nkind: Job", r"found 2 documents", id="two-documents"),
        pytest.param("", r"found 0 documents", id="empty"),
        pytest.param("kind: Job\nspec: [1]", r"spec must be a mapping", id="spec-a-list"),
    ],
)
def test_manifests_that_are_not_one_job(text: str, message: str) -> None:
    with pytest.raises(BuildError, match=message):
        load_manifest(text, "job.yaml")


def test_the_servers_default_image_fills_only_a_missing_image() -> None:
    job = build(None, Flags(command=["true"]))
    assert with_default_image(job, "registry.local/nodus/python:3.11")["spec"]["image"] == (
        "registry.local/nodus/python:3.11"
    )
    named = build(None, Flags(command=["true"], image="mine:1"))
    assert with_default_image(named, "registry.local/nodus/python:3.11")["spec"]["image"] == "mine:1"
    with pytest.raises(BuildError, match=r"announces no default image; pass --image IMAGE"):
        with_default_image(build(None, Flags(command=["true"])), "")
