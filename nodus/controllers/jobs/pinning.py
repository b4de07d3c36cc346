"""Admission of a Job's data plane: every object it reads is found and pinned, or the Job waits.

``pin`` is pure: it reads the Job's spec and the objects it names through a ``Lookup`` (the
reconciler's informer caches; tests pass a dict) and returns either :class:`Pins` or a
:class:`Blocked` saying why not yet, or never.

What is pinned, once, at admission (DECISIONS 20), so that every attempt of the Job, replacements
included, sees the same data:

* Secrets named by ``secrets``, ``env``/``sidecars[].env`` ``secretKeyRef``, ``imagePullSecrets`` and
  the Connections the Job uses: ``(uid, version)``, reported in ``status.secretVersions`` and
  ``status.secretVersionIDs``. A Secret deleted and recreated under the same name has a new uid, so
  the pin no longer matches it and the agent refuses it rather than reading the new values.
* Volumes (inputs and read-only mounts): the revision, given or the latest, with its blob digest.
  A writable mount starts from the latest revision (or empty) and writes a new one on success.
* Outputs of other Jobs: the committed output's SHA-256. A producer still running makes the Job
  wait (a pipeline can be created all at once); a producer that ended without it fails the Job.
* Connections (bucket inputs, output sinks, ``spec.connections``): their spec, with its Secret pinned;
  those named in ``spec.connections`` are marked ``exposed``: the agent hands their credentials to the
  program (files under ``/nodus/connections/<name>/`` and environment variables).

URL and bucket inputs are verified by the agent at the end of the download; a declared ``sha256``
is the pin, and without one the first attempt's digest becomes it (``status.inputs``).

Missing objects (a Secret, a Volume, a Connection, a key) make the Job wait in ``Pending`` with a
reason naming what is missing: creating it admits the Job. Contradictions that no new object can
fix (a pinned version that does not exist, a Connection of the wrong type) fail the Job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Object = dict[str, Any]
Lookup = Callable[[str, str], Object | None]
"""``lookup(plural, name)``: the object of that kind and name in the Job's project, or None."""

POSTGRES_TYPES = frozenset({"Postgres", "Neon", "Supabase"})
_TERMINAL_JOB_PHASES = frozenset({"Succeeded", "Failed", "Cancelled"})


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
    pinned: Object = field(default_factory=dict)  # the Job's status pins, when admitted already

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
            if v.get("readOnly") and v.get("revision")
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


def pin(spec: Object, lookup: Lookup, pinned: Object | None = None) -> Pins | Blocked:
    """Pin every object ``spec`` reads, or say why it cannot be admitted (see the module docstring).

    ``pinned`` is the status of a Job admitted already: its pins (``secretVersions``/``IDs``,
    ``inputs``, ``volumes``) are reused rather than re-chosen, so that a replacement attempt sees what
    the first one saw; one that no longer resolves (a Secret deleted since) is a final Blocked.
    """
    pins = Pins(pinned=pinned or {})
    steps: list[Callable[[], Blocked | None]] = [
        lambda: _pin_connections(spec, lookup, pins),
        lambda: _pin_secrets(spec, lookup, pins),
        lambda: _pin_inputs(spec, lookup, pins),
        lambda: _pin_volumes(spec, lookup, pins),
    ]
    for step in steps:
        blocked = step()
        if blocked is not None:
            return blocked
    return pins


def _secret_references(spec: Object) -> list[tuple[str, int | None, str | None, str]]:
    """``(name, version, key, where)`` of every Secret the spec names."""
    out: list[tuple[str, int | None, str | None, str]] = []
    for i, item in enumerate(spec.get("secrets") or []):
        if isinstance(item, str):
            out.append((item, None, None, f"spec.secrets[{i}]"))
        elif isinstance(item, dict) and item.get("name"):
            out.append((str(item["name"]), item.get("version"), None, f"spec.secrets[{i}]"))
    envs = [("spec.env", spec.get("env"))] + [
        (f"spec.sidecars[{i}].env", sidecar.get("env"))
        for i, sidecar in enumerate(spec.get("sidecars") or [])
        if isinstance(sidecar, dict)
    ]
    for where, env in envs:
        for i, item in enumerate(env or []):
            ref = ((item or {}).get("valueFrom") or {}).get("secretKeyRef") if isinstance(item, dict) else None
            if isinstance(ref, dict) and ref.get("name"):
                out.append((str(ref["name"]), None, str(ref.get("key") or ""), f"{where}[{i}].valueFrom.secretKeyRef"))
    for i, name in enumerate(spec.get("imagePullSecrets") or []):
        out.append((str(name), None, None, f"spec.imagePullSecrets[{i}]"))
    return out


def _pin_secrets(spec: Object, lookup: Lookup, pins: Pins) -> Blocked | None:
    references = _secret_references(spec)
    references += [
        (str(ref["name"]), None, ref.get("key"), f"Connection {conn['name']}")
        for conn in pins.connections.values()
        if (ref := conn.get("secret"))
    ]
    for name, version, key, where in references:
        secret = lookup("secrets", name)
        pinned_version = (pins.pinned.get("secretVersions") or {}).get(name)
        pinned_uid = (pins.pinned.get("secretVersionIDs") or {}).get(name)
        if pinned_uid is not None and (secret is None or secret["metadata"]["uid"] != pinned_uid):
            return Blocked(
                "SecretChanged",
                f'Secret "{name}" ({where}) was deleted{" and recreated" if secret else ""} after the Job pinned it '
                f"(uid {pinned_uid}); a new attempt cannot read the pinned values. Create the Job again.",
                final=True,
            )
        if secret is None:
            return Blocked("SecretNotFound", f'Secret "{name}" ({where}) does not exist yet; the Job waits for it.')
        status = secret.get("status") or {}
        versions = {int(v["version"]): v for v in status.get("versions") or [] if isinstance(v, dict)}
        chosen = int(version) if version is not None else int(status.get("version") or 0)
        if pinned_version is not None:
            chosen = int(pinned_version)
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
        keys = [str(k) for k in versions[chosen].get("keys") or []]
        if key is not None and key not in keys:
            return Blocked(
                "SecretKeyNotFound",
                f'Secret "{name}" version {chosen} has no key "{key}" ({where}); its keys are '
                f"{', '.join(keys) or 'none'}. Add the key to the Secret; the Job waits for it.",
            )
        pins.secrets[name] = {"uid": secret["metadata"]["uid"], "version": chosen, "keys": keys}
    return None


def _pin_connections(spec: Object, lookup: Lookup, pins: Pins) -> Blocked | None:
    wanted: list[tuple[str, str, frozenset[str]]] = [
        (str(name), f"spec.connections[{i}]", frozenset()) for i, name in enumerate(spec.get("connections") or [])
    ]
    for i, item in enumerate(spec.get("inputs") or []):
        bucket = (item or {}).get("bucket") if isinstance(item, dict) else None
        if isinstance(bucket, dict) and bucket.get("connection"):
            wanted.append((str(bucket["connection"]), f"spec.inputs[{i}].bucket.connection", frozenset({"S3"})))
    for i, item in enumerate(spec.get("outputs") or []):
        sink = (item or {}).get("sink") if isinstance(item, dict) else None
        if isinstance(sink, dict) and sink.get("connection"):
            wanted.append((str(sink["connection"]), f"spec.outputs[{i}].sink.connection", POSTGRES_TYPES))
    for name, where, types in wanted:
        connection = lookup("connections", name)
        if connection is None:
            return Blocked(
                "ConnectionNotFound", f'Connection "{name}" ({where}) does not exist yet; the Job waits for it.'
            )
        connection_spec = connection.get("spec") or {}
        kind = str(connection_spec.get("type") or "")
        if types and kind not in types:
            return Blocked(
                "ConnectionTypeMismatch",
                f'Connection "{name}" is of type {kind} but {where} needs {" or ".join(sorted(types))}.',
                final=True,
            )
        resolved = _resolved_connection(name, kind, connection_spec)
        if where.startswith("spec.connections") or pins.connections.get(name, {}).get("exposed"):
            resolved["exposed"] = True  # DECISIONS 28: its credentials are given to the program
        pins.connections[name] = resolved
    return None


def _resolved_connection(name: str, kind: str, spec: Object) -> Object:
    if kind == "S3":
        s3 = spec.get("s3") or {}
        return {
            "name": name,
            "type": kind,
            "s3": {k: s3[k] for k in ("endpoint", "region", "bucket") if s3.get(k)},
            "secret": {"name": str(s3.get("credentialsSecret") or "")},
        }
    postgres = spec.get("postgres") or {}
    key = str(postgres.get("dsnKey") or "dsn")
    return {"name": name, "type": kind, "secret": {"name": str(postgres.get("dsnSecret") or ""), "key": key}}


def _revision(volume: Object, wanted: int | None) -> Object | None:
    status = volume.get("status") or {}
    revisions = {int(r["revision"]): r for r in status.get("revisions") or [] if isinstance(r, dict)}
    number = wanted if wanted is not None else int(status.get("latestRevision") or 0)
    return revisions.get(number)


def _pin_inputs(spec: Object, lookup: Lookup, pins: Pins) -> Blocked | None:
    earlier = {str(s.get("name")): s for s in pins.pinned.get("inputs") or [] if isinstance(s, dict)}
    for i, item in enumerate(spec.get("inputs") or []):
        if not isinstance(item, dict):
            continue
        name, where = str(item.get("name")), f"spec.inputs[{i}]"
        known = earlier.get(name) or {}
        if isinstance(url := item.get("url"), dict):
            digest = url.get("sha256") or known.get("sha256")
            pins.inputs.append({"name": name, "url": url["url"], **({"sha256": digest} if digest else {})})
            if digest:
                pins.input_status.append({"name": name, "sha256": digest})
        elif isinstance(bucket := item.get("bucket"), dict):
            digest = bucket.get("sha256") or known.get("sha256")
            entry = {"name": name, "bucket": {"connection": bucket["connection"], "uri": bucket["uri"]}}
            if digest:
                entry["sha256"] = digest
                pins.input_status.append({"name": name, "sha256": digest})
            pins.inputs.append(entry)
        elif isinstance(item.get("output"), dict) and known.get("sha256"):
            digest = str(known["sha256"])
            pins.inputs.append({"name": name, "blob": f"sha256:{digest}", "sha256": digest})
            pins.input_status.append({"name": name, "sha256": digest})
        elif isinstance(ref := item.get("volume"), dict):
            volume = lookup("volumes", str(ref.get("name")))
            if volume is None:
                return Blocked(
                    "VolumeNotFound", f'Volume "{ref.get("name")}" ({where}) does not exist yet; the Job waits.'
                )
            revision = _revision(volume, ref.get("revision") or known.get("volumeRevision"))
            if revision is None:
                return _no_revision(str(ref.get("name")), ref.get("revision"), where)
            pins.inputs.append({"name": name, "blob": f"sha256:{revision['sha256']}", "sha256": revision["sha256"]})
            pins.input_status.append(
                {"name": name, "sha256": revision["sha256"], "volumeRevision": revision["revision"]}
            )
        elif isinstance(ref := item.get("output"), dict):
            blocked = _pin_output(name, ref, where, lookup, pins)
            if blocked is not None:
                return blocked
    return None


def _no_revision(volume: str, wanted: Any, where: str) -> Blocked:
    if wanted is None:
        return Blocked(
            "VolumeEmpty",
            f'Volume "{volume}" ({where}) has no revision yet; upload one (nodus volumes upload {volume} PATH) '
            "and the Job starts.",
        )
    return Blocked("VolumeRevisionNotFound", f'Volume "{volume}" has no revision {wanted} ({where}).', final=True)


def _pin_output(name: str, ref: Object, where: str, lookup: Lookup, pins: Pins) -> Blocked | None:
    job_name, output, index = str(ref.get("job")), str(ref.get("name")), int(ref.get("index") or 0)
    producer = lookup("jobs", job_name)
    if producer is None:
        return Blocked(
            "OutputNotReady", f'Job "{job_name}" ({where}) does not exist yet; the Job waits for its output.'
        )
    status = producer.get("status") or {}
    for committed in status.get("outputs") or []:
        if committed.get("name") == output and int(committed.get("index") or 0) == index and committed.get("sha256"):
            digest = str(committed["sha256"])
            pins.inputs.append({"name": name, "blob": f"sha256:{digest}", "sha256": digest})
            pins.input_status.append({"name": name, "sha256": digest})
            return None
    what = f'output "{output}" of index {index} of Job "{job_name}"'
    if status.get("phase") in _TERMINAL_JOB_PHASES:
        committed_names = sorted({f"{o.get('name')}[{o.get('index', 0)}]" for o in status.get("outputs") or []})
        return Blocked(
            "InputUnavailable",
            f"{what} ({where}) was never committed: that Job ended {status.get('phase')}; its outputs are "
            f"{', '.join(committed_names) or 'none'}.",
            final=True,
        )
    return Blocked("OutputNotReady", f"{what} ({where}) is not committed yet; the Job waits for it.")


def _pin_volumes(spec: Object, lookup: Lookup, pins: Pins) -> Blocked | None:
    earlier = {str(v.get("mountPath")): v for v in pins.pinned.get("volumes") or [] if isinstance(v, dict)}
    for i, mount in enumerate(spec.get("volumes") or []):
        if not isinstance(mount, dict):
            continue
        where, name = f"spec.volumes[{i}]", str(mount.get("volume"))
        volume = lookup("volumes", name)
        if volume is None:
            return Blocked("VolumeNotFound", f'Volume "{name}" ({where}) does not exist yet; the Job waits for it.')
        read_only = bool(mount.get("readOnly"))
        wanted = mount.get("revision") or (earlier.get(str(mount.get("mountPath"))) or {}).get("revision")
        revision = _revision(volume, wanted if read_only else None)
        if revision is None and (read_only or mount.get("revision") is not None):
            return _no_revision(name, mount.get("revision"), where)
        entry: Object = {"volume": name, "mountPath": mount["mountPath"], "readOnly": read_only}
        if revision is not None:
            entry.update(revision=revision["revision"], blob=f"sha256:{revision['sha256']}")
        pins.volumes.append(entry)
    return None
