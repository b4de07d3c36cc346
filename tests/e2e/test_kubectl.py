"""kubectl 1.35 against a real `nodus apiserver`: the commands users run every day."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support import kubectl
from tests.support.cluster import Cluster
from tests.support.objects import job, jobs_path

pytestmark = pytest.mark.e2e


def _manifest(name: str, **spec: object) -> str:
    return yaml.safe_dump(job(name, labels={"app": "train"}, **spec))


@pytest.fixture
def kc(cluster: Cluster, kubectl_binary: Path, project: str):  # type: ignore[no-untyped-def]
    config = cluster.kubeconfig("admin", namespace=project)

    def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return kubectl.run(kubectl_binary, config, *args, stdin=stdin, check=check)

    return run


def test_api_resources_lists_nodus_kinds(kc) -> None:  # type: ignore[no-untyped-def]
    out = kc("api-resources", "--api-group=nodus.dev", "-o", "wide").stdout
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "jobs" in lines and "projects" in lines
    assert "nj" in lines["jobs"] and "nodus.dev/v1" in lines["jobs"] and "true" in lines["jobs"]
    assert "false" in lines["projects"]
    assert "nodus" in lines["jobs"]  # category


def test_apply_get_table_and_yaml(kc, project: str) -> None:  # type: ignore[no-untyped-def]
    out = kc("apply", "-f", "-", stdin=_manifest("train-a")).stdout
    assert "job.nodus.dev/train-a created" in out
    table = kc("get", "jobs").stdout.splitlines()
    assert table[0].split()[:5] == ["NAME", "PHASE", "COMPLETIONS", "COST", "AGE"]
    assert table[1].split()[0] == "train-a"
    assert table[1].split()[1:3] == ["Pending", "0/1"]
    wide = kc("get", "nj", "train-a", "-o", "wide").stdout
    assert "REASON" in wide.splitlines()[0]
    as_yaml = yaml.safe_load(kc("get", "job", "train-a", "-o", "yaml").stdout)
    assert as_yaml["metadata"]["namespace"] == project
    assert as_yaml["spec"]["completions"] == 1  # defaulted
    assert as_yaml["metadata"]["generation"] == 1
    # Applying again with a change is a merge patch (client-side apply) that bumps the generation.
    kc("apply", "-f", "-", stdin=_manifest("train-a", parallelism=1, backoffLimit=3))
    again = json.loads(kc("get", "job", "train-a", "-o", "json").stdout)
    assert again["spec"]["backoffLimit"] == 3
    assert again["metadata"]["generation"] == 2
    assert kc("get", "nodus").stdout.count("train-a") == 1  # category


def test_get_all_projects(kc, cluster: Cluster, kubectl_binary: Path, project: str) -> None:  # type: ignore[no-untyped-def]
    kc("apply", "-f", "-", stdin=_manifest("everywhere"))
    out = kc("get", "jobs", "-A").stdout
    header = out.splitlines()[0].split()
    assert header[:2] == ["NAMESPACE", "NAME"]
    assert any(line.split()[:2] == [project, "everywhere"] for line in out.splitlines()[1:])


def test_patch_merge_and_json(kc) -> None:  # type: ignore[no-untyped-def]
    kc("apply", "-f", "-", stdin=_manifest("patched"))
    kc(
        "patch",
        "job",
        "patched",
        "--type",
        "merge",
        "-p",
        '{"spec":{"backoffLimit":9},"metadata":{"labels":{"x":"1"}}}',
    )
    kc(
        "patch",
        "job",
        "patched",
        "--type",
        "json",
        "-p",
        '[{"op":"replace","path":"/spec/parallelism","value":1},'
        '{"op":"add","path":"/metadata/annotations","value":{"note":"hi"}}]',
    )
    obj = json.loads(kc("get", "job", "patched", "-o", "json").stdout)
    assert obj["spec"]["backoffLimit"] == 9
    assert obj["metadata"]["labels"]["x"] == "1"
    assert obj["metadata"]["annotations"]["note"] == "hi"
    refused = kc("patch", "job", "patched", "-p", '{"spec":{"backoffLimit":1}}', check=False)
    assert refused.returncode != 0
    assert "merge patch" in refused.stderr
    immutable = kc("patch", "job", "patched", "--type", "merge", "-p", '{"spec":{"completions":4}}', check=False)
    assert immutable.returncode != 0 and "spec.completions" in immutable.stderr


def test_create_dry_run_server_stores_nothing(kc) -> None:  # type: ignore[no-untyped-def]
    out = kc("create", "--dry-run=server", "-f", "-", "-o", "json", stdin=_manifest("dry")).stdout
    assert json.loads(out)["metadata"]["name"] == "dry"
    missing = kc("get", "job", "dry", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_server_side_apply_and_conflicts(kc) -> None:  # type: ignore[no-untyped-def]
    kc("apply", "--server-side", "--field-manager", "alice-tool", "-f", "-", stdin=_manifest("ssa", backoffLimit=2))
    obj = json.loads(kc("get", "job", "ssa", "-o", "json", "--show-managed-fields").stdout)
    managers = {entry["manager"]: entry for entry in obj["metadata"]["managedFields"]}
    assert managers["alice-tool"]["operation"] == "Apply"
    assert "f:backoffLimit" in managers["alice-tool"]["fieldsV1"]["f:spec"]
    conflict = kc(
        "apply",
        "--server-side",
        "--field-manager",
        "bob-tool",
        "-f",
        "-",
        stdin=_manifest("ssa", backoffLimit=5),
        check=False,
    )
    assert conflict.returncode != 0
    assert "conflict" in conflict.stderr.lower() and "alice-tool" in conflict.stderr
    kc(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager",
        "bob-tool",
        "-f",
        "-",
        stdin=_manifest("ssa", backoffLimit=5),
    )
    obj = json.loads(kc("get", "job", "ssa", "-o", "json").stdout)
    assert obj["spec"]["backoffLimit"] == 5


def test_explain(kc) -> None:  # type: ignore[no-untyped-def]
    out = kc("explain", "jobs").stdout
    assert "KIND:" in out and "Job" in out and "nodus.dev" in out
    spec = kc("explain", "jobs.spec.parallelism").stdout
    assert "Parallelism is how many indexes run at once" in spec
    nested = kc("explain", "jobs.spec.recovery.checkpoint").stdout
    assert "interval" in nested and "maxSize" in nested


def test_delete(kc) -> None:  # type: ignore[no-untyped-def]
    kc("apply", "-f", "-", stdin=_manifest("doomed"))
    out = kc("delete", "job", "doomed").stdout
    assert 'job.nodus.dev "doomed" deleted' in out
    assert kc("get", "job", "doomed", check=False).returncode != 0


def test_get_watch_streams_changes(cluster: Cluster, kubectl_binary: Path, project: str, admin: httpx.Client) -> None:
    admin.post(jobs_path(project), json=job("watched")).raise_for_status()
    config = cluster.kubeconfig("admin", namespace=project)
    env_args = [str(kubectl_binary), "get", "jobs", "-w", "--request-timeout=20s"]
    with subprocess.Popen(
        env_args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"KUBECONFIG": str(config), "HOME": str(config.parent)},
    ) as process:
        try:
            assert process.stdout is not None
            first = process.stdout.readline()
            assert first.split()[0] == "NAME"
            assert process.stdout.readline().split()[0] == "watched"
            time.sleep(0.3)
            admin.patch(
                jobs_path(project, "watched"),
                json={"metadata": {"labels": {"seen": "yes"}}},
                headers={"Content-Type": "application/merge-patch+json"},
            ).raise_for_status()
            admin.post(jobs_path(project), json=job("second")).raise_for_status()
            lines = [process.stdout.readline().split()[0] for _ in range(2)]
            assert lines == ["watched", "second"]
        finally:
            process.kill()
