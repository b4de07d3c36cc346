"""After the program succeeds: outputs committed, sinks loaded, writable Volumes given a new revision.

Called once the main program exited 0 and before the attempt reports ``Succeeded``, so that the
success report carries the committed outputs (one status write: whoever sees the index succeed sees
its outputs). Each output is uploaded as a content-addressed blob (``POST .../blobs``), streamed
from disk: a directory is first archived to a tar.zst file beside the attempt (never in memory) and
sent with its digest, which the server checks; a file is sent as it is, hashed on the way, and the
digest the server computed of what it stored must match.

Outputs: every ``spec.outputs[]`` entry, by its path inside the sandbox, plus the implicit
``outputs`` for whatever is under ``/nodus/outputs`` (when anything is). A path must be on a
directory that outlives the program: under ``/nodus/{outputs,state,scratch}``, the working
directory, a writable Volume or the source checkout; ``/tmp`` is private to the sandbox and gone.

A sink loads a file output (CSV, JSON lines or Parquet, see ``sinks``) into a table through its
Postgres Connection in one transaction; its result (``Loaded`` and rows, or ``Failed`` and why) is
reported on the output and never fails the index: the output itself is committed either way.

Paths and links (ADR 0031): a path is resolved below the host directory behind its sandbox mount, one
component at a time without following links (``nodus.agent.hostfiles``); a path with a ``.``, ``..`` or
empty component, or that leads through a symbolic link, or that names anything but a regular file or a
directory, fails the attempt with ``OutputPathUnsafe`` and nothing of it is read. A directory output is
packed without following links: a link in it is a link member of the archive, never its target. The file
a sink loads is the one collection opened.

Other failures to collect raise :class:`~nodus.agent.materializing.PrepareFailed` with reason
``OutputCollectionFailed`` (the attempt fails as a customer failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from nodus.agent import archives, hostfiles, sinks
from nodus.agent.layout import NODUS_DIRECTORIES, SANDBOX_NODUS_DIR, AttemptLayout
from nodus.agent.materializing import Prepared, PrepareFailed
from nodus.apis.v1 import objects
from nodus.apis.v1.attempt import AttemptSpec, PinnedConnection, PinnedVolume
from nodus.apis.v1.jobdata import OutputSink
from nodus.client import Client, errors

Object = dict[str, Any]
log = logging.getLogger("nodus.agent")

IMPLICIT_OUTPUT = "outputs"
OCTET_STREAM = "application/octet-stream"
_READ_BYTES = 1 << 20


@dataclass
class Collected:
    outputs: list[Object] = field(default_factory=list)
    volumes: list[Object] = field(default_factory=list)


def locate(path: str, layout: AttemptLayout, prepared: Prepared) -> hostfiles.Location | None:
    """Where sandbox path ``path`` is on the host, if it is on a directory that outlives the program: below the
    host directory behind its mount (a trusted base), each component to be opened without following links.

    Raises :class:`~nodus.agent.hostfiles.UnsafePath` for a path that is not absolute and normalised (an
    empty, ``.`` or ``..`` component), which the API refuses and the agent never resolves."""
    parts = path.split("/")[1:]
    if not path.startswith("/") or (path != "/" and not all(hostfiles.is_name(part) for part in parts)):
        raise hostfiles.UnsafePath(path, "is not an absolute path without '.', '..' or empty components")
    sandbox = PurePosixPath(path)
    tops = [(f"{SANDBOX_NODUS_DIR}/{name}", layout.nodus_dir / name) for name in NODUS_DIRECTORIES]
    # The longest mount wins: a Volume mounted inside the working directory hides that part of it.
    tops += sorted(prepared.persistent.items(), key=lambda item: len(item[0]), reverse=True)
    for top, host in tops:
        if sandbox == PurePosixPath(top) or sandbox.is_relative_to(top):
            return hostfiles.Location(host, sandbox.relative_to(top).parts, top)
    return None


async def collect(client: Client, attempt: objects.Attempt, layout: AttemptLayout, prepared: Prepared) -> Collected:
    spec = attempt.spec
    namespace = str(attempt.metadata.namespace)
    collected = Collected()
    staging = layout.directory / "collect"
    staging.mkdir(exist_ok=True)
    declared: list[tuple[str, str, OutputSink | None]] = [
        (o.name, o.path, o.sink) for o in spec.outputs or () if _collected_here(o.from_ranks, spec)
    ]
    if any(layout.outputs.iterdir()) and _collected_here("Zero", spec):
        declared.append((IMPLICIT_OUTPUT, f"{SANDBOX_NODUS_DIR}/outputs", None))
    connections = {c.name: c for c in spec.connections or ()}
    for name, path, sink in declared:
        fd, status = await asyncio.to_thread(_open_output, name, path, layout, prepared)
        try:
            output = await _commit(client, namespace, name, path, fd, status, staging)
            if spec.gang:
                output["rank"] = spec.rank or 0
            if sink:
                output["sink"] = await _load(sink, fd, status, path, staging, connections, prepared)
        finally:
            os.close(fd)
        collected.outputs.append(output)
    for mount in spec.volumes or ():
        if not mount.read_only:
            collected.volumes.append(await _new_revision(client, namespace, spec, mount, prepared, staging))
    return collected


def _open_output(name: str, path: str, layout: AttemptLayout, prepared: Prepared) -> tuple[int, os.stat_result]:
    """The output's regular file or directory, opened without following a link; PrepareFailed otherwise."""
    try:
        location = locate(path, layout, prepared)
        if location is None:
            raise PrepareFailed(
                "OutputCollectionFailed",
                f"Output {name}: {path} is not on a directory that outlives the program. Write outputs under "
                "/nodus/outputs, the working directory or a writable Volume (/tmp is private to the sandbox).",
            )
        return hostfiles.open_entry(location)
    except FileNotFoundError:
        raise PrepareFailed(
            "OutputCollectionFailed",
            f"Output {name}: {path} does not exist. Write outputs under /nodus/outputs, the working directory or a "
            "writable Volume (/tmp is private to the sandbox).",
        ) from None
    except hostfiles.UnsafePath as exc:
        raise PrepareFailed(
            "OutputPathUnsafe",
            f"Output {name}: {exc}. Outputs are read without following symbolic links: write the file or "
            f"directory itself at {path}.",
        ) from None


def _collected_here(from_ranks: str, spec: AttemptSpec) -> bool:
    """A gang rank collects an output only when it is rank 0 or the output says ``fromRanks: All``; the implicit
    ``outputs`` is rank 0's. Each gang rank's output is committed with its ``rank`` (``?rank=N`` downloads it)."""
    if not spec.gang:
        return True
    return (spec.rank or 0) == 0 or from_ranks == "All"


async def _commit(
    client: Client, namespace: str, name: str, path: str, fd: int, status: os.stat_result, staging: Path
) -> Object:
    """Upload one output, opened as ``fd``. A directory is packed first (its digest comes with the archive); a
    file is hashed while it is sent, and the server's digest of what it stored must be the same."""
    hasher = hashlib.sha256()
    if stat.S_ISDIR(status.st_mode):
        packed = staging / f"{name}.tar.zst"
        try:
            digest, size = await asyncio.to_thread(archives.pack_to_file, fd, packed, shown=path)
        except hostfiles.UnsafePath as exc:
            raise PrepareFailed(
                "OutputPathUnsafe", f"Output {name}: {exc}; outputs are packed without following symbolic links."
            ) from None
        except (archives.ArchiveError, OSError) as exc:
            raise PrepareFailed("OutputCollectionFailed", f"Output {name}: {path} could not be packed: {exc}") from None
        media_type, upload, expected = archives.TAR_ZSTD, _chunks(packed), f"sha256:{digest}"
    else:
        packed, media_type, upload, expected = None, OCTET_STREAM, _descriptor_chunks(fd, hasher), None
    try:
        stored = await client.upload_blob(namespace, upload, media_type, digest=expected)
    except errors.APIError as exc:
        raise PrepareFailed("OutputCollectionFailed", f"Output {name}: the upload failed: {exc}") from None
    finally:
        if packed is not None:
            await asyncio.to_thread(packed.unlink, missing_ok=True)
    if expected is None:
        digest, size = hasher.hexdigest(), int(stored.get("size") or 0)
        if stored.get("digest") != f"sha256:{digest}":
            raise PrepareFailed(
                "OutputCollectionFailed",
                f"Output {name}: the server stored {stored.get('digest')}, but sha256:{digest} was sent "
                "(the file changed while it was uploaded, or the bytes were damaged in transit).",
            )
    return {"name": name, "path": path, "sha256": digest, "size": size}


async def _load(
    sink: OutputSink,
    fd: int,
    status: os.stat_result,
    path: str,
    staging: Path,
    connections: dict[str, PinnedConnection],
    prepared: Prepared,
) -> Object:
    connection = connections.get(sink.connection)
    secret = connection.secret if connection else None
    dsn = prepared.secret_values.get(secret.name, {}).get(secret.key or "dsn") if secret else None
    if dsn is None:
        return {"phase": "Failed", "message": f"Connection {sink.connection} has no DSN in its Secret."}
    if stat.S_ISDIR(status.st_mode):
        return {"phase": "Failed", "message": "A sink loads a file (CSV, JSON lines or Parquet), not a directory."}
    # The sink reads the file collection opened, by a name of the agent's own (a hard link, or a copy).
    staged = staging / "sink" / PurePosixPath(path).name
    await asyncio.to_thread(_stage, fd, staged)
    try:
        rows = await sinks.load(dsn.decode("utf-8"), sink.table, staged, sink.mode, policy=prepared.reach)
    except sinks.SinkError as exc:
        return {"phase": "Failed", "message": str(exc)}
    finally:
        await asyncio.to_thread(_unstage, staged)
    return {"phase": "Loaded", "rows": rows}


def _stage(fd: int, staged: Path) -> None:
    """Give the open file ``fd`` the name ``staged`` in the agent's own directory: a hard link to the same inode
    (``/proc/self/fd`` names the file itself, never a path the program could change), or a copy."""
    staged.parent.mkdir(exist_ok=True)
    try:
        os.link(f"/proc/self/fd/{fd}", staged, follow_symlinks=True)
        return
    except OSError:
        pass  # another file system, or hard links refused: copy
    out = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        offset = 0
        while piece := os.pread(fd, _READ_BYTES, offset):
            os.write(out, piece)
            offset += len(piece)
    finally:
        os.close(out)


def _unstage(staged: Path) -> None:
    staged.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        staged.parent.rmdir()


async def _new_revision(
    client: Client, namespace: str, spec: AttemptSpec, mount: PinnedVolume, prepared: Prepared, staging: Path
) -> Object:
    volume = mount.volume
    host = prepared.persistent[mount.mount_path]
    packed = staging / f"volume-{volume}.tar.zst"
    try:
        await asyncio.to_thread(archives.pack_to_file, host, packed, shown=mount.mount_path)
    except hostfiles.UnsafePath as exc:
        raise PrepareFailed(
            "OutputPathUnsafe", f"Volume {volume}: {exc}; Volumes are packed without following symbolic links."
        ) from None
    path = f"/apis/nodus.dev/v1/namespaces/{namespace}/volumes/{volume}/revisions"
    params = {"source": f"job {spec.job} index {spec.index} attempt {spec.number}"}
    try:
        response = await client.request(
            "POST", path, content=_chunks(packed), params=params, headers={"Content-Type": archives.TAR_ZSTD}
        )
    except errors.APIError as exc:
        raise PrepareFailed("OutputCollectionFailed", f"Volume {volume}: the new revision failed: {exc}") from None
    finally:
        packed.unlink(missing_ok=True)
    revision = (response.json().get("revision") or {}) if response.content else {}
    number = revision.get("revision") if isinstance(revision, dict) else revision
    return {"volume": volume, "mountPath": mount.mount_path, "readOnly": False, "revision": number}


async def _chunks(path: Path) -> AsyncIterator[bytes]:
    """The file's bytes in 1 MiB reads (off the event loop)."""
    with path.open("rb") as handle:
        while chunk := await asyncio.to_thread(handle.read, _READ_BYTES):
            yield chunk


async def _descriptor_chunks(fd: int, hasher: Any) -> AsyncIterator[bytes]:
    """The bytes of the open file ``fd`` from its start, in 1 MiB reads (off the event loop), fed to ``hasher``."""
    offset = 0
    while chunk := await asyncio.to_thread(os.pread, fd, _READ_BYTES, offset):
        offset += len(chunk)
        hasher.update(chunk)
        yield chunk
