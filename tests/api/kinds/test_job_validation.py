"""Validation of a created Job: every stated constraint, each error at its exact field, all together."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nodus.api.kinds.job import JOB, JobSpec, JobStatus
from nodus.apimachinery.fieldpath import ErrorType
from tests.api.kinds.jobbuilder import (
    DIGEST,
    PINNED_IMAGE,
    SHA256,
    JobBuilder,
    create,
    kinds_and_fields,
    make_job,
)

Mutation = Callable[[JobBuilder], JobBuilder]
INVALID, TYPE, REQUIRED = ErrorType.INVALID, ErrorType.TYPE_INVALID, ErrorType.REQUIRED
FORBIDDEN, DUPLICATE, NOT_SUPPORTED = ErrorType.FORBIDDEN, ErrorType.DUPLICATE, ErrorType.NOT_SUPPORTED
TOO_MANY, UNKNOWN = ErrorType.TOO_MANY, ErrorType.UNKNOWN


def var(name: str, value: str = "1") -> dict[str, Any]:
    return {"name": name, "value": value}


def volume_input(name: str) -> dict[str, Any]:
    return {"name": name, "volume": {"name": "datasets"}}


def output(name: str, path: str = "/out/model") -> dict[str, Any]:
    return {"name": name, "path": path}


def mount(path: str, **fields: Any) -> dict[str, Any]:
    return {"volume": "data", "mountPath": path, **fields}


def gang(**fields: Any) -> Mutation:
    return lambda b: b.gpus(8).distributed(**fields)


INVALID_JOBS = [
    # Ranges and types (the model)
    pytest.param(lambda b: b.completions(0), [(INVALID, "spec.completions")], id="completions-zero"),
    pytest.param(lambda b: b.completions(10001), [(INVALID, "spec.completions")], id="completions-10001"),
    pytest.param(lambda b: b.set("spec.completions", "4"), [(TYPE, "spec.completions")], id="completions-string"),
    pytest.param(lambda b: b.set("spec.completions", True), [(TYPE, "spec.completions")], id="completions-bool"),
    pytest.param(lambda b: b.parallelism(0), [(INVALID, "spec.parallelism")], id="parallelism-zero"),
    pytest.param(lambda b: b.completions(1000).parallelism(257), [(INVALID, "spec.parallelism")], id="parallelism-257"),
    pytest.param(
        lambda b: b.completions(4).parallelism(5), [(INVALID, "spec.parallelism")], id="parallelism-above-completions"
    ),
    pytest.param(lambda b: b.set("spec.backoffLimit", -1), [(INVALID, "spec.backoffLimit")], id="backoff-negative"),
    pytest.param(lambda b: b.set("spec.backoffLimit", 101), [(INVALID, "spec.backoffLimit")], id="backoff-101"),
    pytest.param(
        lambda b: b.set("spec.recovery.maxAttempts", 0), [(INVALID, "spec.recovery.maxAttempts")], id="attempts-zero"
    ),
    pytest.param(
        lambda b: b.set("spec.recovery.maxAttempts", 33), [(INVALID, "spec.recovery.maxAttempts")], id="attempts-33"
    ),
    pytest.param(
        gang(nodes=2, maxAssemblyRetries=6),
        [(INVALID, "spec.distributed.maxAssemblyRetries")],
        id="assembly-retries-6",
    ),
    pytest.param(
        gang(nodes=2, startupTimeout="4m"), [(INVALID, "spec.distributed.startupTimeout")], id="startup-timeout-4m"
    ),
    pytest.param(
        gang(nodes=2, startupTimeout="61m"), [(INVALID, "spec.distributed.startupTimeout")], id="startup-timeout-61m"
    ),
    pytest.param(gang(nodes=1), [(INVALID, "spec.distributed.nodes")], id="gang-nodes-1"),
    pytest.param(gang(nodes=17), [(INVALID, "spec.distributed.nodes")], id="gang-nodes-17"),
    pytest.param(gang(totalGPUs=1), [(INVALID, "spec.distributed.totalGPUs")], id="total-gpus-1"),
    pytest.param(gang(totalGPUs=65), [(INVALID, "spec.distributed.totalGPUs")], id="total-gpus-65"),
    pytest.param(gang(nodes=2, gpusPerNode=3), [(NOT_SUPPORTED, "spec.distributed.gpusPerNode")], id="gpus-per-node-3"),
    pytest.param(
        gang(nodes=2, launcher="Horovod"), [(NOT_SUPPORTED, "spec.distributed.launcher")], id="launcher-unknown"
    ),
    pytest.param(
        lambda b: b.set("spec.scaledownWindow", "21m"), [(INVALID, "spec.scaledownWindow")], id="scaledown-21m"
    ),
    pytest.param(
        lambda b: b.set("spec.scaledownWindow", "soon"),
        [(INVALID, "spec.scaledownWindow")],
        id="scaledown-not-duration",
    ),
    pytest.param(
        lambda b: b.set("spec.initCommand", {"command": ["prep"], "timeout": "31m"}),
        [(INVALID, "spec.initCommand.timeout")],
        id="init-timeout-31m",
    ),
    pytest.param(
        lambda b: b.set("spec.initCommand", {"command": []}), [(INVALID, "spec.initCommand.command")], id="init-empty"
    ),
    pytest.param(
        lambda b: b.set("spec.recovery.checkpoint.interval", "30s"),
        [(INVALID, "spec.recovery.checkpoint.interval")],
        id="interval-30s",
    ),
    pytest.param(
        lambda b: b.set("spec.recovery.checkpoint.interval", "7h"),
        [(INVALID, "spec.recovery.checkpoint.interval")],
        id="interval-7h",
    ),
    pytest.param(
        lambda b: b.set("spec.recovery.checkpoint.interval", "Auto"),
        [(INVALID, "spec.recovery.checkpoint.interval")],
        id="interval-capital-auto",
    ),
    pytest.param(
        lambda b: b.set("spec.recovery.checkpoint.maxSize", "3Ti"),
        [(INVALID, "spec.recovery.checkpoint.maxSize")],
        id="max-size-3Ti",
    ),
    pytest.param(
        lambda b: b.set("spec.recovery.checkpoint.maxSize", "big"),
        [(INVALID, "spec.recovery.checkpoint.maxSize")],
        id="max-size-not-quantity",
    ),
    pytest.param(
        lambda b: b.set("spec.recovery.checkpoint.paths", [f"/state/{i}" for i in range(65)]),
        [(TOO_MANY, "spec.recovery.checkpoint.paths")],
        id="checkpoint-paths-65",
    ),
    pytest.param(
        lambda b: b.set("spec.recovery.checkpoint.paths", ["state"]),
        [(INVALID, "spec.recovery.checkpoint.paths[0]")],
        id="checkpoint-path-relative",
    ),
    pytest.param(
        lambda b: b.set("spec.recovery.continuity", "Durable"),
        [(NOT_SUPPORTED, "spec.recovery.continuity")],
        id="continuity-unknown",
    ),
    pytest.param(lambda b: b.set("spec.state", "Paused"), [(NOT_SUPPORTED, "spec.state")], id="state-unknown"),
    pytest.param(lambda b: b.set("spec.state", "cancelled"), [(NOT_SUPPORTED, "spec.state")], id="state-lowercase"),
    pytest.param(lambda b: b.set("spec.timeout", "0s"), [(INVALID, "spec.timeout")], id="timeout-zero"),
    pytest.param(lambda b: b.set("spec.timeout", 3600), [(TYPE, "spec.timeout")], id="timeout-number"),
    pytest.param(
        lambda b: b.set("spec.expectedDuration", "a while"), [(INVALID, "spec.expectedDuration")], id="expected-bad"
    ),
    pytest.param(
        lambda b: b.set("spec.completeByTime", "2026-11-29T12:00:00"),
        [(INVALID, "spec.completeByTime")],
        id="complete-by-without-zone",
    ),
    pytest.param(
        lambda b: b.set("spec.ttlSecondsAfterFinished", -1), [(INVALID, "spec.ttlSecondsAfterFinished")], id="ttl-neg"
    ),
    pytest.param(
        lambda b: b.set("spec.activeDeadlineSeconds", 0), [(INVALID, "spec.activeDeadlineSeconds")], id="deadline-zero"
    ),
    pytest.param(lambda b: b.set("spec.maxCostUSD", 12.5), [(TYPE, "spec.maxCostUSD")], id="max-cost-float"),
    pytest.param(lambda b: b.set("spec.maxCostUSD", "1.1234567"), [(INVALID, "spec.maxCostUSD")], id="max-cost-7dp"),
    pytest.param(lambda b: b.set("spec.maxCostUSD", "0"), [(INVALID, "spec.maxCostUSD")], id="max-cost-zero"),
    pytest.param(lambda b: b.set("spec.maxCostUSD", "$50"), [(INVALID, "spec.maxCostUSD")], id="max-cost-dollar"),
    pytest.param(
        lambda b: b.set("spec.placement.maxRateUSDPerHour", "-1"),
        [(INVALID, "spec.placement.maxRateUSDPerHour")],
        id="max-rate-negative",
    ),
    pytest.param(
        lambda b: b.set("spec.placement.interruptible", "Always"),
        [(NOT_SUPPORTED, "spec.placement.interruptible")],
        id="interruptible-unknown",
    ),
    pytest.param(lambda b: b.set("spec.resources.memory", "lots"), [(INVALID, "spec.resources.memory")], id="memory"),
    pytest.param(lambda b: b.set("spec.resources.cpu", "-2"), [(INVALID, "spec.resources.cpu")], id="cpu-negative"),
    pytest.param(lambda b: b.set("spec.resources.nodes", -1), [(INVALID, "spec.resources.nodes")], id="nodes-negative"),
    pytest.param(lambda b: b.gpus(3), [(NOT_SUPPORTED, "spec.resources.gpu.count")], id="gpu-count-3"),
    pytest.param(lambda b: b.gpus(16), [(NOT_SUPPORTED, "spec.resources.gpu.count")], id="gpu-count-16"),
    pytest.param(
        lambda b: b.set("spec.resources.gpu", {"type": [], "count": 1}),
        [(INVALID, "spec.resources.gpu.type")],
        id="gpu-type-empty",
    ),
    pytest.param(
        lambda b: b.set("spec.resources.gpu", {"type": ["H100"] * 9}),
        [(TOO_MANY, "spec.resources.gpu.type")],
        id="gpu-type-9",
    ),
    pytest.param(
        lambda b: b.set("spec.resources.gpu", {"count": 1}), [(REQUIRED, "spec.resources.gpu.type")], id="gpu-no-type"
    ),
    pytest.param(
        lambda b: b.gpus(1).set("spec.resources.gpu.interconnect", "PCIe"),
        [(NOT_SUPPORTED, "spec.resources.gpu.interconnect")],
        id="interconnect-unknown",
    ),
    pytest.param(lambda b: b.set("spec.gpu", {"count": 1}), [(UNKNOWN, "spec.gpu")], id="unknown-field"),
    pytest.param(
        lambda b: b.set("spec.max_cost_usd", "10"), [(UNKNOWN, "spec.max_cost_usd")], id="python-name-not-json-name"
    ),
    pytest.param(lambda b: b.env(var("1X")), [(INVALID, "spec.env[0].name")], id="env-name-digit"),
    pytest.param(lambda b: b.env(var("MY-VAR")), [(INVALID, "spec.env[0].name")], id="env-name-dash"),
    pytest.param(lambda b: b.env({"value": "1"}), [(REQUIRED, "spec.env[0].name")], id="env-name-missing"),
    pytest.param(
        lambda b: b.env({"name": "T", "valueFrom": {}}),
        [(REQUIRED, "spec.env[0].valueFrom.secretKeyRef")],
        id="env-value-from-empty",
    ),
    pytest.param(lambda b: b.inputs(volume_input("_x")), [(INVALID, "spec.inputs[0].name")], id="input-name-under"),
    pytest.param(
        lambda b: b.inputs(volume_input("a" * 65)), [(INVALID, "spec.inputs[0].name")], id="input-name-65-chars"
    ),
    pytest.param(
        lambda b: b.inputs({"name": "page", "url": {"url": "http://example.com/a.csv"}}),
        [(INVALID, "spec.inputs[0].url.url")],
        id="url-http",
    ),
    pytest.param(
        lambda b: b.inputs({"name": "page", "url": {"url": "https://example.com/a", "sha256": "abc"}}),
        [(INVALID, "spec.inputs[0].url.sha256")],
        id="url-sha256-short",
    ),
    pytest.param(
        lambda b: b.inputs({"name": "raw", "bucket": {"connection": "s3", "uri": "gs://bucket/key"}}),
        [(INVALID, "spec.inputs[0].bucket.uri")],
        id="bucket-not-s3",
    ),
    pytest.param(
        lambda b: b.inputs({"name": "raw", "bucket": {"connection": "s3", "uri": "s3://bucket"}}),
        [(INVALID, "spec.inputs[0].bucket.uri")],
        id="bucket-without-key",
    ),
    pytest.param(
        lambda b: b.inputs(
            {"name": "raw", "bucket": {"connection": "s3", "uri": "s3://bucket/k", "sha256": SHA256.upper()}}
        ),
        [(INVALID, "spec.inputs[0].bucket.sha256")],
        id="bucket-sha256-uppercase",
    ),
    pytest.param(
        lambda b: b.inputs({"name": "w", "output": {"job": "pretrain", "name": "model", "index": -1}}),
        [(INVALID, "spec.inputs[0].output.index")],
        id="output-input-index-negative",
    ),
    pytest.param(lambda b: b.outputs(output("Model")), [(INVALID, "spec.outputs[0].name")], id="output-name-upper"),
    pytest.param(lambda b: b.outputs(output("m", "out")), [(INVALID, "spec.outputs[0].path")], id="output-relative"),
    pytest.param(
        lambda b: b.outputs(*(output(f"o{i}") for i in range(33))), [(TOO_MANY, "spec.outputs")], id="outputs-33"
    ),
    pytest.param(
        lambda b: b.outputs({**output("m"), "sink": {"connection": "pg", "table": "t", "mode": "Upsert"}}),
        [(NOT_SUPPORTED, "spec.outputs[0].sink.mode")],
        id="sink-mode-unknown",
    ),
    pytest.param(
        lambda b: b.outputs({**output("m"), "fromRanks": "One"}),
        [(NOT_SUPPORTED, "spec.outputs[0].fromRanks")],
        id="from-ranks-unknown",
    ),
    pytest.param(lambda b: b.volumes(mount("data")), [(INVALID, "spec.volumes[0].mountPath")], id="mount-relative"),
    pytest.param(
        lambda b: b.volumes(mount("/data", readOnly=True, revision=0)),
        [(INVALID, "spec.volumes[0].revision")],
        id="mount-revision-zero",
    ),
    pytest.param(
        lambda b: b.set("spec.secrets", [{"name": "token", "version": 0}]),
        [(INVALID, "spec.secrets[0].version")],
        id="secret-version-zero",
    ),
    pytest.param(
        lambda b: b.sidecars({"command": ["proxy"]}), [(REQUIRED, "spec.sidecars[0].name")], id="sidecar-unnamed"
    ),
    pytest.param(
        lambda b: b.sidecars({"name": "proxy", "command": ["proxy"], "startupTimeout": "0s"}),
        [(INVALID, "spec.sidecars[0].startupTimeout")],
        id="sidecar-startup-zero",
    ),
    pytest.param(
        lambda b: b.set("spec.source", {"blob": "sha256:abc"}), [(INVALID, "spec.source.blob")], id="blob-short"
    ),
    pytest.param(
        lambda b: b.set("spec.source", {"git": {"repo": "not a repo"}}),
        [(INVALID, "spec.source.git.repo")],
        id="git-repo-bad",
    ),
    pytest.param(
        lambda b: b.set("spec.source", {"git": {"repo": "http://github.com/acme/train"}}),
        [(INVALID, "spec.source.git.repo")],
        id="git-repo-http",
    ),
    pytest.param(
        lambda b: b.unset("spec.image").set("spec.imageRef", "ghcr.io/acme/train:1.0"),
        [(INVALID, "spec.imageRef")],
        id="image-ref-not-pinned",
    ),
    pytest.param(
        lambda b: b.egress("Closed", allow=["pypi.org"]),
        [(NOT_SUPPORTED, "spec.network.egress.policy")],
        id="egress-policy-unknown",
    ),
    pytest.param(
        lambda b: b.egress("AllowList", presets=["everything"]),
        [(NOT_SUPPORTED, "spec.network.egress.presets[0]")],
        id="preset-unknown",
    ),
    pytest.param(
        lambda b: b.egress("AllowList", allow=["https://pypi.org"]),
        [(INVALID, "spec.network.egress.allow[0]")],
        id="allow-url-not-host",
    ),
    pytest.param(
        lambda b: b.egress("AllowList", allow=[f"h{i}.example.com" for i in range(129)]),
        [(TOO_MANY, "spec.network.egress.allow")],
        id="allow-129",
    ),
    # Cross-field rules
    pytest.param(lambda b: b.unset("spec.image"), [(REQUIRED, "spec.image")], id="no-image"),
    pytest.param(
        lambda b: b.set("spec.imageRef", PINNED_IMAGE), [(FORBIDDEN, "spec.imageRef")], id="image-and-image-ref"
    ),
    pytest.param(
        lambda b: b.set("spec.timeout", "2h").set("spec.activeDeadlineSeconds", 60),
        [(INVALID, "spec.activeDeadlineSeconds")],
        id="deadline-disagrees",
    ),
    pytest.param(lambda b: b.env(var("A"), var("A")), [(DUPLICATE, "spec.env[1].name")], id="env-duplicate"),
    pytest.param(
        lambda b: b.env({"name": "T", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
        [(FORBIDDEN, "spec.env[0].valueFrom")],
        id="env-value-and-value-from",
    ),
    pytest.param(lambda b: b.env({"name": "T"}), [(REQUIRED, "spec.env[0].value")], id="env-no-value"),
    pytest.param(
        lambda b: b.sidecars({"name": "proxy", "command": ["proxy"], "env": [var("A"), var("A")]}),
        [(DUPLICATE, "spec.sidecars[0].env[1].name")],
        id="sidecar-env-duplicate",
    ),
    pytest.param(
        lambda b: b.sidecars({"name": "proxy", "command": ["proxy"]}, {"name": "proxy", "command": ["proxy"]}),
        [(DUPLICATE, "spec.sidecars[1].name")],
        id="sidecar-duplicate",
    ),
    pytest.param(
        lambda b: b.set("spec.secrets", ["token", {"name": "token", "version": 2}]),
        [(DUPLICATE, "spec.secrets[1].name")],
        id="secret-duplicate",
    ),
    pytest.param(lambda b: b.set("spec.source", {}), [(REQUIRED, "spec.source")], id="source-empty"),
    pytest.param(
        lambda b: b.set("spec.source", {"git": {"repo": "acme/train"}, "blob": DIGEST}),
        [(FORBIDDEN, "spec.source.blob")],
        id="source-git-and-blob",
    ),
    pytest.param(
        lambda b: b.egress("Open", allow=["pypi.org"]), [(FORBIDDEN, "spec.network.egress.allow")], id="allow-open"
    ),
    pytest.param(
        lambda b: b.egress("Deny", presets=["huggingface"]),
        [(FORBIDDEN, "spec.network.egress.presets")],
        id="presets-deny",
    ),
    pytest.param(lambda b: b.egress("AllowList"), [(REQUIRED, "spec.network.egress.allow")], id="allowlist-empty"),
    pytest.param(lambda b: b.inputs({"name": "raw"}), [(REQUIRED, "spec.inputs[0]")], id="input-no-source"),
    pytest.param(
        lambda b: b.inputs({**volume_input("raw"), "url": {"url": "https://example.com/a"}}),
        [(FORBIDDEN, "spec.inputs[0].url")],
        id="input-two-sources",
    ),
    pytest.param(
        lambda b: b.inputs({"name": "prev", "fromStage": {"stage": "prep", "output": "data"}}),
        [(FORBIDDEN, "spec.inputs[0].fromStage")],
        id="input-from-stage",
    ),
    pytest.param(
        lambda b: b.inputs({"name": "home", "fromWorkspace": {"name": "alice", "path": "data/../../etc"}}),
        [(INVALID, "spec.inputs[0].fromWorkspace.path")],
        id="input-from-workspace-escapes",
    ),
    pytest.param(
        lambda b: b.inputs({"name": "home", "fromWorkspace": {"name": "alice", "path": "/etc"}}),
        [(INVALID, "spec.inputs[0].fromWorkspace.path")],
        id="input-from-workspace-absolute",
    ),
    pytest.param(
        lambda b: b.inputs(volume_input("raw"), volume_input("raw")),
        [(DUPLICATE, "spec.inputs[1].name")],
        id="input-duplicate",
    ),
    pytest.param(
        lambda b: b.outputs(output("m"), output("m", "/other")),
        [(DUPLICATE, "spec.outputs[1].name")],
        id="output-duplicate",
    ),
    pytest.param(lambda b: b.outputs(output("outputs")), [(INVALID, "spec.outputs[0].name")], id="output-outputs"),
    pytest.param(lambda b: b.outputs(output("nodus.logs")), [(INVALID, "spec.outputs[0].name")], id="output-nodus"),
    pytest.param(
        lambda b: b.volumes(mount("/data"), mount("/data")),
        [(DUPLICATE, "spec.volumes[1].mountPath")],
        id="mount-duplicate",
    ),
    pytest.param(
        lambda b: b.volumes(mount("/data", revision=3)),
        [(FORBIDDEN, "spec.volumes[0].revision")],
        id="revision-writable",
    ),
    pytest.param(lambda b: b.gpus(8, "TPUv5"), [(NOT_SUPPORTED, "spec.resources.gpu.type[0]")], id="gpu-type-unknown"),
    pytest.param(
        lambda b: b.gpus(8, "H100-SXM-80G"),
        [(NOT_SUPPORTED, "spec.resources.gpu.type[0]")],
        id="gpu-variant-wrong-case",
    ),
    pytest.param(
        lambda b: b.gpus(8, "h100-sxm-80g", "H100").set("spec.resources.gpu.exact", True),
        [(INVALID, "spec.resources.gpu.type[1]")],
        id="gpu-exact-with-family",
    ),
    pytest.param(
        lambda b: b.gpus(1, "L4", "A10G").set("spec.resources.gpu.minMemory", "48Gi"),
        [(INVALID, "spec.resources.gpu.minMemory")],
        id="gpu-min-memory-unreachable",
    ),
    pytest.param(gang(), [(REQUIRED, "spec.distributed.nodes")], id="gang-size-missing"),
    pytest.param(gang(nodes=2, totalGPUs=16), [(FORBIDDEN, "spec.distributed.totalGPUs")], id="gang-size-twice"),
    pytest.param(gang(nodes=9), [(INVALID, "spec.distributed.nodes")], id="gang-nodes-beta-cap"),
    pytest.param(
        gang(nodes=2, gpusPerNode=4), [(INVALID, "spec.distributed.gpusPerNode")], id="gpus-per-node-disagrees"
    ),
    pytest.param(gang(totalGPUs=17), [(INVALID, "spec.distributed.totalGPUs")], id="total-gpus-17"),
    pytest.param(gang(totalGPUs=12), [(INVALID, "spec.distributed.totalGPUs")], id="total-gpus-12-of-8"),
    pytest.param(
        lambda b: b.distributed(totalGPUs=12, gpusPerNode=1),
        [(INVALID, "spec.distributed.totalGPUs")],
        id="total-gpus-12-of-1-over-cap",
    ),
    pytest.param(
        lambda b: b.gpus(8).distributed(nodes=2).completions(4).parallelism(4),
        [(INVALID, "spec.completions")],
        id="gang-completions-4",
    ),
    pytest.param(
        lambda b: b.set("spec.placement.dedicated", False),
        [(INVALID, "spec.placement.dedicated")],
        id="dedicated-false",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), INVALID_JOBS)
def test_invalid_job_is_refused_at_its_field(mutate: Mutation, expected: list[tuple[ErrorType, str]]) -> None:
    _, errors = create(mutate(make_job()).build())
    assert kinds_and_fields(errors) == expected
    # A missing field's name is its message ("Required value"); every other error says what to do.
    assert all(error.detail for error in errors if error.type is not REQUIRED)


@pytest.mark.parametrize(
    "mount_path",
    [
        pytest.param("/", id="root"),
        pytest.param("/etc", id="etc"),
        pytest.param("/usr/local/lib", id="under-usr"),
        pytest.param("/proc", id="proc"),
        pytest.param("/sys/fs", id="sys"),
        pytest.param("/dev/shm", id="dev"),
        pytest.param("/bin", id="bin"),
        pytest.param("/sbin", id="sbin"),
        pytest.param("/lib", id="lib"),
        pytest.param("/lib64", id="lib64"),
        pytest.param("/boot", id="boot"),
        pytest.param("/nodus", id="nodus"),
        pytest.param("/nodus/inputs/raw", id="under-nodus"),
    ],
)
def test_system_mount_paths_are_refused(mount_path: str) -> None:
    _, errors = create(make_job().volumes(mount(mount_path)).build())
    assert kinds_and_fields(errors) == [(INVALID, "spec.volumes[0].mountPath")]
    assert "system path" in errors[0].detail


PATH_FIELDS = [
    pytest.param(lambda b, p: b.outputs(output("model", p)), "spec.outputs[0].path", id="output-path"),
    pytest.param(
        lambda b, p: b.set("spec.recovery.checkpoint.paths", ["/nodus/state", p]),
        "spec.recovery.checkpoint.paths[1]",
        id="checkpoint-path",
    ),
    pytest.param(lambda b, p: b.volumes(mount(p)), "spec.volumes[0].mountPath", id="mount-path"),
    pytest.param(lambda b, p: b.set("spec.workingDir", p), "spec.workingDir", id="working-dir"),
    pytest.param(
        lambda b, p: b.set("spec.source", {"git": {"repo": "acme/train", "path": p}}),
        "spec.source.git.path",
        id="source-path",
    ),
]
UNNORMALISED_PATHS = [
    pytest.param("/nodus/outputs/../../var/lib/nodus/kubeconfig", ". or .. component", id="dot-dot"),
    pytest.param("/data/../etc", ". or .. component", id="dot-dot-into-etc"),
    pytest.param("/..", ". or .. component", id="dot-dot-at-root"),
    pytest.param("/data/./model", ". or .. component", id="dot"),
    pytest.param("/data//model", "empty component (//)", id="double-slash"),
    pytest.param("//etc", "empty component (//)", id="leading-double-slash"),
    pytest.param("/data/model/", "write /data/model", id="trailing-slash"),
    pytest.param("/data/\0", "NUL", id="nul"),
]


@pytest.mark.parametrize(("field", "name"), PATH_FIELDS)
@pytest.mark.parametrize(("path", "fix"), UNNORMALISED_PATHS)
def test_paths_with_dot_dot_dot_or_empty_components_are_refused_at_their_field(
    field: Callable[[JobBuilder, str], JobBuilder], name: str, path: str, fix: str
) -> None:
    _, errors = create(field(make_job(), path).build())
    assert kinds_and_fields(errors) == [(INVALID, name)]
    assert fix in errors[0].detail


@pytest.mark.parametrize(("field", "name"), PATH_FIELDS)
@pytest.mark.parametrize("path", ["/data/model.v2", "/data/..hidden", "/data/.cache/x"])
def test_dots_inside_a_component_are_fine(field: Callable[[JobBuilder, str], JobBuilder], name: str, path: str) -> None:
    _, errors = create(field(make_job(), path).build())
    assert errors == []


@pytest.mark.parametrize("name", [".", ".."])
def test_an_output_may_not_be_named_dot_or_dot_dot(name: str) -> None:
    _, errors = create(make_job().outputs(output(name)).build())
    assert kinds_and_fields(errors) == [(INVALID, "spec.outputs[0].name")]


VALID_JOBS = [
    pytest.param(lambda b: b, id="minimal"),
    pytest.param(lambda b: b.unset("spec.image").set("spec.imageRef", PINNED_IMAGE), id="image-ref"),
    pytest.param(lambda b: b.completions(10000).parallelism(256), id="largest-indexed"),
    pytest.param(lambda b: b.completions(4).parallelism(4), id="parallelism-equals-completions"),
    pytest.param(lambda b: b.gpus(8, "h100"), id="family-lower-case"),
    pytest.param(lambda b: b.gpus(8, "H100", "A100", "L40S", "L4", "A10G", "RTX4090", "B200", "H200"), id="8-types"),
    pytest.param(lambda b: b.gpus(1, "h100-pcie-80g").set("spec.resources.gpu.exact", True), id="exact-variant"),
    pytest.param(lambda b: b.gpus(1, "a100-pcie-40g"), id="variant-without-exact"),
    pytest.param(lambda b: b.gpus(8, "H100").set("spec.resources.gpu.minMemory", "80Gi"), id="min-memory-met"),
    pytest.param(lambda b: b.gpus(8, "L4", "B200").set("spec.resources.gpu.minMemory", "100Gi"), id="one-type-fits"),
    pytest.param(gang(nodes=2), id="gang-2"),
    pytest.param(gang(nodes=8, launcher="Torchrun", network="Regional", transport="Auto"), id="gang-beta-max"),
    pytest.param(gang(nodes=2, gpusPerNode=8), id="gpus-per-node-equals-count"),
    pytest.param(lambda b: b.distributed(totalGPUs=16), id="total-16-splits-2x8"),
    pytest.param(lambda b: b.distributed(totalGPUs=64), id="total-64-splits-8x8"),
    pytest.param(lambda b: b.distributed(totalGPUs=3), id="total-3-splits-3x1"),
    pytest.param(lambda b: b.gpus(4).distributed(totalGPUs=24), id="total-24-with-count-4"),
    pytest.param(lambda b: b.gpus(8).set("spec.resources.nodes", 4), id="resources-nodes-shorthand"),
    pytest.param(gang(nodes=2, startupTimeout="5m", maxAssemblyRetries=0), id="gang-low-bounds"),
    pytest.param(gang(nodes=2, startupTimeout="60m", maxAssemblyRetries=5), id="gang-high-bounds"),
    pytest.param(lambda b: b.set("spec.recovery.checkpoint.interval", "1m"), id="interval-1m"),
    pytest.param(lambda b: b.set("spec.recovery.checkpoint.interval", "6h"), id="interval-6h"),
    pytest.param(lambda b: b.set("spec.recovery.checkpoint.maxSize", "2Ti"), id="max-size-2Ti"),
    pytest.param(lambda b: b.set("spec.recovery.checkpoint.paths", [f"/state/{i}" for i in range(64)]), id="paths-64"),
    pytest.param(lambda b: b.set("spec.scaledownWindow", "0s"), id="scaledown-0s"),
    pytest.param(lambda b: b.set("spec.scaledownWindow", "20m"), id="scaledown-20m"),
    pytest.param(lambda b: b.set("spec.initCommand", {"command": ["prep"], "timeout": "30m"}), id="init-30m"),
    pytest.param(lambda b: b.set("spec.placement.queueTimeout", "0s"), id="queue-forever"),
    pytest.param(lambda b: b.set("spec.placement.dedicated", True), id="dedicated-true"),
    pytest.param(
        lambda b: b.set("spec.maxCostUSD", "12.50").set("spec.placement.maxRateUSDPerHour", "0.000001"), id="usd"
    ),
    pytest.param(lambda b: b.set("spec.completeByTime", "2026-12-01T08:00:00+01:00"), id="complete-by-offset"),
    pytest.param(lambda b: b.set("spec.timeout", "60m").set("spec.activeDeadlineSeconds", 3600), id="deadline-agrees"),
    pytest.param(lambda b: b.env(var("A", ""), var("_B")), id="env-empty-value"),
    pytest.param(
        lambda b: b.env(var("A")).sidecars({"name": "proxy", "command": ["proxy"], "env": [var("A")]}),
        id="env-name-per-list",
    ),
    pytest.param(
        lambda b: b.env({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}),
        id="env-secret",
    ),
    pytest.param(
        lambda b: b.inputs(
            volume_input("datasets"),
            {"name": "weights", "output": {"job": "pretrain", "name": "model", "index": 3}},
            {"name": "raw", "bucket": {"connection": "s3", "uri": "s3://acme-data/raw/a.parquet", "sha256": SHA256}},
            {"name": "page", "url": {"url": "https://example.com/a.csv", "sha256": SHA256}},
        ),
        id="inputs-each-source",
    ),
    pytest.param(
        lambda b: b.inputs(
            {"name": "home", "fromWorkspace": {"name": "alice"}},
            {"name": "code", "fromWorkspace": {"name": "alice", "path": "src/pkg"}},
        ),
        id="inputs-from-workspace",
    ),
    pytest.param(lambda b: b.outputs(*(output(f"o{i}") for i in range(32))), id="outputs-32"),
    pytest.param(lambda b: b.outputs(output("model.v1_final-2")), id="output-name-charset"),
    pytest.param(
        lambda b: b.volumes(mount("/data", readOnly=True, revision=3), mount("/scratch"), mount("/etcetera")),
        id="mounts",
    ),
    pytest.param(lambda b: b.set("spec.source", {"git": {"repo": "acme/train", "ref": "main"}}), id="git-owner-name"),
    pytest.param(lambda b: b.set("spec.source", {"git": {"repo": "https://gitlab.com/acme/train.git"}}), id="git-url"),
    pytest.param(lambda b: b.set("spec.source", {"blob": DIGEST}), id="blob"),
    pytest.param(lambda b: b.egress("AllowList", presets=["huggingface", "python-packages"]), id="presets-only"),
    pytest.param(lambda b: b.egress("AllowList", allow=["pypi.org", "*.example.com"]), id="allow-hosts"),
    pytest.param(lambda b: b.egress("Deny"), id="deny"),
    pytest.param(lambda b: b.set("spec.secrets", ["hf", {"name": "wandb", "version": 2}]), id="secrets"),
    pytest.param(lambda b: b.set("spec.state", "Suspended"), id="create-suspended"),
]


@pytest.mark.parametrize("mutate", VALID_JOBS)
def test_valid_job_is_accepted(mutate: Mutation) -> None:
    _, errors = create(mutate(make_job()).build())
    assert [error.message() for error in errors] == []


def test_every_problem_of_one_request_is_reported_together() -> None:
    job = (
        make_job()
        .completions(0)
        .set("spec.parallelism", "2")
        .set("spec.imageRef", PINNED_IMAGE)
        .env(var("A"), var("A"))
        .volumes(mount("/etc"))
        .gpus(8, "TPUv5")
        .distributed(nodes=12)
        .build()
    )
    _, errors = create(job)
    assert sorted(kinds_and_fields(errors)) == sorted(
        [
            (INVALID, "spec.completions"),
            (TYPE, "spec.parallelism"),
            (FORBIDDEN, "spec.imageRef"),
            (DUPLICATE, "spec.env[1].name"),
            (INVALID, "spec.volumes[0].mountPath"),
            (NOT_SUPPORTED, "spec.resources.gpu.type[0]"),
            (INVALID, "spec.distributed.nodes"),
        ]
    )


def test_wrong_types_never_crash_the_cross_field_rules() -> None:
    spec = {
        "image": 3,
        "env": "A=1",
        "sidecars": [7, {"name": 1, "env": {"A": 1}}],
        "inputs": {"name": "x"},
        "outputs": [None, {"name": 3}],
        "volumes": [{"mountPath": 5, "revision": "one"}],
        "resources": {"gpu": {"type": "H100", "count": "8", "minMemory": 80}, "nodes": "2"},
        "distributed": {"nodes": "2", "totalGPUs": [16], "gpusPerNode": "8"},
        "network": {"egress": {"policy": 1, "allow": "pypi.org"}},
        "placement": {"dedicated": "false"},
        "source": "git",
        "secrets": [1, None],
        "completions": "many",
        "parallelism": None,
        "timeout": 60,
        "activeDeadlineSeconds": "60",
    }
    _, errors = create({"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": "x"}, "spec": spec})
    assert errors
    assert len(set(kinds_and_fields(errors))) == len(errors), "no mistake is reported twice"


def test_missing_or_malformed_spec() -> None:
    assert kinds_and_fields(JOB.strategy.validate({"kind": "Job", "metadata": {"name": "x"}})) == [(REQUIRED, "spec")]
    assert kinds_and_fields(JOB.strategy.validate({"spec": []})) == [(TYPE, "spec")]


# Messages that name what to do


def messages_of(mutate: Mutation) -> str:
    _, errors = create(mutate(make_job()).build())
    return " | ".join(error.message() for error in errors)


def test_beta_cap_message_names_the_cap() -> None:
    assert "the beta caps gangs at 8 nodes" in messages_of(gang(nodes=12))


@pytest.mark.parametrize(
    ("mutate", "suggestion"),
    [
        pytest.param(lambda b: b.distributed(totalGPUs=17), "16 (2 nodes x 8 GPUs) or 20 (5 nodes x 4 GPUs)", id="17"),
        pytest.param(gang(totalGPUs=17), "16 (2 nodes x 8 GPUs) or 24 (3 nodes x 8 GPUs)", id="17-of-8"),
        pytest.param(gang(totalGPUs=12), "nearest valid values are 16 (2 nodes x 8 GPUs)", id="12-of-8"),
        pytest.param(
            lambda b: b.distributed(totalGPUs=12, gpusPerNode=1),
            "of 1 GPU each; the nearest valid values are 8 (8 nodes x 1 GPU)",
            id="12-of-1-over-cap",
        ),
    ],
)
def test_unsplittable_total_names_the_nearest_valid_values(mutate: Mutation, suggestion: str) -> None:
    assert suggestion in messages_of(mutate)


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        pytest.param(
            lambda b: b.inputs({"name": "p", "fromStage": {"stage": "s", "output": "o"}}),
            "created by a Pipeline",
            id="stage",
        ),
        pytest.param(
            lambda b: b.inputs({"name": "h", "fromWorkspace": {"name": "w", "path": "../up"}}),
            "must be a relative path inside the home, without ..",
            id="workspace",
        ),
        pytest.param(lambda b: b.volumes(mount("/nodus/x")), "belong to Nodus", id="nodus-path"),
        pytest.param(lambda b: b.outputs(output("outputs")), "/nodus/outputs", id="outputs-name"),
        pytest.param(lambda b: b.completions(2).parallelism(3), "lower parallelism to 2", id="parallelism"),
        pytest.param(gang(nodes=2, gpusPerNode=4), "spec.resources.gpu.count (8)", id="gpus-per-node"),
        pytest.param(
            lambda b: b.gpus(1, "H100").set("spec.resources.gpu.exact", True), "h100-sxm-80g, h100-pcie-80g", id="exact"
        ),
        pytest.param(
            lambda b: b.gpus(1, "L4").set("spec.resources.gpu.minMemory", "40Gi"), "24Gi, on l4-24g", id="memory"
        ),
        pytest.param(lambda b: b.set("spec.maxCostUSD", "1.1234567"), "at most 6 fractional digits", id="usd"),
        pytest.param(lambda b: b.set("spec.timeout", "soon"), "write it like 30s", id="duration"),
    ],
)
def test_message_says_how_to_fix(mutate: Mutation, words: str) -> None:
    assert words in messages_of(mutate)


# Warnings


def test_ttl_shorter_than_retention_warns_with_both_values() -> None:
    job = make_job().set("spec.ttlSecondsAfterFinished", 3600).build()
    stored, _ = create(job)
    (warning,) = JOB.strategy.warnings_on_create(stored)
    assert "3600s" in warning
    assert "168h" in warning
    assert "1h0m0s" in warning


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda b: b, id="no-ttl"),
        pytest.param(lambda b: b.set("spec.ttlSecondsAfterFinished", 168 * 3600), id="ttl-equal"),
        pytest.param(
            lambda b: b.set("spec.ttlSecondsAfterFinished", 60).set("spec.recovery.checkpoint.retainAfterFinish", "0s"),
            id="no-retention",
        ),
    ],
)
def test_no_warning_when_ttl_covers_retention(mutate: Mutation) -> None:
    stored, _ = create(mutate(make_job()).build())
    assert JOB.strategy.warnings_on_create(stored) == []


# The status written through /status


def test_status_is_validated_against_the_model() -> None:
    good = make_job().status(
        phase="Running",
        succeeded=1,
        active=2,
        startTime="2026-11-29T12:00:00Z",
        conditions=[{"type": "Admitted", "status": "True"}, {"type": "Funded", "status": "True"}],
        cost={"totalUSD": "12.50", "bySegment": {"coveredByNodus": ["Boot"]}},
        attempts={"current": 1, "max": 3, "total": 1},
        topology={"nodes": 2, "gpusPerNode": 8, "totalGPUs": 16, "resolvedFrom": "TotalGPUs"},
        secretVersions={"hf": 2},
        handledRequests={"restart": "2026-11-29T12:00:00Z"},
        progress={"metrics": {"loss": "0.0231"}},
    )
    assert JOB.strategy.validate_status(good.build()) == []


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param({"phase": "Done"}, [(NOT_SUPPORTED, "status.phase")], id="phase-unknown"),
        pytest.param({"succeeded": -1}, [(INVALID, "status.succeeded")], id="negative-count"),
        pytest.param({"startTime": "yesterday"}, [(INVALID, "status.startTime")], id="time"),
        pytest.param({"cost": {"totalUSD": "12.5.0"}}, [(INVALID, "status.cost.totalUSD")], id="usd"),
        pytest.param(
            {"conditions": [{"type": "Funded", "status": "True"}, {"type": "Funded", "status": "False"}]},
            [(DUPLICATE, "status.conditions[1].type")],
            id="condition-duplicate",
        ),
        pytest.param(
            {"conditions": [{"type": "Funded", "status": "Yes"}]},
            [(NOT_SUPPORTED, "status.conditions[0].status")],
            id="condition-status",
        ),
        pytest.param({"gang": {"phase": "Meeting"}}, [(NOT_SUPPORTED, "status.gang.phase")], id="gang-phase"),
        pytest.param(
            {"progress": {"metrics": {"loss": "low"}}}, [(INVALID, "status.progress.metrics.loss")], id="metric"
        ),
        pytest.param({"completedIndexes": "0-3;5"}, [(INVALID, "status.completedIndexes")], id="indexes"),
        pytest.param({"extra": 1}, [(UNKNOWN, "status.extra")], id="unknown-field"),
    ],
)
def test_invalid_status_is_refused(status: dict[str, Any], expected: list[tuple[ErrorType, str]]) -> None:
    assert kinds_and_fields(JOB.strategy.validate_status(make_job().status(**status).build())) == expected


@pytest.mark.parametrize(
    "phase",
    [
        "Pending",
        "Queued",
        "Provisioning",
        "Running",
        "Recovering",
        "Suspending",
        "Suspended",
        "Succeeded",
        "Failed",
        "Cancelled",
    ],
)
def test_every_decided_phase_is_accepted(phase: str) -> None:
    assert JOB.strategy.validate_status(make_job().status(phase=phase).build()) == []


# The JSON schema other code turns into OpenAPI


def definitions(model: type[JobSpec] | type[JobStatus]) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = model.model_json_schema(by_alias=True)
    return schema, schema.get("$defs", {})


def resolve(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = prop.get("$ref") or prop.get("items", {}).get("$ref")
    return defs[ref.split("/")[-1]] if ref else {}


def spec_property(path: str) -> dict[str, Any]:
    schema, defs = definitions(JobSpec)
    *parents, leaf = path.split(".")
    for key in parents:
        schema = resolve(schema["properties"][key], defs)
    prop: dict[str, Any] = schema["properties"][leaf]
    return prop


@pytest.mark.parametrize("model", [JobSpec, JobStatus])
def test_every_property_has_a_description(model: type[JobSpec] | type[JobStatus]) -> None:
    schema, defs = definitions(model)
    missing: list[str] = []

    def walk(node: dict[str, Any], path: str, seen: frozenset[str]) -> None:
        for name, prop in node.get("properties", {}).items():
            if not prop.get("description"):
                missing.append(f"{path}.{name}")
            target = resolve(prop, defs)
            title = prop.get("$ref") or prop.get("items", {}).get("$ref")
            if target and title not in seen:
                walk(target, f"{path}.{name}", seen | {title})

    walk(schema, model.__name__, frozenset())
    assert missing == []


@pytest.mark.parametrize("model", [JobSpec, JobStatus])
def test_model_descriptions_read_as_one_sentence_block(model: type[JobSpec] | type[JobStatus]) -> None:
    """A docstring wrapped at the line length must not reach kubectl explain with its line breaks."""
    schema, defs = definitions(model)
    wrapped = [name for name, node in [("", schema), *defs.items()] if "\n" in node.get("description", "")]
    assert wrapped == []


@pytest.mark.parametrize(
    ("path", "keyword", "value"),
    [
        pytest.param("state", "enum", ["Running", "Suspended", "Cancelled"], id="state-enum"),
        pytest.param("resources.gpu.count", "enum", [1, 2, 4, 8], id="gpu-count-enum"),
        pytest.param(
            "distributed.launcher",
            "enum",
            ["Plain", "Torchrun", "Ray", "Verl", "Accelerate", "Deepspeed"],
            id="launcher",
        ),
        pytest.param("completions", "minimum", 1, id="completions-min"),
        pytest.param("completions", "maximum", 10000, id="completions-max"),
        pytest.param("parallelism", "maximum", 256, id="parallelism-max"),
        pytest.param("backoffLimit", "maximum", 100, id="backoff-max"),
        pytest.param("recovery.maxAttempts", "maximum", 32, id="attempts-max"),
        pytest.param("distributed.maxAssemblyRetries", "maximum", 5, id="retries-max"),
        pytest.param("distributed.nodes", "maximum", 16, id="nodes-max"),
        pytest.param("distributed.totalGPUs", "minimum", 2, id="total-min"),
        pytest.param("distributed.totalGPUs", "maximum", 64, id="total-max"),
        pytest.param("outputs", "maxItems", 32, id="outputs-cap"),
        pytest.param("recovery.checkpoint.paths", "maxItems", 64, id="paths-cap"),
        pytest.param("network.egress.allow", "maxItems", 128, id="allow-cap"),
        pytest.param("resources.gpu.type", "maxItems", 8, id="type-cap"),
        pytest.param("env", "x-kubernetes-list-map-keys", ["name"], id="env-map"),
        pytest.param("volumes", "x-kubernetes-list-map-keys", ["mountPath"], id="volumes-map"),
        pytest.param("timeout", "format", "duration", id="timeout-format"),
        pytest.param("completeByTime", "format", "date-time", id="time-format"),
        pytest.param("maxCostUSD", "format", "decimal", id="usd-format"),
        pytest.param("recovery.checkpoint.maxSize", "format", "quantity", id="quantity-format"),
        pytest.param("imageRef", "pattern", r"^[^@\s]+@sha256:[0-9a-f]{64}$", id="image-ref-pattern"),
        pytest.param("completions", "default", 1, id="completions-default"),
        pytest.param("recovery.checkpoint.retainAfterFinish", "default", "168h", id="retain-default"),
    ],
)
def test_schema_declares_constraints(path: str, keyword: str, value: Any) -> None:
    assert spec_property(path)[keyword] == value


@pytest.mark.parametrize(
    ("path", "pattern"),
    [
        pytest.param("env", r"^[A-Za-z_][A-Za-z0-9_]*$", id="env-name"),
        pytest.param("inputs", r"^[A-Za-z][A-Za-z0-9_]{0,63}$", id="input-name"),
        pytest.param("outputs", r"^[a-z0-9._-]{1,64}$", id="output-name"),
    ],
)
def test_schema_declares_name_patterns(path: str, pattern: str) -> None:
    schema, defs = definitions(JobSpec)
    item = resolve(schema["properties"][path], defs)
    assert item["properties"]["name"]["pattern"] == pattern


def test_schema_list_maps_match_the_declaration() -> None:
    schema, defs = definitions(JobSpec)
    for dotted, keys in JOB.list_map_keys.items():
        root, *rest = dotted.split(".")
        if root != "spec":
            continue
        node = schema
        for key in rest[:-1]:
            node = resolve(node["properties"][key], defs)
        prop = node["properties"][rest[-1]]
        assert prop["x-kubernetes-list-type"] == "map", dotted
        assert prop["x-kubernetes-list-map-keys"] == list(keys), dotted
    conditions = JobStatus.model_json_schema(by_alias=True)["properties"]["conditions"]
    assert conditions["x-kubernetes-list-map-keys"] == list(JOB.list_map_keys["status.conditions"])


def test_schema_status_phase_enum_is_the_decided_list() -> None:
    phase = JobStatus.model_json_schema(by_alias=True)["properties"]["phase"]
    assert phase["enum"] == [
        "Pending",
        "Queued",
        "Provisioning",
        "Running",
        "Recovering",
        "Suspending",
        "Suspended",
        "Succeeded",
        "Failed",
        "Cancelled",
    ]


@pytest.mark.parametrize(
    ("path", "description"),
    [
        pytest.param(
            "backoffLimit",
            "BackoffLimit is how many customer failures (non-zero exits, OOM) across all indexes are retried "
            "before the Job fails (0–100, default 6).",  # noqa: RUF001
            id="backoff",
        ),
        pytest.param(
            "resources.gpu",
            "GPURequest asks for accelerators. A family (H100) matches any of its variants and never another family.",
            id="gpu",
        ),
        pytest.param("inputs", "Inputs are materialized read-only under /nodus/inputs/<name>.", id="inputs-completed"),
        pytest.param("source.blob", "Blob is sha256:<64 hex> naming an uploaded blob.", id="blob-completed"),
        pytest.param(
            "outputs.fromRanks",
            "FromRanks is Zero (rank 0 only) or All (every rank under rank-<n>/); default Zero.",
            id="ranks-completed",
        ),
        pytest.param("placement.regions", "Regions are region classes (us, eu, …); empty means any.", id="regions"),
    ],
)
def test_descriptions_come_from_the_reference(path: str, description: str) -> None:
    assert spec_property(path)["description"] == description
