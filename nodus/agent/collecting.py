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

Failures to collect raise :class:`~nodus.agent.materializing.PrepareFailed` with reason
``OutputCollectionFailed`` (the attempt fails as a customer failure).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from nodus.agent import archives, sinks
from nodus.agent.layout import NODUS_DIRECTORIES, SANDBOX_NODUS_DIR, AttemptLayout
from nodus.agent.materializing import Prepared, PrepareFailed
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


def host_path(path: str, layout: AttemptLayout, prepared: Prepared) -> Path | None:
    """The host path of sandbox path ``path``, if it is on a directory that outlives the program."""
    sandbox = PurePosixPath(path)
    for name in NODUS_DIRECTORIES:
        top = PurePosixPath(SANDBOX_NODUS_DIR) / name
        if sandbox == top or sandbox.is_relative_to(top):
            return layout.nodus_dir / name / sandbox.relative_to(top)
    # The longest mount wins: a Volume mounted inside the working directory hides that part of it.
    for prefix in sorted(prepared.persistent, key=len, reverse=True):
        top = PurePosixPath(prefix)
        if sandbox == top or sandbox.is_relative_to(top):
            return prepared.persistent[prefix] / sandbox.relative_to(top)
    return None


async def collect(client: Client, attempt: Object, layout: AttemptLayout, prepared: Prepared) -> Collected:
    spec = attempt.get("spec") or {}
    namespace = str(attempt["metadata"]["namespace"])
    collected = Collected()
    staging = layout.directory / "collect"
    staging.mkdir(exist_ok=True)
    outputs = [o for o in spec.get("outputs") or [] if _collected_here(o, spec)]
    declared = [(str(o["name"]), str(o["path"]), o.get("sink")) for o in outputs]
    if any(layout.outputs.iterdir()) and _collected_here({}, spec):
        declared.append((IMPLICIT_OUTPUT, f"{SANDBOX_NODUS_DIR}/outputs", None))
    connections = {str(c["name"]): c for c in spec.get("connections") or []}
    for name, path, sink in declared:
        source = host_path(path, layout, prepared)
        if source is None or not await asyncio.to_thread(source.exists):
            where = "does not exist" if source is not None else "is not on a directory that outlives the program"
            raise PrepareFailed(
                "OutputCollectionFailed",
                f"Output {name}: {path} {where}. Write outputs under /nodus/outputs, the working directory or a "
                "writable Volume (/tmp is private to the sandbox).",
            )
        output = await _commit(client, namespace, name, path, source, staging)
        if spec.get("gang"):
            output["rank"] = int(spec.get("rank") or 0)
        if sink:
            output["sink"] = await _load(sink, source, connections, prepared)
        collected.outputs.append(output)
    for mount in spec.get("volumes") or []:
        if not mount.get("readOnly"):
            collected.volumes.append(await _new_revision(client, namespace, attempt, mount, prepared, staging))
    return collected


def _collected_here(output: Object, spec: Object) -> bool:
    """A gang rank collects an output only when it is rank 0 or the output says ``fromRanks: All``; the implicit
    ``outputs`` is rank 0's. Each gang rank's output is committed with its ``rank`` (``?rank=N`` downloads it)."""
    if not spec.get("gang"):
        return True
    return int(spec.get("rank") or 0) == 0 or output.get("fromRanks") == "All"


async def _commit(client: Client, namespace: str, name: str, path: str, source: Path, staging: Path) -> Object:
    """Upload one output. A directory is packed first (its digest comes with the archive); a file is
    hashed while it is sent, and the server's digest of what it stored must be the same."""
    hasher = hashlib.sha256()
    if await asyncio.to_thread(source.is_dir):
        packed = staging / f"{name}.tar.zst"
        digest, size = await asyncio.to_thread(archives.pack_to_file, source, packed)
        media_type, upload, expected = archives.TAR_ZSTD, packed, f"sha256:{digest}"
    else:
        media_type, upload, expected = OCTET_STREAM, source, None
    try:
        stored = await client.upload_blob(namespace, _chunks(upload, hasher), media_type, digest=expected)
    except errors.APIError as exc:
        raise PrepareFailed("OutputCollectionFailed", f"Output {name}: the upload failed: {exc}") from None
    finally:
        if upload.parent == staging:
            upload.unlink(missing_ok=True)
    if expected is None:
        digest, size = hasher.hexdigest(), int(stored.get("size") or 0)
        if stored.get("digest") != f"sha256:{digest}":
            raise PrepareFailed(
                "OutputCollectionFailed",
                f"Output {name}: the server stored {stored.get('digest')}, but sha256:{digest} was sent "
                "(the file changed while it was uploaded, or the bytes were damaged in transit).",
            )
    return {"name": name, "path": path, "sha256": digest, "size": size}


async def _load(sink: Object, source: Path, connections: dict[str, Object], prepared: Prepared) -> Object:
    connection = connections.get(str(sink.get("connection"))) or {}
    secret = connection.get("secret") or {}
    dsn = prepared.secret_values.get(str(secret.get("name")), {}).get(str(secret.get("key") or "dsn"))
    if dsn is None:
        return {"phase": "Failed", "message": f"Connection {sink.get('connection')} has no DSN in its Secret."}
    if await asyncio.to_thread(source.is_dir):
        return {"phase": "Failed", "message": "A sink loads a file (CSV, JSON lines or Parquet), not a directory."}
    try:
        rows = await sinks.load(
            dsn.decode("utf-8"), str(sink["table"]), source, sink.get("mode") or "Append", policy=prepared.reach
        )
    except sinks.SinkError as exc:
        return {"phase": "Failed", "message": str(exc)}
    return {"phase": "Loaded", "rows": rows}


async def _new_revision(
    client: Client, namespace: str, attempt: Object, mount: Object, prepared: Prepared, staging: Path
) -> Object:
    volume = str(mount["volume"])
    host = prepared.persistent[str(mount["mountPath"])]
    packed = staging / f"volume-{volume}.tar.zst"
    await asyncio.to_thread(archives.pack_to_file, host, packed)
    path = f"/apis/nodus.dev/v1/namespaces/{namespace}/volumes/{volume}/revisions"
    spec = attempt.get("spec") or {}
    params = {"source": f"job {spec.get('job')} index {spec.get('index')} attempt {spec.get('number')}"}
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
    return {"volume": volume, "mountPath": mount["mountPath"], "readOnly": False, "revision": number}


async def _chunks(path: Path, hasher: Any | None = None) -> AsyncIterator[bytes]:
    """The file's bytes in 1 MiB reads (off the event loop), fed to ``hasher`` when given."""
    with path.open("rb") as handle:
        while chunk := await asyncio.to_thread(handle.read, _READ_BYTES):
            if hasher is not None:
                hasher.update(chunk)
            yield chunk
