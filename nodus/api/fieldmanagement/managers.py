"""``metadata.managedFields`` bookkeeping: entries, their identity, wire form, order, and the Update rules.

An entry is identified as kube-apiserver identifies it: by manager name, operation (``Apply`` or ``Update``) and
subresource, plus the apiVersion for Update entries only (an applier keeps one entry whatever version it applies
with). A manager that both applied and updated therefore has two entries.

Wire form (``metav1.ManagedFieldsEntry``, empty strings omitted)::

    {"manager": "m", "operation": "Update", "apiVersion": "nodus.dev/v1", "time": "2024-01-01T00:00:00Z",
     "fieldsType": "FieldsV1", "fieldsV1": {...}, "subresource": "status"}

Entries are listed as kube-apiserver lists them after every write: Apply entries before Update entries, then by time
(whole seconds), manager name, apiVersion and subresource. An entry whose set did not change keeps its FieldsV1
document as it was stored.

:func:`record_update` is the rule of every write that is not an apply: the fields it added or changed become the
writer's (its time is bumped only when it took something), they leave every other entry, removed fields leave every
entry, and empty entries disappear. At most ten Update entries are kept: the oldest are merged into an
``ancient-changes`` entry per apiVersion.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodus.api.fieldmanagement import gojson
from nodus.api.fieldmanagement.comparison import compare
from nodus.api.fieldmanagement.fieldsets import FieldSet, FieldsV1Error
from nodus.api.fieldmanagement.schema import ListTypes, Scope, strip_untracked

APPLY = "Apply"
UPDATE = "Update"
FIELDS_V1 = "FieldsV1"

# kube-apiserver's DefaultMaxUpdateManagers and the name of the entry older updates are merged into.
MAX_UPDATE_MANAGERS = 10
ANCIENT_CHANGES = "ancient-changes"


class ManagedFieldsError(ValueError):
    """A managedFields list kube-apiserver would refuse to decode."""


@dataclass(frozen=True)
class ManagerIdentity:
    """What makes two managedFields entries the same entry."""

    manager: str
    operation: str
    subresource: str = ""
    api_version: str = ""  # Update entries only; always "" for Apply

    @classmethod
    def of(cls, manager: str, operation: str, subresource: str, api_version: str) -> ManagerIdentity:
        return cls(manager, operation, subresource, api_version if operation == UPDATE else "")

    def json(self) -> str:
        """kube-apiserver's manager identifier (the JSON of the entry without fields and time). Conflicts are
        grouped, and old updates ordered, by this string."""
        parts = [("manager", self.manager), ("operation", self.operation), ("apiVersion", self.api_version)]
        parts.append(("subresource", self.subresource))
        return "{" + ",".join(f'"{name}":{gojson.json_string(value)}' for name, value in parts if value) + "}"


@dataclass(frozen=True)
class _Stored:
    """An entry as it was decoded, so that an unchanged entry is written back as it was."""

    fields: FieldSet
    api_version: str
    fields_v1: Any


@dataclass(frozen=True)
class ManagedEntry:
    identity: ManagerIdentity
    fields: FieldSet
    api_version: str
    time: str | None
    stored: _Stored | None = None

    def with_fields(self, fields: FieldSet) -> ManagedEntry:
        return dataclasses.replace(self, fields=fields)

    def encode(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.identity.manager:
            out["manager"] = self.identity.manager
        out["operation"] = self.identity.operation
        out["apiVersion"] = self.api_version
        if self.time is not None:
            out["time"] = self.time
        out["fieldsType"] = FIELDS_V1
        stored = self.stored
        unchanged = stored is not None and (stored.api_version, stored.fields) == (self.api_version, self.fields)
        if stored is not None and unchanged and stored.fields_v1 is not None:
            out["fieldsV1"] = copy.deepcopy(stored.fields_v1)
        else:
            out["fieldsV1"] = self.fields.to_fields_v1()
        if self.identity.subresource:
            out["subresource"] = self.identity.subresource
        return out


# Entries by identity. Dict order carries no meaning: encode() sorts.
Managed = dict[ManagerIdentity, ManagedEntry]


def decode_managed_fields(raw: object) -> Managed:
    """Decode ``metadata.managedFields`` with kube-apiserver's checks; a later entry replaces an earlier one with
    the same identity."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise ManagedFieldsError("managedFields must be a list")
    managed: Managed = {}
    for position, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ManagedFieldsError(f"managed fields entry {position} is not an object")
        operation = item.get("operation")
        if operation not in (APPLY, UPDATE):
            raise ManagedFieldsError("operation must be `Apply` or `Update`")
        api_version = item.get("apiVersion")
        if not isinstance(api_version, str) or not api_version:
            raise ManagedFieldsError("apiVersion must not be empty")
        fields_type = item.get("fieldsType") or ""
        if not fields_type:
            raise ManagedFieldsError(f"missing fieldsType in managed fields entry {position}")
        if fields_type != FIELDS_V1:
            raise ManagedFieldsError(
                f"invalid fieldsType {gojson.quote(str(fields_type))} in managed fields entry {position}"
            )
        manager, subresource, time = item.get("manager") or "", item.get("subresource") or "", item.get("time")
        if not isinstance(manager, str) or not isinstance(subresource, str) or not isinstance(time, str | None):
            raise ManagedFieldsError(f"managed fields entry {position} has a field of the wrong type")
        document = item.get("fieldsV1")
        try:
            fields = FieldSet.from_fields_v1({} if document is None else document)
        except FieldsV1Error as error:
            raise ManagedFieldsError(f"error decoding versioned set of entry {position}: {error}") from error
        identity = ManagerIdentity.of(manager, operation, subresource, api_version)
        managed[identity] = ManagedEntry(identity, fields, api_version, time, _Stored(fields, api_version, document))
    return managed


def is_reset_request(raw: object) -> bool:
    """Whether a written object asks to clear managedFields: ``[]`` or ``[{}]`` (kube-apiserver's rule)."""
    if not isinstance(raw, list) or len(raw) > 1:
        return False
    return not raw or (isinstance(raw[0], dict) and all(value in ("", None) for value in raw[0].values()))


def encode_managed_fields(managed: Managed) -> list[dict[str, Any]]:
    """The wire list, in kube-apiserver's order."""
    entries = sorted(
        managed.values(),
        key=lambda entry: (
            entry.identity.operation,
            time_seconds(entry.time),
            entry.identity.manager,
            entry.api_version,
            entry.identity.subresource,
        ),
    )
    return [entry.encode() for entry in entries]


def time_seconds(time: str | None) -> int:
    """Whole seconds of an RFC 3339 time; 0 for an absent or unreadable one (as a nil time sorts upstream)."""
    if not time:
        return 0
    try:
        return int(datetime.fromisoformat(time).timestamp())
    except ValueError:
        return 0


def only_version(managed: Managed, api_version: str) -> Managed:
    """Drop entries recorded with another apiVersion. This server serves one version per kind, and kube-apiserver
    drops the entries of versions it can no longer convert to."""
    return {identity: entry for identity, entry in managed.items() if entry.api_version == api_version}


def record_update(
    managed: Managed,
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    manager: str,
    api_version: str,
    now: str,
    scope: Scope,
    types: ListTypes,
) -> Managed:
    """The entries after ``manager`` wrote ``new`` over ``old`` by a means other than apply."""
    diff = compare(old, new, types).restrict(scope)
    changed = diff.changed
    result: Managed = {}
    for identity, entry in managed.items():
        remaining = entry.fields - changed - diff.removed
        if remaining:
            result[identity] = entry.with_fields(remaining)
    taken = strip_untracked(changed - diff.removed)
    if taken:
        identity = ManagerIdentity.of(manager, UPDATE, scope.subresource, api_version)
        previous = result.get(identity)
        fields = taken | previous.fields if previous is not None else taken
        result[identity] = ManagedEntry(identity, fields, api_version, now, previous.stored if previous else None)
    return cap_update_managers(result)


def cap_update_managers(managed: Managed, limit: int = MAX_UPDATE_MANAGERS) -> Managed:
    """Merge the oldest Update entries into one ``ancient-changes`` entry per apiVersion until at most ``limit``
    Update entries are left, step for step as kube-apiserver does: the oldest entry of a version stays alone until
    a second one of that version is merged, and the bucket takes the time of the last entry merged into it."""
    updaters = [identity for identity in managed if identity.operation == UPDATE]
    if len(updaters) <= limit:
        return managed
    updaters.sort(key=lambda identity: (time_seconds(managed[identity].time), identity.json()))
    result = dict(managed)
    first_of_version: dict[str, ManagerIdentity] = {}
    count = len(updaters)
    for identity in updaters:
        if count <= limit:
            break
        entry = result.get(identity)
        if entry is None:
            continue
        version = entry.api_version
        if version not in first_of_version:
            first_of_version[version] = identity
            continue
        bucket = ManagerIdentity(ANCIENT_CHANGES, UPDATE, "", version)
        existing = result.get(bucket)
        if existing is None:
            # The first entry of this version becomes the bucket.
            existing = result.pop(first_of_version[version], None)
        base = existing.fields if existing is not None else FieldSet()
        stored = existing.stored if existing is not None and existing.identity == bucket else None
        result[bucket] = ManagedEntry(bucket, entry.fields | base, version, entry.time, stored)
        # When the bucket itself is the entry being merged, upstream deletes it here; so does this.
        del result[identity]
        count -= 1
    return result
