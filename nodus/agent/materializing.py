"""Before the program: Secrets, inputs, Volumes and source put in place for one attempt, as pinned.

Everything comes from the Attempt's spec, which the Job controller pinned at admission: Secrets by
``(uid, version)``, outputs and Volume revisions by blob digest, URL and bucket inputs by SHA-256
when one is known. :func:`prepare` fetches each into the attempt's layout and returns what the
runtime needs (extra mounts, the Secret env) and what the Attempt's status reports (each input's
verified digest, the resolved commit).

Where things land (host side -> inside the sandbox):

* Secret ``NAME`` key ``KEY`` -> ``/nodus/secrets/NAME/KEY`` (files 0400 in a 0700 tree, the agent's
  user only); ``secretKeyRef`` env values are decoded as UTF-8 into the program's environment.
* Connection ``NAME`` of ``spec.connections`` -> ``/nodus/connections/NAME/`` (read-only) and
  ``NODUS_CONNECTION_<NAME>_*`` variables (:func:`_expose`).
* input ``NAME`` -> ``/nodus/inputs/NAME``: a file, or a directory for an archived output, a
  Volume revision or the pinned subdirectory of a Workspace revision (``nodus.agent.workspaceinputs``;
  ``inputs`` is read-only inside).
* Volume mount ``i`` -> its ``mountPath``: unpacked from the pinned revision (read-only), or from the
  latest (writable; packed into a new revision when the attempt succeeds, see ``collecting``).
* source -> its path (default the working directory).

A failure raises :class:`PrepareFailed` with the Attempt reason to report: ``InputDigestMismatch``,
``SecretChanged`` and ``SourceUnavailable`` fail the Job at once (the same content would fail the
same way), ``InputFetchFailed`` counts as a customer failure and is retried. ``DestinationRefused``
(a URL, bucket endpoint or repository the agent must not reach, ADR 0032) fails the Job at once too, as
``ArchiveUnsafe`` does (a source blob, Volume revision or input archive that ``nodus.agent.archives`` refuses:
a link, a device, a ``..`` name, or past its bounds; ADR 0031). Files the agent writes into the program's
tree (Secrets, Connections) replace whatever is at their names, never write through it (``hostfiles``).
Values of Secrets are never logged and never part of a message.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from nodus.agent import archives, fetching, hostfiles, source, unpacking, workspaceinputs
from nodus.agent.layout import SANDBOX_NODUS_DIR, AttemptLayout
from nodus.agent.runtime import Mount
from nodus.apimachinery import destinations
from nodus.apis.v1 import objects
from nodus.apis.v1.attempt import AttemptSource, AttemptSpec, BucketObject, PinnedConnection, PinnedInput
from nodus.apis.v1.jobspec import EnvVar
from nodus.client import Client, errors

Object = dict[str, Any]


class PrepareFailed(Exception):
    """The attempt cannot start; ``reason`` is the Attempt's status reason, the message says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Prepared:
    """What the runtime and the status need from the preparation."""

    env: dict[str, str] = field(default_factory=dict, repr=False)
    sidecar_env: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)
    mounts: list[Mount] = field(default_factory=list)
    inputs: list[Object] = field(default_factory=list)
    source: Object | None = None
    # Host directory of each sandbox path outside /nodus that outlives the program (for outputs).
    persistent: dict[str, Path] = field(default_factory=dict)
    # The pinned Secrets' values, for sinks' DSNs; never printed (repr=False).
    secret_values: dict[str, dict[str, bytes]] = field(default_factory=dict, repr=False)
    # What the agent may connect to for this attempt (inputs, source, sinks).
    reach: destinations.Policy = field(default_factory=destinations.Policy)


async def prepare(
    client: Client,
    attempt: objects.Attempt,
    layout: AttemptLayout,
    working_dir: str,
    trust_ca: str | None = None,
    *,
    reach: destinations.Policy,
    unpacker: unpacking.Unpacker | None = None,
) -> Prepared:
    """Fetch everything ``attempt`` reads into ``layout``, from destinations ``reach`` allows; raises
    PrepareFailed. Archives are unpacked by ``unpacker`` (default: in this process)."""
    unpacker = unpacker or unpacking.Unpacker()
    spec = attempt.spec
    namespace = str(attempt.metadata.namespace)
    prepared = Prepared(persistent={working_dir: layout.workdir}, reach=reach)
    values = await _secrets(client, namespace, spec, layout)
    prepared.secret_values = values
    prepared.env = _secret_env(spec.env, values)
    prepared.sidecar_env = {sidecar.name: _secret_env(sidecar.env, values) for sidecar in spec.sidecars or ()}
    connections = {c.name: c for c in spec.connections or ()}
    for connection in connections.values():
        if connection.exposed:
            prepared.env.update(_expose(connection, values, layout))
    for item in spec.inputs or ():
        prepared.inputs.append(
            await _input(client, namespace, item, layout, connections, values, trust_ca, reach, unpacker)
        )
    for number, mount in enumerate(spec.volumes or ()):
        host = layout.directory / "volumes" / str(number)
        await _unpack_blob(client, namespace, mount.blob, host, f"Volume {mount.volume}", unpacker)
        prepared.mounts.append(Mount(host, mount.mount_path, mount.read_only))
        if not mount.read_only:
            prepared.persistent[mount.mount_path] = host
    if spec.source:
        prepared.source = await _source(
            client, namespace, spec.source, layout, working_dir, prepared, trust_ca, unpacker
        )
    return prepared


async def _secrets(
    client: Client, namespace: str, spec: AttemptSpec, layout: AttemptLayout
) -> dict[str, dict[str, bytes]]:
    values: dict[str, dict[str, bytes]] = {}
    for pinned in spec.secrets or ():
        name = pinned.name
        path = f"/apis/nodus.dev/v1/namespaces/{namespace}/secrets/{name}/values"
        params = {"version": str(pinned.version), "uid": pinned.uid}
        try:
            response = await client.request("GET", path, params=params)
        except errors.NotFound as exc:
            raise PrepareFailed("SecretChanged", f'Secret "{name}" version {pinned.version}: {exc}') from None
        data = response.json().get("data") or {}
        try:
            values[name] = {str(k): base64.b64decode(v, validate=True) for k, v in data.items()}
        except (binascii.Error, ValueError):
            raise PrepareFailed("SecretChanged", f'Secret "{name}" came back malformed.') from None
        try:
            await asyncio.to_thread(_write_files, layout.secrets, f"{SANDBOX_NODUS_DIR}/secrets", name, values[name])
        except hostfiles.UnsafePath as exc:
            raise PrepareFailed("SecretChanged", f'Secret "{name}" cannot be written as files: {exc}') from None
    return values


def _write_files(base: Path, shown: str, name: str, files: dict[str, bytes]) -> None:
    """Write ``files`` (mode 0400) into ``base/name/`` (0700), a directory of the agent's in the program's tree.

    An agent restarted mid-attempt writes them again where the program may have planted links: whatever is at
    those names is replaced, never written through, and a link or file where the directory belongs is removed
    (``nodus.agent.hostfiles``, ADR 0031)."""
    directory = hostfiles.Location(base, (name,), shown)
    try:
        fd = hostfiles.open_directory(directory, create=True, mode=0o700)
    except hostfiles.UnsafePath:
        hostfiles.remove(directory)
        fd = hostfiles.open_directory(directory, create=True, mode=0o700)
    try:
        for key, value in files.items():
            if not hostfiles.is_name(key):
                raise hostfiles.UnsafePath(f"{directory}/{key}", "is not a file name")
            hostfiles.write_at(fd, key, value, 0o400, f"{directory}/{key}")
    finally:
        os.close(fd)


def _secret_env(items: list[EnvVar] | None, values: dict[str, dict[str, bytes]]) -> dict[str, str]:
    """The ``secretKeyRef`` variables of ``items`` (an env list), decoded from the pinned values."""
    env: dict[str, str] = {}
    for item in items or ():
        if item.value_from is None:
            continue
        name, key = item.value_from.secret_key_ref.name, item.value_from.secret_key_ref.key
        try:
            env[item.name] = values[name][key].decode("utf-8")
        except KeyError:
            raise PrepareFailed("SecretChanged", f'Secret "{name}" key "{key}" is not in the pinned version.') from None
        except UnicodeDecodeError:
            raise PrepareFailed(
                "InputFetchFailed",
                f'Secret "{name}" key "{key}" is not UTF-8 text, so it cannot be an environment variable; '
                f"read it from /nodus/secrets/{name}/{key} instead.",
            ) from None
    return env


# What an exposed Connection gives the program: file name (and variable suffix) -> where it comes from.
_S3_FIELDS = {"endpoint": "endpoint", "region": "region", "bucket": "bucket"}
_S3_CREDENTIALS = {
    "accessKeyID": "ACCESS_KEY_ID",
    "secretAccessKey": "SECRET_ACCESS_KEY",
    "sessionToken": "SESSION_TOKEN",
}


def connection_variable(name: str, field: str) -> str:
    """``NODUS_CONNECTION_<NAME>_<FIELD>``: the name upper-cased, anything but letters and digits as ``_``."""
    clean = "".join(c if c.isalnum() else "_" for c in name.upper())
    return f"NODUS_CONNECTION_{clean}_{field}"


def _expose(
    connection: PinnedConnection, secrets: dict[str, dict[str, bytes]], layout: AttemptLayout
) -> dict[str, str]:
    """Write ``/nodus/connections/<name>/`` (0400 files) and return its variables (ADR 0046 §28).

    Postgres (Neon, Supabase): ``type`` and ``dsn``, ``NODUS_CONNECTION_<NAME>_DSN``. S3: ``type``,
    ``endpoint``, ``region``, ``bucket``, ``accessKeyID``, ``secretAccessKey`` (and ``sessionToken``),
    ``NODUS_CONNECTION_<NAME>_ENDPOINT``, ``..._REGION``, ``..._BUCKET``, ``..._ACCESS_KEY_ID``,
    ``..._SECRET_ACCESS_KEY`` (``..._SESSION_TOKEN``).
    """
    name, kind, secret = connection.name, connection.type, connection.secret
    values = secrets.get(secret.name, {}) if secret else {}
    files: dict[str, bytes] = {"type": kind.encode()}
    env: dict[str, str] = {connection_variable(name, "TYPE"): kind}
    if kind == "S3":
        for field, source in _S3_FIELDS.items():
            if value := (connection.s3 or {}).get(source):
                files[field] = str(value).encode()
                env[connection_variable(name, field.upper())] = str(value)
        for field, suffix in _S3_CREDENTIALS.items():
            if field in values:
                files[field] = values[field]
                env[connection_variable(name, suffix)] = values[field].decode("utf-8", "replace")
    else:
        dsn = values.get((secret.key if secret else None) or "dsn")
        if dsn is not None:
            files["dsn"] = dsn
            env[connection_variable(name, "DSN")] = dsn.decode("utf-8", "replace")
    try:
        _write_files(layout.connections, f"{SANDBOX_NODUS_DIR}/connections", name, files)
    except hostfiles.UnsafePath as exc:
        raise PrepareFailed("SecretChanged", f"Connection {name} cannot be written as files: {exc}") from None
    return env


async def _input(
    client: Client,
    namespace: str,
    item: PinnedInput,
    layout: AttemptLayout,
    connections: dict[str, PinnedConnection],
    secrets: dict[str, dict[str, bytes]],
    trust_ca: str | None,
    reach: destinations.Policy,
    unpacker: unpacking.Unpacker,
) -> Object:
    name = item.name
    target = layout.inputs / name
    expected = item.sha256
    try:
        if item.workspace is not None:
            await workspaceinputs.materialize(client, namespace, item, target, unpacker)
            digest = str(expected or "")
        elif item.url:
            digest = await fetching.download(item.url, target, expected, policy=reach, ca_file=trust_ca)
        elif item.bucket:
            digest = await _bucket(item.bucket, target, expected, connections, secrets, reach)
        else:
            await _unpack_blob(client, namespace, item.blob, target, f"input {name}", unpacker)
            digest = str(expected or "")
    except destinations.Refused as exc:
        raise PrepareFailed("DestinationRefused", f"Input {name}: {exc}; {exc.fix}") from None
    except fetching.DigestMismatch as exc:
        raise PrepareFailed("InputDigestMismatch", f"Input {name}: {exc}") from None
    except fetching.FetchError as exc:
        raise PrepareFailed("InputFetchFailed", f"Input {name}: {exc}") from None
    except workspaceinputs.WorkspaceUnavailable as exc:
        raise PrepareFailed(exc.reason, str(exc)) from None
    return {"name": name, "sha256": digest} if digest else {"name": name}


async def _bucket(
    bucket: BucketObject,
    target: Path,
    expected: str | None,
    connections: dict[str, PinnedConnection],
    secrets: dict[str, dict[str, bytes]],
    reach: destinations.Policy,
) -> str:
    connection = connections[bucket.connection]
    s3 = connection.s3 or {}
    credentials = secrets.get(connection.secret.name, {}) if connection.secret else {}
    bucket_name, key = fetching.parse_s3_uri(bucket.uri)
    token = credentials.get("sessionToken")
    return await fetching.download_s3(
        endpoint=str(s3.get("endpoint") or "https://s3.amazonaws.com"),
        region=str(s3.get("region") or "us-east-1"),
        bucket=bucket_name,
        key=key,
        access_key=credentials.get("accessKeyID", b"").decode(),
        secret_key=credentials.get("secretAccessKey", b"").decode(),
        session_token=token.decode() if token else None,
        destination=target,
        expected_sha256=expected,
        policy=reach,
    )


async def _unpack_blob(
    client: Client, namespace: str, blob: str | None, target: Path, what: str, unpacker: unpacking.Unpacker
) -> None:
    """Unpack blob ``sha256:...`` at ``target`` (a directory for archives, else a file); none: empty dir.

    Whatever an earlier run of the attempt left at ``target`` (an agent restarted mid-attempt) is removed
    first, without following links. An archive ``unpacker`` refuses fails with ``ArchiveUnsafe``."""
    if not blob:
        await asyncio.to_thread(target.mkdir, parents=True, exist_ok=True)
        return
    path = f"/apis/nodus.dev/v1/namespaces/{namespace}/blobs/{blob}"
    target.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name (O_EXCL, never a link left there), beside the target: on its file system, out of the sandbox.
    descriptor, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".download")
    download = Path(name)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            head = await client.request("HEAD", path)
            media_type = head.headers.get("content-type", "application/octet-stream").split(";")[0].strip()
            async for chunk in client.download(path):
                handle.write(chunk)
        await asyncio.to_thread(unpacking.clear, target)
        await unpacker.unpack(download, target, media_type)
    except archives.ArchiveError as exc:
        raise PrepareFailed("ArchiveUnsafe", f"The content of {what} ({blob}) was not unpacked: {exc}") from None
    except errors.NotFound:
        raise PrepareFailed("InputUnavailable", f"The content of {what} ({blob}) is gone.") from None
    except errors.APIError as exc:
        raise PrepareFailed("InputFetchFailed", f"Could not fetch {what} ({blob}): {exc}") from None
    finally:
        await asyncio.to_thread(download.unlink, missing_ok=True)


async def _source(
    client: Client,
    namespace: str,
    spec: AttemptSource,
    layout: AttemptLayout,
    working_dir: str,
    prepared: Prepared,
    trust_ca: str | None,
    unpacker: unpacking.Unpacker,
) -> Object:
    path = spec.path or working_dir
    if PurePosixPath(path) == PurePosixPath(working_dir):
        host = layout.workdir
    else:
        if PurePosixPath(path).is_relative_to(SANDBOX_NODUS_DIR):
            raise PrepareFailed("SourceUnavailable", f"source path {path} is inside /nodus, which Nodus owns.")
        host = layout.directory / "source"
        prepared.mounts.append(Mount(host, path, False))
        prepared.persistent[path] = host
    if spec.blob:
        try:
            await _unpack_blob(client, namespace, spec.blob, host, "the source blob", unpacker)
        except PrepareFailed as exc:
            reason = exc.reason if exc.reason == "ArchiveUnsafe" else "SourceUnavailable"
            raise PrepareFailed(reason, str(exc)) from None
        return {"blob": spec.blob}
    git = spec.git
    if git is None:  # the server pins exactly one of blob and git
        raise PrepareFailed("SourceUnavailable", "The attempt's source names neither a blob nor a repository.")
    try:
        commit = await source.checkout_git(git.repo, git.ref or None, host, policy=prepared.reach, ca_file=trust_ca)
    except destinations.Refused as exc:
        raise PrepareFailed("DestinationRefused", f"Source {source.scrub(git.repo)}: {exc}; {exc.fix}") from None
    except source.SourceError as exc:
        raise PrepareFailed("SourceUnavailable", f"Could not check out {git.repo}: {exc}") from None
    return {"commit": commit}
