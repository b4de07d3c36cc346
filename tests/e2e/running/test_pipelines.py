"""Pipelines run for real: kubectl applies a Pipeline, the controllers create its stage Jobs in dependency order,
real agents run them, and a failure, a suspend and a cancel cascade to the stage Jobs (ADR 0052)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.running.conftest import Running
from tests.support.images import registry_python_image
from tests.support.objects import API

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # long end-to-end: make test-slow (CI runs both tiers)


def kubectl(binary: Path, running: Running, project: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [str(binary), "--kubeconfig", str(running.cluster.kubeconfig("admin", project)), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def stage(name: str, script: str, **extra: Any) -> dict[str, Any]:
    spec = {"image": registry_python_image(), "resources": {"cpu": "1"}, "command": ["/bin/sh", "-c", script]}
    spec.update(extra.pop("spec", {}))
    return {"name": name, "template": {"metadata": {"labels": {"team": "data"}}, "spec": spec}, **extra}


def manifest(name: str, *stages: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Pipeline",
        "metadata": {"name": name},
        "spec": {"stages": list(stages), **spec},
    }


def get(running: Running, project: str, plural: str, name: str) -> dict[str, Any] | None:
    with running.client() as client:
        response = client.get(f"{API}/namespaces/{project}/{plural}/{name}")
        if response.status_code == 404:
            return None
        assert response.status_code == 200, response.text
        return dict(response.json())


def wait_pipeline(running: Running, project: str, name: str, *phases: str, timeout: float = 120) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        found = get(running, project, "pipelines", name)
        return found if found is not None and (found.get("status") or {}).get("phase") in phases else None

    return dict(running.wait_for(f"pipeline {name} to reach {phases}", check, timeout))


def wait_job(running: Running, project: str, name: str, *phases: str, timeout: float = 120) -> dict[str, Any]:
    """Wait for stage Job ``name`` (which the controller may not have created yet) to reach one of ``phases``."""

    def check() -> dict[str, Any] | None:
        found = get(running, project, "jobs", name)
        return found if found is not None and (found.get("status") or {}).get("phase") in phases else None

    return dict(running.wait_for(f"job {name} to reach {phases}", check, timeout))


def patch_state(running: Running, project: str, name: str, state: str) -> None:
    with running.client() as client:
        response = client.patch(
            f"{API}/namespaces/{project}/pipelines/{name}",
            json={"spec": {"state": state}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text


def job_log(running: Running, project: str, name: str) -> str:
    with running.client() as client:
        return client.get(f"{API}/namespaces/{project}/jobs/{name}/log").text


FAN_IN = manifest(
    "etl",
    stage("a", "echo from-a > /nodus/outputs/part.txt"),
    stage(
        "b",
        "echo from-b > /workspace/rows.txt",
        spec={"outputs": [{"name": "rows", "path": "/workspace/rows.txt"}]},
    ),
    stage(
        "c",
        "cat /nodus/inputs/left/part.txt /nodus/inputs/right",
        spec={
            "inputs": [
                {"name": "left", "fromStage": {"stage": "a", "output": "outputs"}},
                {"name": "right", "fromStage": {"stage": "b", "output": "rows"}},
            ]
        },
    ),
)


def test_a_fan_in_runs_in_order_reads_pinned_outputs_and_goes_with_its_pipeline(
    running: Running, kubectl_binary: Path
) -> None:
    project = running.project()
    kubectl(kubectl_binary, running, project, "apply", "-f", "-", stdin=yaml.safe_dump(FAN_IN))
    done = wait_pipeline(running, project, "etl", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded", (done["status"], running.logs())
    stages = {s["name"]: s for s in done["status"]["stages"]}
    assert {n: s["phase"] for n, s in stages.items()} == {"a": "Succeeded", "b": "Succeeded", "c": "Succeeded"}
    assert {n: s["job"] for n, s in stages.items()} == {"a": "etl-a", "b": "etl-b", "c": "etl-c"}
    assert done["status"]["succeeded"] == 3 and done["status"]["completionTime"]

    a, b, c = (get(running, project, "jobs", f"etl-{n}") for n in "abc")
    assert a is not None and b is not None and c is not None
    for stage_name, stage_job in zip("abc", (a, b, c), strict=True):
        meta = stage_job["metadata"]
        assert meta["labels"] == {"team": "data", "nodus.dev/pipeline": "etl", "nodus.dev/stage": stage_name}
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "Pipeline",
            "etl",
            done["metadata"]["uid"],
            True,
        )
    # c was created only after both of its upstream stages finished, and reads their committed outputs by digest.
    assert c["metadata"]["creationTimestamp"] >= max(a["status"]["completionTime"], b["status"]["completionTime"])
    assert c["spec"]["inputs"] == [
        {"name": "left", "output": {"job": "etl-a", "name": "outputs", "index": 0}},
        {"name": "right", "output": {"job": "etl-b", "name": "rows", "index": 0}},
    ]
    digests = {i["name"]: i["sha256"] for i in c["status"]["inputs"]}
    a_out = {o["name"]: o["sha256"] for o in a["status"]["outputs"]}
    b_out = {o["name"]: o["sha256"] for o in b["status"]["outputs"]}
    assert digests == {"left": a_out["outputs"], "right": b_out["rows"]}
    text = job_log(running, project, "etl-c")
    assert "from-a" in text and "from-b" in text

    table = kubectl(kubectl_binary, running, project, "get", "pipelines")
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "STAGES", "PHASE", "COST", "AGE"]
    assert row.split()[:3] == ["etl", "3/3", "Succeeded"] and row.split()[3].startswith("$")

    # Deleting the Pipeline deletes its stage Jobs (they name it as their owner).
    kubectl(kubectl_binary, running, project, "delete", "pipeline", "etl")
    running.wait_for(
        "the stage Jobs to be deleted with their Pipeline",
        lambda: all(get(running, project, "jobs", f"etl-{n}") is None for n in "abc"),
        timeout=120,
    )


def test_an_invalid_graph_is_refused_with_every_field_named(running: Running) -> None:
    project = running.project()
    body = manifest(
        "loop",
        stage("a", "true", dependsOn=["c"]),
        stage("b", "true", dependsOn=["a", "nope"]),
        stage("c", "true", spec={"inputs": [{"name": "x", "fromStage": {"stage": "b", "output": "model"}}]}),
    )
    with running.client() as client:
        response = client.post(f"{API}/namespaces/{project}/pipelines", json=body)
    assert response.status_code == 422, response.text
    fields = {cause["field"] for cause in response.json()["details"]["causes"]}
    assert fields == {
        "spec.stages",
        "spec.stages[1].dependsOn[1]",
        "spec.stages[2].template.spec.inputs[0].fromStage.output",
    }
    assert "a -> c -> b -> a" in response.text


def test_a_failed_stage_fails_the_pipeline_and_cancels_the_rest(running: Running) -> None:
    project = running.project()
    body = manifest(
        "broken",
        stage("a", "sleep 3; echo failing; exit 3", spec={"backoffLimit": 0}),
        stage("b", "sleep 120"),
        stage("c", "true", dependsOn=["a"]),
    )
    with running.client() as client:
        response = client.post(f"{API}/namespaces/{project}/pipelines", json=body)
        assert response.status_code == 201, response.text
    # b runs beside a (usually Running by the time a fails); the failure cancels it wherever it is.
    wait_job(running, project, "broken-b", "Running", "Cancelled", timeout=120)
    failed = wait_pipeline(running, project, "broken", "Failed")
    assert "Stage a failed" in failed["status"]["message"]
    assert next(c for c in failed["status"]["conditions"] if c["type"] == "Failed")["reason"] == "StageFailed"
    cancelled = wait_job(running, project, "broken-b", "Cancelled", timeout=120)
    assert cancelled["spec"]["state"] == "Cancelled"
    final = wait_pipeline(running, project, "broken", "Failed")
    running.wait_for(
        "the pipeline to show b cancelled",
        lambda: (
            {s["name"]: s["phase"] for s in (get(running, project, "pipelines", "broken") or {})["status"]["stages"]}
            == {"a": "Failed", "b": "Cancelled", "c": "Skipped"}
        ),
    )
    assert final["status"]["phase"] == "Failed"
    assert get(running, project, "jobs", "broken-c") is None


def test_suspend_and_cancel_cascade_to_the_running_stage(running: Running, kubectl_binary: Path) -> None:
    project = running.project()
    body = manifest("long", stage("a", "sleep 300"), stage("b", "true", dependsOn=["a"]))
    kubectl(kubectl_binary, running, project, "apply", "-f", "-", stdin=yaml.safe_dump(body))
    wait_job(running, project, "long-a", "Running", timeout=120)
    kubectl(
        kubectl_binary,
        running,
        project,
        "patch",
        "pipeline",
        "long",
        "--type=merge",
        "-p",
        '{"spec": {"state": "Suspended"}}',
    )
    suspended = wait_job(running, project, "long-a", "Suspended", timeout=120)
    assert suspended["spec"]["state"] == "Suspended"
    shown = wait_pipeline(running, project, "long", "Suspended")
    assert next(c for c in shown["status"]["conditions"] if c["type"] == "Suspended")["status"] == "True"

    patch_state(running, project, "long", "Running")
    resumed = wait_job(running, project, "long-a", "Running", "Queued", "Provisioning", "Pending", timeout=120)
    assert resumed["spec"]["state"] == "Running"

    patch_state(running, project, "long", "Cancelled")
    wait_job(running, project, "long-a", "Cancelled", timeout=120)
    cancelled = wait_pipeline(running, project, "long", "Cancelled")
    assert cancelled["status"]["completionTime"]
    assert get(running, project, "jobs", "long-b") is None


EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "pipeline.yaml"


def test_the_documented_example_pipeline_runs(running: Running, kubectl_binary: Path) -> None:
    """docs/examples/pipeline.yaml as written (its image served by this session's registry)."""
    project = running.project()
    text = EXAMPLE.read_text().replace("localhost:5000/nodus/python:3.11", registry_python_image())
    # A server-side dry run shows the whole graph's estimate and stores nothing (docs/pipelines.md, Money).
    dry = kubectl(kubectl_binary, running, project, "apply", "--dry-run=server", "-o", "yaml", "-f", "-", stdin=text)
    previewed = next(d for d in yaml.safe_load(dry)["items"] if d["kind"] == "Pipeline")
    assert {s["name"] for s in previewed["status"]["estimate"]["stages"]} == {"data", "train", "report"}
    assert get(running, project, "pipelines", "ml") is None
    kubectl(kubectl_binary, running, project, "apply", "-f", "-", stdin=text)
    # As the README waits for it.
    kubectl(
        kubectl_binary,
        running,
        project,
        "wait",
        "pipeline/ml",
        "--for=jsonpath={.status.phase}=Succeeded",
        "--timeout=3m",
    )
    done = wait_pipeline(running, project, "ml", "Succeeded", "Failed", timeout=180)
    assert done["status"]["phase"] == "Succeeded", (done["status"], running.logs())
    assert "the token arrived" in job_log(running, project, "ml-train")
    train = get(running, project, "jobs", "ml-train")
    assert train is not None and train["metadata"]["labels"]["team"] == "research"
    assert train["spec"]["maxCostUSD"]  # under the Pipeline's cap
    with running.client() as client:
        response = client.get(f"{API}/namespaces/{project}/jobs/ml-report/outputs/summary", params={"index": 0})
        assert response.status_code == 200, response.text
    assert b"/nodus/inputs/model/weights/model.txt" in response.content
    assert b"/nodus/inputs/table/table.csv" in response.content
    table = kubectl(kubectl_binary, running, project, "get", "jobs", "-l", "nodus.dev/pipeline=ml", "-o", "name")
    assert sorted(table.split()) == ["job.nodus.dev/ml-data", "job.nodus.dev/ml-report", "job.nodus.dev/ml-train"]


def test_a_dry_run_estimates_the_whole_graph_and_binds_a_create(running: Running) -> None:
    project = running.project(credit="2")
    body = manifest(
        "priced",
        stage("a", "true", spec={"expectedDuration": "30s"}),
        stage("b", "true", spec={"expectedDuration": "30s"}),
        stage("c", "true", dependsOn=["a", "b"], spec={"expectedDuration": "30s"}),
        maxCostUSD="1",
    )
    path = f"{API}/namespaces/{project}/pipelines"
    with running.client() as client:
        dry = client.post(path, params={"dryRun": "All"}, json=body)
        assert dry.status_code == 201, dry.text
        estimate = dry.json()["status"]["estimate"]
        etag = dry.headers["ETag"]
        assert get(running, project, "pipelines", "priced") is None  # nothing stored by a dry run
        stages = {s["name"]: s for s in estimate["stages"]}
        assert set(stages) == {"a", "b", "c"}
        # The sum of three stages' costs, and a and b holding together at most (c runs alone after them).
        assert float(estimate["costUSD"]["p50"]) > float(stages["a"]["costUSD"]["p50"])
        holds = {n: float(s["concurrentHoldUSD"]) for n, s in stages.items()}
        assert float(estimate["largestConcurrentHoldUSD"]) == pytest.approx(max(holds["a"] + holds["b"], holds["c"]))
        # A create of another spec with that ETag is refused; the same spec is bound to the estimate.
        other = {**body, "spec": {**body["spec"], "maxCostUSD": "2"}}
        mismatch = client.post(path, json=other, headers={"If-Match": etag})
        assert mismatch.status_code == 412 and mismatch.json()["reason"] == "EstimateMismatch"
        created = client.post(path, json=body, headers={"If-Match": etag})
        assert created.status_code == 201, created.text
        assert created.json()["status"]["estimate"]["costUSD"] == estimate["costUSD"]
    done = wait_pipeline(running, project, "priced", "Succeeded", "Failed", timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["status"]["estimate"]["costUSD"] == estimate["costUSD"]  # kept by the controller's status writes
    ab = [get(running, project, "jobs", f"priced-{n}") for n in "ab"]
    assert all(j is not None and float(j["spec"]["maxCostUSD"]) <= 1 for j in ab)


def test_a_stage_that_could_never_be_funded_refuses_the_create(running: Running) -> None:
    project = running.project(credit=None)
    body = manifest("unfunded", stage("a", "true"), stage("b", "true", dependsOn=["a"]))
    with running.client() as client:
        dry = client.post(f"{API}/namespaces/{project}/pipelines", params={"dryRun": "All"}, json=body)
        assert dry.status_code == 201, dry.text
        reasons = dry.json()["status"]["estimate"]["blockingReasons"]
        assert {r["code"] for r in reasons} == {"InsufficientCredits"}
        assert {r["message"].split(":")[0] for r in reasons} == {"stage a", "stage b"}
        refused = client.post(f"{API}/namespaces/{project}/pipelines", json=body)
    assert refused.status_code == 402 and refused.json()["reason"] == "InsufficientCredits", refused.text
    assert "stage a" in refused.json()["message"]


def test_a_rerun_from_a_stage_reuses_what_did_not_change(running: Running, kubectl_binary: Path) -> None:
    project = running.project()
    body = manifest(
        "again",
        stage("a", "echo rows > /nodus/outputs/rows.txt"),
        stage(
            "b",
            "cat /nodus/inputs/rows/rows.txt > /workspace/fixed.txt; date +%s%N > /workspace/stamp.txt",
            spec={
                "inputs": [{"name": "rows", "fromStage": {"stage": "a", "output": "outputs"}}],
                "outputs": [
                    {"name": "fixed", "path": "/workspace/fixed.txt"},
                    {"name": "stamp", "path": "/workspace/stamp.txt"},
                ],
            },
        ),
        stage(
            "c",
            "cat /nodus/inputs/x",
            spec={"inputs": [{"name": "x", "fromStage": {"stage": "b", "output": "fixed"}}]},
        ),
        stage(
            "d",
            "cat /nodus/inputs/x",
            spec={"inputs": [{"name": "x", "fromStage": {"stage": "b", "output": "stamp"}}]},
        ),
    )
    kubectl(kubectl_binary, running, project, "apply", "-f", "-", stdin=yaml.safe_dump(body))
    first = wait_pipeline(running, project, "again", "Succeeded", "Failed", timeout=180)
    assert first["status"]["phase"] == "Succeeded", first["status"]

    kubectl(
        kubectl_binary,
        running,
        project,
        "annotate",
        "pipeline",
        "again",
        "nodus.dev/rerun-requested-at=2026-12-03T12:00:00Z",
        "nodus.dev/rerun-from=b",
    )

    def rerun_done() -> dict[str, Any] | None:
        found = get(running, project, "pipelines", "again") or {}
        status = found.get("status") or {}
        return found if status.get("run") == 2 and status.get("phase") in ("Succeeded", "Failed") else None

    second = running.wait_for("the re-run to finish", rerun_done, timeout=180)
    assert second["status"]["phase"] == "Succeeded", second["status"]
    stages = {s["name"]: s for s in second["status"]["stages"]}
    # a is upstream of the re-run: untouched. b ran again. c read b's unchanged output: reused, not run. d read
    # the output that changed: run again, reading the new one.
    assert (stages["a"]["job"], stages["a"].get("run", 1)) == ("again-a", 1)
    assert (stages["b"]["job"], stages["b"]["run"]) == ("again-b.r2", 2)
    assert (stages["c"]["job"], stages["c"].get("reused")) == ("again-c", True)
    assert stages["d"]["job"] == "again-d.r2" and not stages["d"].get("reused")
    assert get(running, project, "jobs", "again-c.r2") is None
    b1, b2 = get(running, project, "jobs", "again-b"), get(running, project, "jobs", "again-b.r2")
    d2 = get(running, project, "jobs", "again-d.r2")
    assert b1 is not None and b2 is not None and d2 is not None
    fixed = {o["name"]: o["sha256"] for o in b1["status"]["outputs"]}
    fixed2 = {o["name"]: o["sha256"] for o in b2["status"]["outputs"]}
    assert fixed["fixed"] == fixed2["fixed"] and fixed["stamp"] != fixed2["stamp"]
    assert d2["spec"]["inputs"][0]["output"]["job"] == "again-b.r2"
    assert d2["status"]["inputs"][0]["sha256"] == fixed2["stamp"]
    # The same request again changes nothing: each value re-runs once.
    kubectl(kubectl_binary, running, project, "annotate", "--overwrite", "pipeline", "again", "unrelated=1")
    assert (get(running, project, "pipelines", "again") or {})["status"]["run"] == 2
