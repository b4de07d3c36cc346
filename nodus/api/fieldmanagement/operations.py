"""The entry points the HTTP layer calls: server-side apply, and managedFields after any other write.

:func:`apply` is ``PATCH`` with ``application/apply-patch+yaml``; :func:`update_managed_fields` runs after every
create, update, merge patch or JSON patch. Both are pure: they copy what they change and never modify arguments.
They reproduce kube-apiserver's field manager chain for a custom resource with a status subresource:

- an object with no managedFields stays untracked by updates; its first apply first records its current fields as
  the updater ``before-first-apply``, so that the apply conflicts with them rather than silently taking them;
- a write through the main resource never owns ``status`` and an apply never changes it; a write through
  ``/status`` owns ``status`` and ``metadata`` and an apply there changes only ``status``;
- entries recorded with another apiVersion than the one served are dropped;
- for the manager ``kubectl``, the last-applied annotation eases the move from client-side apply
  (:mod:`~nodus.api.fieldmanagement.lastapplied`).

What stays with the caller: the ``fieldManager`` default (kube-apiserver uses the user agent for updates), checking
the configuration's ``kind`` on creation (only an existing object's kind is checked here), resourceVersion and uid
preconditions, system metadata (uid, creationTimestamp, generation, resourceVersion), and a 404 for an apply to
``/status`` of an object that does not exist.
"""

from __future__ import annotations

import copy
from typing import Any

from nodus.api.fieldmanagement.comparison import MISSING, compare, created_fields_v1, field_set, json_equal
from nodus.api.fieldmanagement.conflicts import ApplyConflict
from nodus.api.fieldmanagement.fieldsets import FieldSet
from nodus.api.fieldmanagement.lastapplied import KUBECTL_MANAGER, allowed_conflicts, sync_annotation
from nodus.api.fieldmanagement.managers import (
    APPLY,
    UPDATE,
    Managed,
    ManagedEntry,
    ManagedFieldsError,
    ManagerIdentity,
    decode_managed_fields,
    encode_managed_fields,
    is_reset_request,
    only_version,
    record_update,
)
from nodus.api.fieldmanagement.merging import merge, prune
from nodus.api.fieldmanagement.schema import ListKeys, ListTypes, Scope, StructureError, strip_untracked

BEFORE_FIRST_APPLY = "before-first-apply"
SUBRESOURCES = ("", "status")


class InvalidApplyConfiguration(ValueError):
    """An applied configuration kube-apiserver refuses before merging it (answer 400 Bad Request)."""


def apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    *,
    manager: str,
    force: bool,
    api_version: str,
    list_keys: ListKeys,
    now: str,
    subresource: str = "",
) -> dict[str, Any]:
    """Server-side apply ``applied`` onto ``live`` (None: create) as ``manager``; the new object, managedFields set.

    Raises :class:`ApplyConflict` (unless ``force``) when the configuration changes a field another entry owns,
    :class:`InvalidApplyConfiguration` for a configuration kube-apiserver refuses, ``ValueError`` for a stored object
    whose lists do not fit their list types. A null in the configuration removes a scalar or atomic list and owns
    it; for an object or associative list it changes and owns nothing.
    """
    scope = _scope(subresource)
    if live is None and subresource:
        raise ValueError("apply through a subresource needs an existing object")
    types = ListTypes(list_keys)
    _check_configuration(live, applied, manager, api_version, types)
    live_object = _without_managed_fields(live) if live is not None else {}
    managed = _decode_stored(live)
    if not managed:
        # Untracked so far: whoever wrote the current fields becomes "before-first-apply", so that this apply
        # conflicts with them instead of silently taking them.
        managed = record_update(
            {}, {}, live_object, manager=BEFORE_FIRST_APPLY, api_version=api_version, now=now, scope=scope, types=types
        )
    managed = only_version(managed, api_version)
    attempt = _Apply(
        live=live_object,
        applied=applied,
        managed=managed,
        manager=manager,
        api_version=api_version,
        now=now,
        scope=scope,
        types=types,
    )
    try:
        result = attempt.run(force=force)
    except ApplyConflict as conflict:
        if manager != KUBECTL_MANAGER or force:
            raise
        allowed = allowed_conflicts(live_object, api_version, types)
        if allowed is None:
            raise
        remaining = [item for item in conflict.conflicts if item.path not in allowed]
        if remaining:
            raise ApplyConflict(remaining) from None
        result = attempt.run(force=True)
    if manager == KUBECTL_MANAGER and not subresource:
        # Through /status the strategy keeps the stored metadata, annotation included.
        sync_annotation(result, applied)
    return result


def update_managed_fields(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    api_version: str,
    list_keys: ListKeys,
    now: str,
    subresource: str = "",
) -> list[dict[str, Any]]:
    """The managedFields after ``manager`` wrote ``new`` over ``old`` (None: create) by anything but apply.

    ``new`` is the object as written, before the kind's strategy resets fields: on the main resource, the
    ``metadata.managedFields`` it carries are honoured as kube-apiserver honours them (a client may rewrite them, as
    kubectl does when it moves ownership from client-side to server-side apply; ``[]`` or ``[{}]`` clears them;
    unreadable ones are ignored). An empty list means the object carries no managedFields.
    """
    scope = _scope(subresource)
    types = ListTypes(list_keys)
    if old is None and _managed_fields_of(new) is None:
        return _created_entries(new, manager=manager, api_version=api_version, now=now, scope=scope, types=types)
    managed = _starting_entries(old, new, subresource)
    if not managed and old is not None:
        return []
    managed = only_version(managed, api_version)
    try:
        managed = record_update(
            managed,
            _view_without_managed_fields(old) if old is not None else {},
            _view_without_managed_fields(new),
            manager=manager,
            api_version=api_version,
            now=now,
            scope=scope,
            types=types,
        )
    except StructureError:
        # kube-apiserver clears managedFields rather than record ownership of an object it cannot read.
        return []
    return encode_managed_fields(managed)


def _created_entries(
    new: dict[str, Any], *, manager: str, api_version: str, now: str, scope: Scope, types: ListTypes
) -> list[dict[str, Any]]:
    """What :func:`update_managed_fields` returns for a create that carries no managedFields (nearly every create):
    the writer's one Update entry, or none when it owns nothing. The same as the general route gives (a test
    compares them), in one walk."""
    try:
        document = created_fields_v1(_view_without_managed_fields(new), types, scope)
    except StructureError:
        return []
    if document is None:
        return []
    identity = ManagerIdentity.of(manager, UPDATE, scope.subresource, api_version)
    encoded = ManagedEntry(identity, FieldSet(), api_version, now).encode()
    encoded["fieldsV1"] = document
    return [encoded]


def fields_v1(obj: dict[str, Any], list_keys: ListKeys) -> dict[str, Any]:
    """The FieldsV1 document of every field ``obj`` sets, as an applier of the whole object would own them
    (fields that are never tracked left out)."""
    return strip_untracked(field_set(_without_managed_fields(obj), ListTypes(list_keys))).to_fields_v1()


class _Apply:
    """One apply attempt; kubectl's migration may run it twice, the second time forced."""

    def __init__(
        self,
        *,
        live: dict[str, Any],
        applied: dict[str, Any],
        managed: Managed,
        manager: str,
        api_version: str,
        now: str,
        scope: Scope,
        types: ListTypes,
    ) -> None:
        self.live, self.applied, self.managed = live, applied, managed
        self.identity = ManagerIdentity.of(manager, APPLY, scope.subresource, api_version)
        self.api_version, self.now, self.scope, self.types = api_version, now, scope, types

    def run(self, *, force: bool) -> dict[str, Any]:
        merged = merge(self.live, self.applied, self.types)
        applied_fields = self.scope.restrict(field_set(self.applied, self.types, strict=True, hint=merged))
        previous = self.managed.get(self.identity)
        others = {identity: entry for identity, entry in self.managed.items() if identity != self.identity}
        everyone = applied_fields
        for entry in others.values():
            everyone |= entry.fields
        merged = prune(merged, previous.fields if previous else None, everyone, self.types)

        diff = compare(self.live, merged, self.types).restrict(self.scope)
        changed = diff.changed
        conflicts = {identity: entry.fields & changed for identity, entry in others.items() if entry.fields & changed}
        if conflicts and not force:
            raise ApplyConflict.from_owners(conflicts)

        # Forced or not, the changed fields leave their other owners; removed fields leave everyone.
        managed: Managed = {}
        for identity, entry in others.items():
            remaining = entry.fields - changed - diff.removed
            if remaining:
                managed[identity] = entry.with_fields(remaining)
        owned = strip_untracked(applied_fields)
        if owned:
            # The applier's time moves only when the apply changed the object.
            unchanged = json_equal(self.live, merged)
            time = (previous.time if previous else None) if unchanged else self.now
            stored = previous.stored if previous else None
            managed[self.identity] = ManagedEntry(self.identity, owned, self.api_version, time, stored)
        return _with_managed_fields(self._after_strategy(merged), managed)

    def _after_strategy(self, merged: dict[str, Any]) -> dict[str, Any]:
        """What the kind's strategy keeps: the main resource never writes status, /status writes only status."""
        if self.scope.subresource == "status":
            result = copy.deepcopy(self.live)
            source = merged
        else:
            result = merged
            source = self.live
        status = source.get("status", MISSING)
        if status is MISSING:
            result.pop("status", None)
        else:
            result["status"] = copy.deepcopy(status)
        return result


def _check_configuration(
    live: dict[str, Any] | None, applied: object, manager: str, api_version: str, types: ListTypes
) -> None:
    if not manager:
        raise InvalidApplyConfiguration("fieldManager is required for apply requests")
    if not isinstance(applied, dict):
        raise InvalidApplyConfiguration("the applied configuration must be an object")
    version, kind = applied.get("apiVersion"), applied.get("kind")
    expected_kind = live.get("kind") if live is not None else kind
    if version != api_version or kind != expected_kind:
        raise InvalidApplyConfiguration(f"invalid object type: {_group_version_kind(version, kind)}")
    metadata = applied.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidApplyConfiguration("metadata must be an object")
    if isinstance(metadata, dict) and metadata.get("managedFields") is not None:
        raise InvalidApplyConfiguration("metadata.managedFields must be nil")
    try:
        field_set(applied, types, strict=True)
    except StructureError as error:
        raise InvalidApplyConfiguration(f"failed to create typed patch object: {error}") from error


def _group_version_kind(api_version: object, kind: object) -> str:
    """Go's ``GroupVersionKind.String()``: ``nodus.dev/v1, Kind=Job``; ``/v1, Kind=Job`` for a core version."""
    version = api_version if isinstance(api_version, str) else ""
    group, _, name = version.rpartition("/")
    return f"{group}/{name}, Kind={kind if isinstance(kind, str) else ''}"


def _scope(subresource: str) -> Scope:
    if subresource not in SUBRESOURCES:
        raise ValueError(f"field management does not support the subresource {subresource!r}")
    return Scope(subresource)


def _without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    copied = copy.deepcopy(obj)
    metadata = copied.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return copied


def _view_without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """A read-only view of ``obj`` without managedFields: only the two dicts on the way are copied.

    For the comparisons of ``update_managed_fields``, which never write into the objects; copying the
    whole object there cost more than the comparison itself."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or "managedFields" not in metadata:
        return obj
    return {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}


def _managed_fields_of(obj: dict[str, Any] | None) -> object:
    metadata = obj.get("metadata") if obj is not None else None
    return metadata.get("managedFields") if isinstance(metadata, dict) else None


def _decode_stored(obj: dict[str, Any] | None) -> Managed:
    """The managedFields of a stored object. Only this package writes them, so they decode; if they did not,
    starting afresh is safer than refusing every write to the object."""
    try:
        return decode_managed_fields(_managed_fields_of(obj))
    except ManagedFieldsError:
        return {}


def _starting_entries(old: dict[str, Any] | None, new: dict[str, Any], subresource: str) -> Managed:
    """The entries an update starts from: the written object's, if it carries readable ones, else the stored ones.

    Writes through a subresource cannot change managedFields (kube-apiserver ignores them there)."""
    stored = _decode_stored(old)
    if subresource:
        return stored
    requested = _managed_fields_of(new)
    if is_reset_request(requested):
        return {}
    try:
        written = decode_managed_fields(requested)
    except ManagedFieldsError:
        return stored
    return written or stored


def _with_managed_fields(obj: dict[str, Any], managed: Managed) -> dict[str, Any]:
    encoded = encode_managed_fields(managed)
    metadata = obj.get("metadata")
    if encoded:
        if not isinstance(metadata, dict):
            metadata = obj["metadata"] = {}
        metadata["managedFields"] = encoded
    elif isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


__all__ = [
    "BEFORE_FIRST_APPLY",
    "InvalidApplyConfiguration",
    "apply",
    "fields_v1",
    "update_managed_fields",
]
