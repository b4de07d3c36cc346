"""A ``fromWorkspace`` input put in place: one subdirectory of the pinned Workspace revision, at /nodus/inputs/NAME.

The Job controller pinned the revision at admission (the Attempt's ``inputs[].blob`` and ``workspace``), so
every attempt, replacements included, mounts the same files however often the Workspace was pushed since.
The revision is one of two things, told apart by the blob's media type:

* a workspace manifest (pushed from a directory): the manifest is fetched, checked against its digest and
  in full (``nodus.agent.manifests``), cut down to the subdirectory (``workspacetrees.subtree``) and written
  by :class:`nodus.agent.restoring.Restoration`: only that subdirectory's chunks are fetched, each checked
  against its digest, links recreated but never followed, and the target appears only once complete;
* a Job's output (an archive): unpacked beside the target by the agent's unpacker (which refuses links,
  devices and ``..`` names), and the subdirectory moved into place.

A subdirectory the revision does not have, or a revision refused as unsafe, fails the attempt (the same
revision would fail the same way); the errors say which input and revision.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import stat
from pathlib import Path

from nodus.agent import archives, restoring, unpacking, workspacetrees
from nodus.agent.manifests import Manifest, ManifestInvalid
from nodus.apis.v1.attempt import PinnedInput
from nodus.apis.v1.workspace import MANIFEST
from nodus.client import Client, errors

CONCURRENCY = 4
MAX_MANIFEST_BYTES = 256 * 1024 * 1024


class WorkspaceUnavailable(Exception):
    """The revision cannot be mounted; ``reason`` is the Attempt's status reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


async def materialize(
    client: Client, namespace: str, item: PinnedInput, target: Path, unpacker: unpacking.Unpacker
) -> None:
    """Put the pinned subdirectory of ``item``'s Workspace revision at ``target`` (replacing what is there)."""
    assert item.blob is not None and item.workspace is not None
    blob, pinned = item.blob, item.workspace
    what = f"input {item.name} (Workspace {pinned.name} revision {pinned.revision})"
    path = f"/apis/nodus.dev/v1/namespaces/{namespace}/blobs/{blob}"
    try:
        head = await client.request("HEAD", path)
        media = head.headers.get("content-type", "").split(";")[0].strip()
        if media == MANIFEST:
            await _from_manifest(client, namespace, blob, pinned.path or "", target)
        else:
            await _from_archive(client, path, media, pinned.path or "", target, unpacker)
    except errors.NotFound:
        raise WorkspaceUnavailable("InputUnavailable", f"The content of {what} ({blob}) is gone.") from None
    except errors.APIError as exc:
        raise WorkspaceUnavailable("InputFetchFailed", f"Could not fetch {what} ({blob}): {exc}") from None
    except workspacetrees.SubdirectoryMissing as exc:
        raise WorkspaceUnavailable("InputUnavailable", f"The path of {what}: {exc}.") from None
    except (ManifestInvalid, restoring.RestoreFailed, archives.ArchiveError) as exc:
        raise WorkspaceUnavailable("ArchiveUnsafe", f"The content of {what} ({blob}) was not mounted: {exc}") from None


async def _from_manifest(client: Client, namespace: str, blob: str, subdirectory: str, target: Path) -> None:
    blobs = f"/apis/nodus.dev/v1/namespaces/{namespace}/blobs"
    body = await _read(client, f"{blobs}/{blob}", MAX_MANIFEST_BYTES)
    if "sha256:" + hashlib.sha256(body).hexdigest() != blob:
        raise restoring.RestoreFailed("the manifest's bytes do not hash to the pinned digest")
    manifest = workspacetrees.subtree(Manifest.from_bytes(body), subdirectory)
    await asyncio.to_thread(unpacking.clear, target)
    restoration = await asyncio.to_thread(workspacetrees.restoration, manifest, target)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def fetch(digest: str) -> None:
        async with gate:
            data = await _read(client, f"{blobs}/{digest}", manifest.chunk_size)
            await asyncio.to_thread(restoration.write, digest, data)

    try:
        await asyncio.gather(*(fetch(d) for d in restoration.needed()))
        await asyncio.to_thread(restoration.commit)
    finally:
        await asyncio.to_thread(restoration.abort)


async def _from_archive(
    client: Client, path: str, media: str, subdirectory: str, target: Path, unpacker: unpacking.Unpacker
) -> None:
    token = secrets.token_hex(4)
    download = target.parent / f".{target.name}.{token}.download"
    unpacked = target.parent / f".{target.name}.{token}.unpacked"
    try:
        fd = os.open(download, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            async for piece in client.download(path):
                handle.write(piece)
        if not archives.is_archive(media):
            raise workspacetrees.SubdirectoryMissing(
                "the revision is a single file (an output that is not a directory)"
            )
        await unpacker.unpack(download, unpacked, media)
        source = await asyncio.to_thread(_descend, unpacked, subdirectory)
        await asyncio.to_thread(unpacking.clear, target)
        await asyncio.to_thread(os.rename, source, target)
    finally:
        await asyncio.to_thread(download.unlink, missing_ok=True)
        await asyncio.to_thread(unpacking.clear, unpacked)


def _descend(top: Path, subdirectory: str) -> Path:
    """``top/subdirectory``, each component a directory and none a link."""
    here = top
    for part in [p for p in subdirectory.split("/") if p not in ("", ".")]:
        if part == "..":
            raise workspacetrees.SubdirectoryMissing(f"{subdirectory} leaves the home")
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            raise workspacetrees.SubdirectoryMissing(
                f"{subdirectory} does not exist in the workspace revision"
            ) from None
        if not stat.S_ISDIR(mode):
            raise workspacetrees.SubdirectoryMissing(f"{subdirectory} is not a directory in the workspace revision")
    return here


async def _read(client: Client, path: str, limit: int) -> bytes:
    pieces: list[bytes] = []
    size = 0
    async for piece in client.download(path):
        size += len(piece)
        if size > limit:
            raise restoring.RestoreFailed(f"{path} is larger than {limit} bytes")
        pieces.append(piece)
    return b"".join(pieces)
