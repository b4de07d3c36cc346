"""Admission of a Job's data plane: every object it reads is found and pinned, or the Job waits.

``pin`` is pure: it reads the Job's spec and the objects it names through a ``Lookup`` (the
reconciler's informer caches; tests pass a dict) and returns either :class:`Pins` or a
:class:`Blocked` saying why not yet, or never.

What is pinned, once, at admission (ADR 0046 §20), so that every attempt of the Job, replacements
included, sees the same data:

* Secrets named by ``secrets``, ``env``/``sidecars[].env`` ``secretKeyRef``, ``imagePullSecrets`` and
  the Connections the Job uses: ``(uid, version)``, reported in ``status.secretVersions`` and
  ``status.secretVersionIDs``. A Secret deleted and recreated under the same name has a new uid, so
  the pin no longer matches it and the agent refuses it rather than reading the new values.
* Volumes (inputs and read-only mounts): the revision, given or the latest, with its blob digest.
  A writable mount starts from the latest revision (or empty) and writes a new one on success.
* Workspaces (``fromWorkspace`` inputs): the latest revision, with its blob digest, recorded in
  ``status.inputs`` (``workspaceRevision``); a replacement mounts that revision from the recorded digest,
  however often the Workspace was pushed since. A Workspace that is missing or has no revision makes the
  Job wait.
* Outputs of other Jobs: the committed output's SHA-256. A producer still running makes the Job
  wait (a pipeline can be created all at once); a producer that ended without it fails the Job.
* Connections (bucket inputs, output sinks, ``spec.connections``): their spec, with its Secret pinned;
  those named in ``spec.connections`` are marked ``exposed``: the agent hands their credentials to the
  program (files under ``/nodus/connections/<name>/`` and environment variables).

URL and bucket inputs are verified by the agent at the end of the download; a declared ``sha256``
is the pin, and without one the first attempt's digest becomes it (``status.inputs``).

The Pool of ``placement.pool`` must exist in the Job's project (it is not pinned: its hosts come and
go, and the scheduler places on those it has when an attempt is placed).

Missing objects (a Secret, a Volume, a Connection, a key, the Pool) make the Job wait in ``Pending`` with a
reason naming what is missing: creating it admits the Job. Contradictions that no new object can
fix (a pinned version that does not exist, a Connection of the wrong type) fail the Job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodus.apis.v1 import objects, phases
from nodus.apis.v1.connection import DEFAULT_DSN_KEY, POSTGRES_TYPES, ConnectionSpec
from nodus.apis.v1.jobdata import OutputInput, WorkspaceInput
from nodus.apis.v1.jobspec import JobSpec
from nodus.apis.v1.jobstatus import InputStatus, JobStatus
from nodus.apis.v1.volume import VolumeRevision
from nodus.controllers.jobs import views

Object = dict[str, Any]
Lookup = Callable[[str, str], Object | None]
"""``lookup(plural, name)``: the object of that kind and name in the Job's project, or None."""


@dataclass(frozen=True)
class Blocked:
    """The Job cannot be admitted: it waits (``final`` False) or fails (``final`` True)."""

    reason: str
    message: str
    final: bool = False


@dataclass
class Pins:
    """Everything pinned: ``attempt`` goes into every Attempt's spec, ``status`` into the Job's."""

    secrets: dict[str, Object] = field(default_factory=dict)  # name -> {"uid", "version", "keys"}
    inputs: list[Object] = field(default_factory=list)
    input_status: list[Object] = field(default_factory=list)
    volumes: list[Object] = field(default_factory=list)
    connections: dict[str, Object] = field(default_factory=dict)
    pinned: JobStatus = field(default_factory=JobStatus)  # the Job's status pins, when admitted already

    def status(self) -> Object:
        out: Object = {}
        if self.secrets:
            out["secretVersions"] = {name: pin["version"] for name, pin in sorted(self.secrets.items())}
            out["secretVersionIDs"] = {name: pin["uid"] for name, pin in sorted(self.secrets.items())}
        if self.input_status:
            out["inputs"] = self.input_status
        read_only = [
            {"volume": v["volume"], "mountPath": v["mountPath"], "revision": v["revision"]}
            for v in self.volumes
            if v["readOnly"] and "revision" in v
        ]
        if read_only:
            out["volumes"] = read_only
        return out

    def attempt(self) -> Object:
        out: Object = {}
        if self.secrets:
            out["secrets"] = [
                {"name": name, "uid": pin["uid"], "version": pin["version"]}
                for name, pin in sorted(self.secrets.items())
            ]
        if self.inputs:
            out["inputs"] = self.inputs
        if self.volumes:
            out["volumes"] = self.volumes
        if self.connections:
            out["connections"] = [self.connections[name] for name in sorted(self.connections)]
        return out


def pin(spec: JobSpec | Object, lookup: Lookup, pinned: JobStatus | Object | None = None) -> Pins | Blocked:
    """Pin every object ``spec`` reads, or say why it cannot be admitted (see the module docstring).

    ``pinned`` is the status of a Job admitted already: its pins (``secretVersions``/``IDs``,
    ``inputs``, ``volumes``) are reused rather than re-chosen, so that a replacement attempt sees what
    the first one saw; one that no longer resolves (a Secret deleted since) is a final Blocked.
    """
    job_spec = views.job_spec(spec)
    pins = Pins(pinned=views.job_status(pinned or {}))
    steps: list[Callable[[], Blocked | None]] = [
        lambda: _find_pool(job_spec, lookup),
        lambda: _pin_connections(job_spec, lookup, pins),
        lambda: _pin_secrets(job_spec, lookup, pins),
        lambda: _pin_inputs(job_spec, lookup, pins),
        lambda: _pin_volumes(job_spec, lookup, pins),
    ]
    for step in steps:
        blocked = step()
        if blocked is not None:
            return blocked
    return pins


def _find_pool(spec: JobSpec, lookup: Lookup) -> Blocked | None:
    """The Job waits until the Pool it names exists in its project (creating it admits the Job)."""
    pool = spec.placement.pool
    if pool is None or lookup("pools", pool) is not None:
        return None
    return Blocked(
        "PoolNotFound",
        f"Pool {pool} (spec.placement.pool) does not exist in this project: a project Owner creates it "
        f"(kind: Pool, apiVersion: nodus.dev/v1, name {pool}) and joins hosts to it, or recreate the Job with "
        "another spec.placement.pool.",
    )


def _secret_references(spec: JobSpec) -> list[tuple[str, int | None, str | None, str]]:
    """``(name, version, key, where)`` of every Secret the spec names."""
    out: list[tuple[str, int | None, str | None, str]] = [
        (item.name, item.version, None, f"spec.secrets[{i}]") for i, item in enumerate(spec.secrets or ())
    ]
    envs = [("spec.env", spec.env)] + [
        (f"spec.sidecars[{i}].env", sidecar.env) for i, sidecar in enumerate(spec.sidecars or ())
    ]
    for where, env in envs:
        for i, item in enumerate(env or ()):
            if item.value_from is not None:
                ref = item.value_from.secret_key_ref
                out.append((ref.name, None, ref.key, f"{where}[{i}].valueFrom.secretKeyRef"))
    out += [(name, None, None, f"spec.imagePullSecrets[{i}]") for i, name in enumerate(spec.image_pull_secrets or ())]
    return out


def _pin_secrets(spec: JobSpec, lookup: Lookup, pins: Pins) -> Blocked | None:
    references = _secret_references(spec)
    references += [
        (conn["secret"]["name"], None, conn["secret"].get("key"), f"Connection {conn['name']}")
        for conn in pins.connections.values()
    ]
    for name, version, key, where in references:
        stored = lookup("secrets", name)
        secret = objects.read(objects.Secret, stored) if stored is not None else None
        pinned_version = (pins.pinned.secret_versions or {}).get(name)
        pinned_uid = (pins.pinned.secret_version_ids or {}).get(name)
        if pinned_uid is not None and (secret is None or secret.metadata.uid != pinned_uid):
            return Blocked(
                "SecretChanged",
                f'Secret "{name}" ({where}) was deleted{" and recreated" if secret else ""} after the Job pinned it '
                f"(uid {pinned_uid}); a new attempt cannot read the pinned values. Create the Job again.",
                final=True,
            )
        if secret is None:
            return Blocked("SecretNotFound", f'Secret "{name}" ({where}) does not exist yet; the Job waits for it.')
        versions = {v.version: v for v in secret.status.versions or ()}
        chosen = version if version is not None else secret.status.version or 0
        if pinned_version is not None:
            chosen = pinned_version
        earlier = pins.secrets.get(name)
        if earlier is not None and version is None:
            chosen = earlier["version"]
        elif earlier is not None and earlier["version"] != chosen:
            return Blocked(
                "SecretVersionConflict",
                f'Secret "{name}" is pinned to version {earlier["version"]} and {chosen} ({where}); '
                "a Job sees one version of each Secret.",
                final=True,
            )
        if chosen not in versions:
            known = ", ".join(str(v) for v in sorted(versions)) or "none"
            return Blocked(
                "SecretVersionNotFound",
                f'Secret "{name}" has no version {chosen} ({where}); its versions are {known}.',
                final=True,
            )
        keys = list(versions[chosen].keys)
        if key is not None and key not in keys:
            return Blocked(
                "SecretKeyNotFound",
                f'Secret "{name}" version {chosen} has no key "{key}" ({where}); its keys are '
                f"{', '.join(keys) or 'none'}. Add the key to the Secret; the Job waits for it.",
            )
        pins.secrets[name] = {"uid": secret.metadata.uid, "version": chosen, "keys": keys}
    return None


def _pin_connections(spec: JobSpec, lookup: Lookup, pins: Pins) -> Blocked | None:
    wanted: list[tuple[str, str, frozenset[str]]] = [
        (name, f"spec.connections[{i}]", frozenset()) for i, name in enumerate(spec.connections or ())
    ]
    for i, item in enumerate(spec.inputs or ()):
        if item.bucket is not None:
            wanted.append((item.bucket.connection, f"spec.inputs[{i}].bucket.connection", frozenset({"S3"})))
    for i, output in enumerate(spec.outputs or ()):
        if output.sink is not None:
            wanted.append((output.sink.connection, f"spec.outputs[{i}].sink.connection", POSTGRES_TYPES))
    for name, where, types in wanted:
        stored = lookup("connections", name)
        if stored is None:
            return Blocked(
                "ConnectionNotFound", f'Connection "{name}" ({where}) does not exist yet; the Job waits for it.'
            )
        connection = objects.read(objects.Connection, stored).spec
        if types and connection.type not in types:
            return Blocked(
                "ConnectionTypeMismatch",
                f'Connection "{name}" is of type {connection.type} but {where} needs {" or ".join(sorted(types))}.',
                final=True,
            )
        resolved = _resolved_connection(name, connection)
        if where.startswith("spec.connections") or pins.connections.get(name, {}).get("exposed"):
            resolved["exposed"] = True  # ADR 0046 §28: its credentials are given to the program
        pins.connections[name] = resolved
    return None


def _resolved_connection(name: str, spec: ConnectionSpec) -> Object:
    """The Connection as an Attempt's spec carries it (``PinnedConnection``)."""
    if spec.type == "S3":
        s3 = spec.s3
        located = {"endpoint": s3.endpoint, "region": s3.region, "bucket": s3.bucket} if s3 is not None else {}
        return {
            "name": name,
            "type": spec.type,
            "s3": {k: v for k, v in located.items() if v},
            "secret": {"name": s3.credentials_secret if s3 is not None else ""},
        }
    postgres = spec.postgres
    secret = postgres.dsn_secret if postgres is not None else ""
    key = (postgres.dsn_key if postgres is not None else None) or DEFAULT_DSN_KEY
    return {"name": name, "type": spec.type, "secret": {"name": secret, "key": key}}


def _revision(stored: Object, wanted: int | None) -> VolumeRevision | None:
    status = objects.read(objects.Volume, stored).status
    revisions = {r.revision: r for r in status.revisions or ()}
    return revisions.get(wanted if wanted is not None else status.latest_revision)


def _pin_inputs(spec: JobSpec, lookup: Lookup, pins: Pins) -> Blocked | None:
    earlier = {str(s.name): s for s in pins.pinned.inputs or ()}
    for i, item in enumerate(spec.inputs or ()):
        name, where = item.name, f"spec.inputs[{i}]"
        known = earlier.get(name)
        known_digest = known.sha256 if known is not None else None
        if item.url is not None:
            digest = item.url.sha256 or known_digest
            pins.inputs.append({"name": name, "url": item.url.url, **({"sha256": digest} if digest else {})})
            if digest:
                pins.input_status.append({"name": name, "sha256": digest})
        elif item.bucket is not None:
            digest = item.bucket.sha256 or known_digest
            entry: Object = {"name": name, "bucket": {"connection": item.bucket.connection, "uri": item.bucket.uri}}
            if digest:
                entry["sha256"] = digest
                pins.input_status.append({"name": name, "sha256": digest})
            pins.inputs.append(entry)
        elif item.output is not None and known_digest:
            pins.inputs.append({"name": name, "blob": f"sha256:{known_digest}", "sha256": known_digest})
            pins.input_status.append({"name": name, "sha256": known_digest})
        elif item.volume is not None:
            ref = item.volume
            volume = lookup("volumes", ref.name)
            if volume is None:
                return Blocked("VolumeNotFound", f'Volume "{ref.name}" ({where}) does not exist yet; the Job waits.')
            revision = _revision(volume, ref.revision or (known.volume_revision if known is not None else None))
            if revision is None:
                return _no_revision(ref.name, ref.revision, where)
            pins.inputs.append({"name": name, "blob": f"sha256:{revision.sha256}", "sha256": revision.sha256})
            pins.input_status.append({"name": name, "sha256": revision.sha256, "volumeRevision": revision.revision})
        elif item.output is not None:
            blocked = _pin_output(name, item.output, where, lookup, pins)
            if blocked is not None:
                return blocked
        elif item.from_workspace is not None:
            blocked = _pin_workspace(name, item.from_workspace, where, known, lookup, pins)
            if blocked is not None:
                return blocked
    return None


def _pin_workspace(
    name: str, ref: WorkspaceInput, where: str, known: InputStatus | None, lookup: Lookup, pins: Pins
) -> Blocked | None:
    """The latest revision of the Workspace, or the one pinned already (by its recorded digest, which the
    Job's status keeps stored even once the Workspace no longer lists it)."""
    if known is not None and known.sha256 and known.workspace_revision:
        digest, number = known.sha256, known.workspace_revision
    else:
        stored = lookup("workspaces", ref.name)
        if stored is None:
            return Blocked(
                "WorkspaceNotFound",
                f'Workspace "{ref.name}" ({where}.fromWorkspace) does not exist yet; the Job waits for it '
                f"(create it, then nodus workspaces push {ref.name} DIR).",
            )
        status = objects.read(objects.Workspace, stored).status
        latest = status.revisions[-1] if status.revisions else None
        if latest is None:
            return Blocked(
                "WorkspaceEmpty",
                f'Workspace "{ref.name}" ({where}.fromWorkspace) has no revision yet; push one '
                f"(nodus workspaces push {ref.name} DIR) and the Job starts.",
            )
        digest, number = latest.digest.removeprefix("sha256:"), latest.revision
    workspace: Object = {"name": ref.name, "revision": number}
    if ref.path:
        workspace["path"] = ref.path
    pins.inputs.append({"name": name, "blob": f"sha256:{digest}", "sha256": digest, "workspace": workspace})
    pins.input_status.append({"name": name, "sha256": digest, "workspaceRevision": number})
    return None


def _no_revision(volume: str, wanted: int | None, where: str) -> Blocked:
    if wanted is None:
        return Blocked(
            "VolumeEmpty",
            f'Volume "{volume}" ({where}) has no revision yet; upload one (nodus volumes upload {volume} PATH) '
            "and the Job starts.",
        )
    return Blocked("VolumeRevisionNotFound", f'Volume "{volume}" has no revision {wanted} ({where}).', final=True)


def _pin_output(name: str, ref: OutputInput, where: str, lookup: Lookup, pins: Pins) -> Blocked | None:
    stored = lookup("jobs", ref.job)
    if stored is None:
        return Blocked("OutputNotReady", f'Job "{ref.job}" ({where}) does not exist yet; the Job waits for its output.')
    status = objects.read(objects.Job, stored).status
    for committed in status.outputs or ():
        if committed.name == ref.name and (committed.index or 0) == ref.index and committed.sha256:
            digest = committed.sha256
            pins.inputs.append({"name": name, "blob": f"sha256:{digest}", "sha256": digest})
            pins.input_status.append({"name": name, "sha256": digest})
            return None
    what = f'output "{ref.name}" of index {ref.index} of Job "{ref.job}"'
    if status.phase in phases.JOB_FINISHED:
        committed_names = sorted({f"{o.name}[{o.index or 0}]" for o in status.outputs or ()})
        return Blocked(
            "InputUnavailable",
            f"{what} ({where}) was never committed: that Job ended {status.phase}; its outputs are "
            f"{', '.join(committed_names) or 'none'}.",
            final=True,
        )
    return Blocked("OutputNotReady", f"{what} ({where}) is not committed yet; the Job waits for it.")


def _pin_volumes(spec: JobSpec, lookup: Lookup, pins: Pins) -> Blocked | None:
    earlier = {str(v.mount_path): v for v in pins.pinned.volumes or ()}
    for i, mount in enumerate(spec.volumes or ()):
        where, name = f"spec.volumes[{i}]", mount.volume
        volume = lookup("volumes", name)
        if volume is None:
            return Blocked("VolumeNotFound", f'Volume "{name}" ({where}) does not exist yet; the Job waits for it.')
        pinned = earlier.get(mount.mount_path)
        wanted = mount.revision or (pinned.revision if pinned is not None else None)
        revision = _revision(volume, wanted if mount.read_only else None)
        if revision is None and (mount.read_only or mount.revision is not None):
            return _no_revision(name, mount.revision, where)
        entry: Object = {"volume": name, "mountPath": mount.mount_path, "readOnly": mount.read_only}
        if revision is not None:
            entry.update(revision=revision.revision, blob=f"sha256:{revision.sha256}")
        pins.volumes.append(entry)
    return None
