"""Blobs, Volume revisions and Job outputs through the real API server, with httpx, kubectl and the CLI."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import zstandard

from nodus.cli import main as cli
from tests.conftest import make_project
from tests.support.cluster import Cluster
from tests.support.objects import API, job, jobs_path

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}
TAR_ZSTD = "application/vnd.nodus.tar+zstd"


def blobs_path(project: str, digest: str = "") -> str:
    return f"{API}/namespaces/{project}/blobs" + (f"/{digest}" if digest else "")


def volumes_path(project: str, name: str = "") -> str:
    return f"{API}/namespaces/{project}/volumes" + (f"/{name}" if name else "")


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def upload(
    client: httpx.Client, project: str, body: bytes, media: str = "application/octet-stream", **params: str
) -> httpx.Response:
    return client.post(blobs_path(project), content=body, headers={"Content-Type": media}, params=params)


def test_a_blob_uploads_in_a_stream_and_downloads_with_its_headers(admin: httpx.Client, project: str) -> None:
    body = os.urandom(3 * 1024 * 1024 + 17)

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start : start + 64 * 1024]

    created = admin.post(
        blobs_path(project),
        content=pieces(),
        headers={"Content-Type": "application/x-tar"},
        params={"digest": digest_of(body)},
    )
    assert created.status_code == 201, created.text
    digest = digest_of(body)
    assert created.json() == {
        "kind": "Blob",
        "apiVersion": "nodus.dev/v1",
        "digest": digest,
        "size": len(body),
        "mediaType": "application/x-tar",
    }
    assert created.headers["location"] == blobs_path(project, digest)

    got = admin.get(blobs_path(project, digest))
    assert got.status_code == 200
    assert got.content == body
    assert got.headers["content-length"] == str(len(body))
    assert got.headers["content-type"] == "application/x-tar"
    assert got.headers["etag"].strip('"') == digest

    head = admin.head(blobs_path(project, digest))
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len(body))
    assert admin.get(blobs_path(project, digest), headers={"If-None-Match": got.headers["etag"]}).status_code == 304

    again = upload(admin, project, body, "application/x-tar")
    assert again.status_code == 201 and again.json()["digest"] == digest


def test_a_digest_mismatch_is_a_422_naming_both_digests(admin: httpx.Client, project: str) -> None:
    body = b"the real bytes"
    claimed = "sha256:" + "0" * 64
    refused = upload(admin, project, body, digest=claimed)
    assert refused.status_code == 422, refused.text
    status = refused.json()
    assert status["kind"] == "Status" and status["reason"] == "Invalid"
    assert claimed in status["message"] and digest_of(body) in status["message"]
    assert status["fix"] and status["details"]["causes"][0]["field"] == "digest"
    assert admin.get(blobs_path(project, digest_of(body))).status_code == 404

    malformed = upload(admin, project, body, digest="md5:abc")
    assert malformed.status_code == 400 and malformed.json()["reason"] == "BadRequest"


def test_missing_blobs_are_404_and_projects_do_not_share_blobs(admin: httpx.Client, project: str) -> None:
    from tests.conftest import make_project

    body = os.urandom(100)
    assert upload(admin, project, body).status_code == 201
    other = make_project(admin)
    missing = admin.get(blobs_path(other, digest_of(body)))
    assert missing.status_code == 404
    assert missing.json()["kind"] == "Status" and missing.json()["reason"] == "NotFound"
    assert digest_of(body) in missing.json()["message"]
    assert admin.head(blobs_path(other, digest_of(body))).status_code == 404
    assert admin.get(blobs_path(project, "sha256:nothex")).status_code == 400


def test_editors_write_blobs_viewers_read_them_outsiders_neither(cluster: Cluster, project: str) -> None:
    body = os.urandom(64)
    with cluster.client("bob") as editor, cluster.client("carol") as viewer, cluster.client("dave") as outsider:
        assert upload(editor, project, body).status_code == 201
        assert viewer.get(blobs_path(project, digest_of(body))).content == body
        denied = upload(viewer, project, b"x")
        assert denied.status_code == 403
        assert 'User "carol" cannot create resource "blobs"' in denied.json()["message"]
        hidden = outsider.get(blobs_path(project, digest_of(body)))
        assert hidden.status_code == 403 and hidden.json()["reason"] == "Forbidden"


def tar_zst(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return zstandard.ZstdCompressor().compress(raw.getvalue())


def untar_zst(data: bytes) -> dict[str, bytes]:
    plain = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(plain), mode="r") as tar:
        for member in tar.getmembers():
            if member.isfile():
                extracted = tar.extractfile(member)
                assert extracted is not None
                out[member.name] = extracted.read()
    return out


def test_volume_revisions_are_appended_in_order(cluster: Cluster, admin: httpx.Client, project: str) -> None:
    volume = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Volume",
        "metadata": {"name": "data"},
        "spec": {"description": "x"},
    }
    created = admin.post(volumes_path(project), json=volume)
    assert created.status_code == 201, created.text
    assert created.json()["status"] == {"latestRevision": 0, "revisions": []}

    archive = tar_zst({"a.txt": b"alpha"})
    with cluster.client("bob") as editor, cluster.client("carol") as viewer:
        first = editor.post(
            volumes_path(project, "data") + "/revisions", content=archive, headers={"Content-Type": TAR_ZSTD}
        )
        assert first.status_code == 201, first.text
        assert first.json()["revision"]["revision"] == 1
        second = editor.post(
            volumes_path(project, "data") + "/revisions",
            content=b"weights",
            headers={"Content-Type": "application/octet-stream"},
            params={"filename": "w.bin"},
        )
        assert second.status_code == 201, second.text
        denied = viewer.post(volumes_path(project, "data") + "/revisions", content=b"x")
        assert denied.status_code == 403

    status = admin.get(volumes_path(project, "data")).json()["status"]
    assert status["latestRevision"] == 2
    revisions = status["revisions"]
    assert [(r["revision"], r["sha256"], r["size"], r["mediaType"], r["source"]) for r in revisions] == [
        (1, hashlib.sha256(archive).hexdigest(), len(archive), TAR_ZSTD, "upload"),
        (2, hashlib.sha256(b"weights").hexdigest(), 7, "application/octet-stream", "upload"),
    ]
    assert revisions[1]["filename"] == "w.bin" and "createdTime" in revisions[0]
    # The revision's bytes are a blob of the project.
    assert admin.get(blobs_path(project, "sha256:" + revisions[0]["sha256"])).content == archive

    missing = admin.post(volumes_path(project, "nope") + "/revisions", content=b"x")
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"


def test_kubectl_lists_volumes(cluster: Cluster, kubectl_binary: Path, admin: httpx.Client, project: str) -> None:
    import subprocess

    volume = {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": "listed"}, "spec": {}}
    assert admin.post(volumes_path(project), json=volume).status_code == 201
    result = subprocess.run(
        [str(kubectl_binary), "--kubeconfig", str(cluster.kubeconfig("admin")), "get", "volumes", "-n", project],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "listed" in result.stdout and "LATEST" in result.stdout


def test_the_cli_uploads_a_directory_as_tar_zst_and_a_file_as_itself(
    cluster: Cluster, admin: httpx.Client, project: str, tmp_path: Path
) -> None:
    volume = {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": "cli"}, "spec": {}}
    assert admin.post(volumes_path(project), json=volume).status_code == 201
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "top.txt").write_bytes(b"top")
    (tree / "sub" / "deep.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    kubeconfig = str(cluster.kubeconfig("admin"))
    cli.main(["volumes", "upload", "cli", str(tree), "-n", project, "--kubeconfig", kubeconfig])
    cli.main(["volumes", "upload", "cli", str(tree / "top.txt"), "-n", project, "--kubeconfig", kubeconfig])

    revisions = admin.get(volumes_path(project, "cli")).json()["status"]["revisions"]
    assert [(r["revision"], r["mediaType"]) for r in revisions] == [(1, TAR_ZSTD), (2, "text/plain")]
    assert revisions[1]["filename"] == "top.txt"
    archive = admin.get(blobs_path(project, "sha256:" + revisions[0]["sha256"])).content
    assert untar_zst(archive) == {"top.txt": b"top", "sub/deep.bin": (tree / "sub" / "deep.bin").read_bytes()}


def write_outputs(admin: httpx.Client, project: str, name: str, outputs: list[dict[str, Any]]) -> None:
    response = admin.patch(jobs_path(project, name) + "/status", json={"status": {"outputs": outputs}}, headers=MERGE)
    assert response.status_code == 200, response.text


def test_a_jobs_committed_output_downloads_as_a_file(
    cluster: Cluster, admin: httpx.Client, project: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert admin.post(jobs_path(project), json=job("train")).status_code == 201
    archive = tar_zst({"model.pt": b"weights"})
    report = b"loss 0.1\n"
    tree = upload(admin, project, archive, TAR_ZSTD).json()
    single = upload(admin, project, report, "text/plain").json()
    model_entry = {"name": "model", "index": 0, "path": "/nodus/outputs/model", "sha256": tree["digest"][7:]}
    report_entry = {"name": "report", "index": 1, "rank": 0, "path": "/nodus/outputs/report.txt"}
    report_entry |= {"sha256": single["digest"][7:], "size": len(report)}
    write_outputs(admin, project, "train", [model_entry | {"size": len(archive)}, report_entry])
    outputs = jobs_path(project, "train") + "/outputs"

    model = admin.get(f"{outputs}/model")
    assert model.status_code == 200, model.text
    assert model.content == archive
    assert model.headers["content-disposition"] == 'attachment; filename="model.tar.zst"'
    assert model.headers["content-type"] == TAR_ZSTD
    text = admin.get(f"{outputs}/report", params={"index": "1", "rank": "0"})
    assert text.content == report
    assert text.headers["content-disposition"] == 'attachment; filename="report.txt"'
    assert admin.head(f"{outputs}/report", params={"index": "1"}).status_code == 200

    missing = admin.get(f"{outputs}/report")  # index 0 has no report
    assert missing.status_code == 404
    message = missing.json()["message"]
    assert missing.json()["reason"] == "NotFound"
    assert 'no committed output "report" for index 0' in message
    assert "model (index 0)" in message and "report (index 1, rank 0)" in message
    assert admin.get(jobs_path(project, "ghost") + "/outputs/model").status_code == 404
    with cluster.client("dave") as outsider:
        assert outsider.get(f"{outputs}/model").status_code == 403

    monkeypatch.chdir(tmp_path)
    kubeconfig = str(cluster.kubeconfig("admin"))
    cli.main(["outputs", "get", "train", "model", "-n", project, "--kubeconfig", kubeconfig])
    assert (tmp_path / "model.tar.zst").read_bytes() == archive
    cli.main(
        ["outputs", "get", "train", "report", "--index", "1", "-n", project, "-o", "r.txt", "--kubeconfig", kubeconfig]
    )
    assert (tmp_path / "r.txt").read_bytes() == report
    with pytest.raises(SystemExit, match="NotFound"):
        cli.main(["outputs", "get", "train", "nothing", "-n", project, "--kubeconfig", kubeconfig])


def test_a_project_created_again_under_a_deleted_ones_name_reads_none_of_its_blobs(
    admin: httpx.Client, cluster: Cluster
) -> None:
    """A deleted project's blobs go with it, not after the grace period: an administrator who gives the name to
    another tenant must not hand over the old one's bytes to whoever knows a digest."""
    name = make_project(admin, [{"name": "alice", "role": "Owner"}], credit=None)
    body = os.urandom(4096)
    assert upload(admin, name, body).status_code == 201
    assert admin.delete(f"{API}/projects/{name}").status_code in (200, 202)

    def gone() -> bool:
        return admin.get(f"{API}/projects/{name}").status_code == 404

    deadline = time.monotonic() + 60
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert gone()
    project = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": name}, "spec": {}}
    assert (
        admin.post(
            f"{API}/projects", json={**project, "spec": {"members": [{"name": "bob", "role": "Owner"}]}}
        ).status_code
        == 201
    )
    with cluster.client("bob") as bob:
        assert bob.get(blobs_path(name, digest_of(body))).status_code == 404
