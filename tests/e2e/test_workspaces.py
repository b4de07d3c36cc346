"""Workspaces through the real API server and PostgreSQL: the kind, its revisions, kubectl and the CLI.

A push sends only the chunks the project lacks (counted by the CLI's report and by the blobs the project
gains); a pull writes exactly the revision and refuses hostile manifests without writing anything; a Job's
committed output becomes a revision by digest.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from nodus.agent.manifests import Entry, Manifest
from nodus.cli import main as cli
from tests.e2e.test_blobs import TAR_ZSTD, blobs_path, tar_zst, upload, write_outputs
from tests.support.cluster import Cluster
from tests.support.objects import API, job, jobs_path

pytestmark = pytest.mark.e2e
MANIFEST = "application/vnd.nodus.checkpoint.manifest+json"


def workspaces_path(project: str, name: str = "") -> str:
    return f"{API}/namespaces/{project}/workspaces" + (f"/{name}" if name else "")


def create(client: httpx.Client, project: str, name: str) -> None:
    body = {"apiVersion": "nodus.dev/v1", "kind": "Workspace", "metadata": {"name": name}, "spec": {}}
    response = client.post(workspaces_path(project), json=body)
    assert response.status_code == 201, response.text


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def manifest_of(files: dict[str, bytes], extra: tuple[Entry, ...] = ()) -> Manifest:
    entries = [Entry("/workspace", "dir", 0o755)]
    for name, body in files.items():
        entries.append(Entry(f"/workspace/{name}", "file", 0o644, len(body), (digest_of(body),) if body else ()))
    entries += extra
    entries.sort(key=lambda e: e.path.split("/"))
    return Manifest("Snapshot", 0, ["/workspace"], 4 * 1024 * 1024, entries, "2026-12-01T00:00:00+00:00")


def push_cli(cluster: Cluster, project: str, name: str, tree: Path, capsys: pytest.CaptureFixture[str]) -> str:
    cli.main(["workspaces", "push", name, str(tree), "-n", project, "--kubeconfig", str(cluster.kubeconfig("bob"))])
    return capsys.readouterr().out


def test_a_workspace_records_revisions_from_manifests_and_outputs(
    cluster: Cluster, admin: httpx.Client, project: str
) -> None:
    create(admin, project, "home")
    created = admin.get(workspaces_path(project, "home")).json()
    assert created["status"] == {"latestRevision": 0, "size": 0, "revisions": []}

    files = {"a.txt": b"alpha", "b.txt": b"bravo!"}
    manifest = manifest_of(files)
    # A manifest naming chunks the project lacks is refused, naming them; nothing is recorded.
    refused = admin.post(
        workspaces_path(project, "home") + "/revisions", content=manifest.to_bytes(), headers={"Content-Type": MANIFEST}
    )
    assert refused.status_code == 422, refused.text
    assert digest_of(b"alpha") in refused.json()["message"]
    for body in files.values():
        assert upload(admin, project, body).status_code == 201
    recorded = admin.post(
        workspaces_path(project, "home") + "/revisions", content=manifest.to_bytes(), headers={"Content-Type": MANIFEST}
    )
    assert recorded.status_code == 201, recorded.text
    revision = recorded.json()["revision"]
    assert revision["revision"] == 1 and revision["source"] == "Push"
    assert (revision["size"], revision["files"], revision["digest"]) == (11, 2, digest_of(manifest.to_bytes()))

    # A Job's committed output becomes revision 2 by digest: no bytes are copied.
    assert admin.post(jobs_path(project), json=job("train")).status_code == 201
    archive = tar_zst({"model.pt": b"weights"})
    stored = upload(admin, project, archive, TAR_ZSTD).json()
    write_outputs(admin, project, "train", [{"name": "model", "index": 0, "sha256": stored["digest"][7:]}])
    from_output = admin.post(workspaces_path(project, "home") + "/revisions", json={"output": "train/model"})
    assert from_output.status_code == 201, from_output.text
    status = admin.get(workspaces_path(project, "home")).json()["status"]
    assert status["latestRevision"] == 2 and status["size"] == len(archive) and "files" not in status
    assert [(r["revision"], r["source"], r.get("output")) for r in status["revisions"]] == [
        (1, "Push", None),
        (2, "Output", "train/model"),
    ]
    assert status["revisions"][1]["digest"] == stored["digest"] and status["lastChangeTime"]
    got = admin.get(workspaces_path(project, "home") + "/revisions/2")
    assert got.content == archive and got.headers["content-type"] == TAR_ZSTD
    assert got.headers["x-nodus-revision"] == "2"

    # Clear refusals: an unknown output, a manifest not rooted at /workspace, a revision not kept.
    unknown = admin.post(workspaces_path(project, "home") + "/revisions", json={"output": "train/nothing"})
    assert unknown.status_code == 404 and "its committed outputs are model" in unknown.json()["message"]
    elsewhere = Manifest("Snapshot", 0, ["/nodus/state"], 4, [], "2026-12-01T00:00:00+00:00")
    wrong = admin.post(
        workspaces_path(project, "home") + "/revisions",
        content=elsewhere.to_bytes(),
        headers={"Content-Type": MANIFEST},
    )
    assert wrong.status_code == 422 and "paths must be ['/workspace']" in wrong.json()["message"]
    assert admin.get(workspaces_path(project, "home") + "/revisions/9").status_code == 404
    assert (
        admin.post(workspaces_path(project, "ghost") + "/revisions", json={"output": "train/model"}).status_code == 404
    )
    # Viewers read, only Editors write; outsiders do neither.
    with cluster.client("carol") as viewer:
        assert viewer.get(workspaces_path(project, "home") + "/revisions/1").status_code == 200
        assert (
            viewer.post(workspaces_path(project, "home") + "/revisions", json={"output": "train/model"}).status_code
            == 403
        )
    with cluster.client("dave") as outsider:
        assert outsider.get(workspaces_path(project, "home") + "/revisions/1").status_code == 403


def test_status_is_refused_when_revisions_are_not_consecutive(admin: httpx.Client, project: str) -> None:
    create(admin, project, "strict")
    revision = {"digest": "sha256:" + "0" * 64, "mediaType": MANIFEST, "size": 0, "createdTime": "2026-12-01T00:00:00Z"}
    status = {
        "latestRevision": 3,
        "revisions": [revision | {"revision": 1, "source": "Push"}, revision | {"revision": 3, "source": "Push"}],
    }
    response = admin.patch(
        workspaces_path(project, "strict") + "/status",
        json={"status": status},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert response.status_code == 422
    assert "status.revisions[1].revision" in response.text


def test_kubectl_lists_workspaces_with_revision_size_and_files(
    cluster: Cluster,
    kubectl_binary: Path,
    admin: httpx.Client,
    project: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create(admin, project, "listed")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "f").write_bytes(b"12345")
    push_cli(cluster, project, "listed", tmp_path / "t", capsys)
    result = subprocess.run(
        [str(kubectl_binary), "--kubeconfig", str(cluster.kubeconfig("admin")), "get", "workspaces", "-n", project],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "REVISION", "SIZE", "FILES", "LAST", "CHANGE", "AGE"]
    assert row.split()[:4] == ["listed", "1", "5", "1"]


def test_push_sends_only_what_changed_and_pull_writes_it_back(
    cluster: Cluster, admin: httpx.Client, project: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    create(admin, project, "code")
    tree = tmp_path / "tree"
    (tree / "src" / "pkg").mkdir(parents=True)
    (tree / "src" / "pkg" / "main.py").write_text("print('hi')\n")
    (tree / "data.bin").write_bytes(os.urandom(5 * 1024 * 1024))  # two chunks
    (tree / "empty").write_bytes(b"")
    os.symlink("src/pkg/main.py", tree / "link")
    os.mkfifo(tree / "pipe")  # skipped, never read

    first = push_cli(cluster, project, "code", tree, capsys)
    assert "revision 1 pushed: 3 chunks, 3 chunks uploaded" in first
    again = push_cli(cluster, project, "code", tree, capsys)
    assert "revision 2 pushed: 3 chunks, 0 chunks uploaded, 0 bytes uploaded" in again
    (tree / "src" / "pkg" / "main.py").write_text("print('changed')\n")
    changed = push_cli(cluster, project, "code", tree, capsys)
    assert "revision 3 pushed: 3 chunks, 1 chunks uploaded, 17 bytes uploaded" in changed

    kubeconfig = str(cluster.kubeconfig("carol"))  # a Viewer may pull
    out = tmp_path / "out"
    cli.main(["workspaces", "pull", "code", str(out), "-n", project, "--kubeconfig", kubeconfig])
    assert (out / "src" / "pkg" / "main.py").read_text() == "print('changed')\n"
    assert (out / "data.bin").read_bytes() == (tree / "data.bin").read_bytes()
    assert (out / "empty").read_bytes() == b"" and os.readlink(out / "link") == "src/pkg/main.py"
    assert not (out / "pipe").exists()
    old = tmp_path / "old"
    cli.main(["workspaces", "pull", "code", str(old), "--revision", "1", "-n", project, "--kubeconfig", kubeconfig])
    assert (old / "src" / "pkg" / "main.py").read_text() == "print('hi')\n"
    with pytest.raises(SystemExit, match="must be missing or an empty directory"):
        cli.main(["workspaces", "pull", "code", str(out), "-n", project, "--kubeconfig", kubeconfig])


@pytest.mark.parametrize(
    "entries",
    [
        pytest.param((Entry("/workspace/../escape", "file", 0o644),), id="dot-dot"),
        pytest.param(
            (Entry("/workspace/l", "symlink", 0o777, target="/tmp"), Entry("/workspace/l/x", "file", 0o644)),
            id="file-inside-a-link",
        ),
    ],
)
def test_pull_refuses_a_hostile_manifest_and_writes_nothing(
    cluster: Cluster, admin: httpx.Client, project: str, tmp_path: Path, entries: tuple[Entry, ...]
) -> None:
    """A manifest built by hand (past the CLI) that the server accepts in shape cannot make pull write outside
    DIR or through a link: pull checks it in full first."""
    create(admin, project, "hostile")
    manifest = manifest_of({}, entries)
    raw = manifest.to_bytes()  # to_bytes() does not check: the bytes a hostile client could send
    stored = admin.post(
        workspaces_path(project, "hostile") + "/revisions", content=raw, headers={"Content-Type": MANIFEST}
    )
    if stored.status_code == 422:  # the server's own shape check caught it: nothing to pull
        assert "entries[" in stored.json()["message"]
        return
    assert stored.status_code == 201, stored.text
    target = tmp_path / "target"
    with pytest.raises(SystemExit, match="refused, nothing was written"):
        cli.main(
            [
                "workspaces",
                "pull",
                "hostile",
                str(target),
                "-n",
                project,
                "--kubeconfig",
                str(cluster.kubeconfig("admin")),
            ]
        )
    assert not target.exists() and not (tmp_path / "escape").exists()
    assert sorted(os.listdir(tmp_path)) == []


def test_push_from_output_through_the_cli_copies_no_bytes(
    cluster: Cluster, admin: httpx.Client, project: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    create(admin, project, "results")
    assert admin.post(jobs_path(project), json=job("eval")).status_code == 201
    archive = tar_zst({"scores/summary.txt": b"0.93"})
    stored = upload(admin, project, archive, TAR_ZSTD).json()
    write_outputs(admin, project, "eval", [{"name": "scores", "index": 0, "sha256": stored["digest"][7:]}])
    kubeconfig = str(cluster.kubeconfig("bob"))
    cli.main(
        ["workspaces", "push", "results", "--from-output", "eval/scores", "-n", project, "--kubeconfig", kubeconfig]
    )
    assert "revision 1 recorded from output eval/scores (no bytes copied)" in capsys.readouterr().out
    revision = admin.get(workspaces_path(project, "results")).json()["status"]["revisions"][0]
    assert revision["digest"] == stored["digest"]
    assert admin.head(blobs_path(project, stored["digest"])).status_code == 200
    out = tmp_path / "pulled"
    cli.main(["workspaces", "pull", "results", str(out), "-n", project, "--kubeconfig", kubeconfig])
    assert (out / "scores" / "summary.txt").read_bytes() == b"0.93"
