"""``nodus workspaces``: push a directory to a Workspace as a new revision, pull a revision into a directory.

* ``nodus workspaces push NAME DIR [--project P]`` walks DIR without following links
  (``nodus.agent.workspacetrees.scan``), cuts its files into content-addressed chunks, asks the server which
  chunks the project lacks (``HEAD .../blobs/<digest>``), uploads only those, then posts the manifest as
  the next revision. Pushing a tree again sends only the chunks of files that changed: none when nothing
  did. It prints the revision and what travelled (``chunks uploaded``, ``bytes uploaded``).
* ``nodus workspaces push NAME --from-output JOB/OUTPUT`` records the Job's committed output as the next
  revision; no bytes travel (the revision names the output's blob).
* ``nodus workspaces pull NAME [--revision N] DIR`` writes revision N (default the latest) into DIR, which
  must be missing or empty. A pushed revision's manifest is checked in full before anything is written
  (normalised paths below ``/workspace``, every entry inside a directory entry), links in it are recreated
  but never followed, every chunk must hash to its name, and DIR appears only once all of it is there
  (``nodus.agent.restoring``). An output revision (an archive) is unpacked by ``nodus.agent.archives``,
  which refuses links, devices and ``..`` names.

The project is ``--project``, else the kubeconfig context's namespace; credentials are the kubeconfig's.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodus.cli import pools
from nodus.cli.processes import kubeconfig_path

if TYPE_CHECKING:
    from nodus.client import Client, ClientConfig

API = "/apis/nodus.dev/v1"
CONCURRENCY = 4
MAX_MANIFEST_BYTES = 256 * 1024 * 1024


def add_workspace_commands(commands: Any) -> None:
    """Add ``push`` and ``pull`` to the ``nodus workspaces`` subcommands."""
    push = commands.add_parser("push", help="upload a directory (only what changed) or a Job output as a revision")
    push.add_argument("name", metavar="NAME", help="the Workspace's name")
    push.add_argument("directory", metavar="DIR", nargs="?", help="the directory to push")
    push.add_argument("--from-output", metavar="JOB/OUTPUT", help="record a Job's committed output instead")
    pull = commands.add_parser("pull", help="write a revision of a Workspace into a missing or empty directory")
    pull.add_argument("name", metavar="NAME", help="the Workspace's name")
    pull.add_argument("directory", metavar="DIR", help="where to write it (missing or empty)")
    pull.add_argument("--revision", type=int, help="the revision (default: the latest)")
    for parser, run in ((push, "push"), (pull, "pull")):
        parser.add_argument("--project", "-n", help="the workspace's project (default: the kubeconfig's namespace)")
        parser.add_argument("--kubeconfig", help="default: $KUBECONFIG")
        parser.set_defaults(run=f"workspaces:{run}")


@dataclass(frozen=True)
class Pushed:
    """What one push recorded and sent."""

    revision: int
    chunks: int
    uploaded_chunks: int
    uploaded_bytes: int


def push(args: argparse.Namespace) -> None:
    config, project = _target(args)
    if args.from_output:
        if args.directory:
            raise SystemExit("nodus workspaces push: give DIR or --from-output JOB/OUTPUT, not both")
        revision = pools._call(config, lambda c: _push_output(c, project, args.name, args.from_output))
        print(f"workspace {args.name} revision {revision} recorded from output {args.from_output} (no bytes copied)")
        return
    if not args.directory:
        raise SystemExit("nodus workspaces push: give the directory to push (DIR), or --from-output JOB/OUTPUT")
    pushed = pools._call(config, lambda c: push_directory(c, project, args.name, Path(args.directory)))
    print(
        f"workspace {args.name} revision {pushed.revision} pushed: {pushed.chunks} chunks, "
        f"{pushed.uploaded_chunks} chunks uploaded, {pushed.uploaded_bytes} bytes uploaded"
    )


def pull(args: argparse.Namespace) -> None:
    config, project = _target(args)
    target = Path(args.directory)
    if target.is_symlink() or (target.exists() and (not target.is_dir() or any(target.iterdir()))):
        raise SystemExit(f"nodus workspaces pull: {target} must be missing or an empty directory")
    revision = pools._call(config, lambda c: pull_revision(c, project, args.name, args.revision, target))
    print(f"workspace {args.name} revision {revision} written to {target}")


async def push_directory(client: Client, project: str, name: str, directory: Path) -> Pushed:
    """Push ``directory`` as the next revision of Workspace ``name``, uploading only the chunks the project
    lacks (see the module docstring)."""
    from nodus.agent import workspacetrees
    from nodus.apis.v1.workspace import MANIFEST

    await client.request("GET", _path(project, name))  # a 404 before hashing a large tree
    try:
        scanned = await asyncio.to_thread(workspacetrees.scan, directory)
    except OSError as exc:
        raise SystemExit(f"nodus workspaces push: cannot read {directory}: {exc}") from None
    sent = [0, 0]
    gate = asyncio.Semaphore(CONCURRENCY)

    async def send(digest: str) -> None:
        async with gate:
            if await _exists(client, project, digest):
                return
            data = await asyncio.to_thread(scanned.chunks[digest].read)
            await client.upload_blob(project, data, "application/octet-stream", digest=digest)
            sent[0] += 1
            sent[1] += len(data)

    await asyncio.gather(*(send(d) for d in sorted(scanned.chunks)))
    response = await client.request(
        "POST",
        f"{_path(project, name)}/revisions",
        content=scanned.manifest.to_bytes(),
        headers={"Content-Type": MANIFEST},
    )
    return Pushed(int(response.json()["revision"]["revision"]), len(scanned.chunks), sent[0], sent[1])


async def _push_output(client: Client, project: str, name: str, reference: str) -> int:
    response = await client.request("POST", f"{_path(project, name)}/revisions", json={"output": reference})
    return int(response.json()["revision"]["revision"])


async def _exists(client: Client, project: str, digest: str) -> bool:
    from nodus.client import errors

    try:
        await client.request("HEAD", f"{API}/namespaces/{project}/blobs/{digest}")
    except errors.NotFound:
        return False
    return True


async def pull_revision(client: Client, project: str, name: str, number: int | None, target: Path) -> int:
    """Write revision ``number`` (None: the latest) of Workspace ``name`` into ``target``; its number."""
    from nodus.apis.v1 import objects
    from nodus.apis.v1.workspace import MANIFEST

    if number is None:
        workspace = objects.read(objects.Workspace, (await client.request("GET", _path(project, name))).json())
        number = workspace.status.latest_revision if workspace.status else 0
        if not number:
            raise SystemExit(f"nodus workspaces pull: workspace {name} has no revisions yet; push one first")
    where = f"{_path(project, name)}/revisions/{number}"
    with tempfile.TemporaryDirectory(
        prefix=".nodus-pull-", dir=target.parent if target.parent.exists() else None
    ) as tmp:
        download = Path(tmp) / "revision"
        async with client.open_download(where) as response:
            media = response.headers.get("content-type", "").split(";")[0].strip()
            digest = hashlib.sha256()
            with download.open("wb") as handle:
                async for piece in response.aiter_bytes():
                    digest.update(piece)
                    handle.write(piece)
        etag = response.headers.get("etag", "").strip('"')
        if etag and etag != "sha256:" + digest.hexdigest():
            raise SystemExit(
                f"nodus workspaces pull: revision {number} arrived damaged (not {etag}); nothing was written"
            )
        if media == MANIFEST:
            await _write_manifest(client, project, download, target)
        else:
            await asyncio.to_thread(_unpack, download, target, media)
    return number


async def _write_manifest(client: Client, project: str, download: Path, target: Path) -> None:
    from nodus.agent import restoring, workspacetrees
    from nodus.agent.manifests import Manifest, ManifestInvalid

    body = await asyncio.to_thread(_read_manifest, download)
    try:
        manifest = Manifest.from_bytes(body)
        manifest = workspacetrees.subtree(manifest, "")
        restoration = await asyncio.to_thread(workspacetrees.restoration, manifest, target)
    except (ManifestInvalid, restoring.RestoreFailed) as exc:
        raise SystemExit(f"nodus workspaces pull: the revision is refused, nothing was written: {exc}") from None
    gate = asyncio.Semaphore(CONCURRENCY)

    async def fetch(digest: str) -> None:
        async with gate:
            pieces = [p async for p in client.download(f"{API}/namespaces/{project}/blobs/{digest}")]
            await asyncio.to_thread(restoration.write, digest, b"".join(pieces))

    try:
        await asyncio.gather(*(fetch(d) for d in restoration.needed()))
        await asyncio.to_thread(restoration.commit)
    except restoring.RestoreFailed as exc:
        raise SystemExit(f"nodus workspaces pull: nothing was written: {exc}") from None
    finally:
        await asyncio.to_thread(restoration.abort)


def _read_manifest(download: Path) -> bytes:
    if download.stat().st_size > MAX_MANIFEST_BYTES:
        raise SystemExit("nodus workspaces pull: the revision's manifest is larger than a manifest may be")
    return download.read_bytes()


def _unpack(download: Path, target: Path, media: str) -> None:
    from nodus.agent import archives

    try:
        if archives.is_archive(media):
            archives.unpack(download, target, media)
        else:  # a single-file output: the file inside the directory
            target.mkdir(exist_ok=True)
            fd = os.open(target / "output", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as handle, download.open("rb") as source:
                while data := source.read(1 << 20):
                    handle.write(data)
    except archives.ArchiveError as exc:
        raise SystemExit(f"nodus workspaces pull: the revision's archive is refused: {exc}") from None


def _target(args: argparse.Namespace) -> tuple[ClientConfig, str]:
    from nodus.client import ClientConfig

    config = ClientConfig.from_kubeconfig(kubeconfig_path(args))
    project = args.project or config.namespace
    if not project:
        raise SystemExit("name the workspace's project with --project P (the kubeconfig's context names none)")
    return config, project


def _path(project: str, name: str) -> str:
    return f"{API}/namespaces/{project}/workspaces/{name}"
