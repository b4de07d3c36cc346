"""ObjectMeta: the system-owned fields and the generic checks every kind shares.

The server owns ``uid``, ``resourceVersion``, ``generation``, ``creationTimestamp``,
``deletionTimestamp`` and ``deletionGracePeriodSeconds``: whatever a client sends there is
replaced. Clients own ``labels``, ``annotations``, ``finalizers`` and ``ownerReferences``, which
are checked here with Kubernetes' syntax rules.
"""

from __future__ import annotations

import re
import secrets
import uuid
from typing import Any

from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apimachinery.units import format_time, now

SYSTEM_FIELDS = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # as Kubernetes: no vowels, no look-alikes
ANNOTATIONS_MAX_BYTES = 256 * 1024


def generate_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))


def stamp_new(metadata: dict[str, Any]) -> None:
    """Replace the system fields of an object being created."""
    for field in SYSTEM_FIELDS:
        metadata.pop(field, None)
    metadata["uid"] = str(uuid.uuid4())
    metadata["creationTimestamp"] = format_time(now())
    metadata["generation"] = 1


def carry_system_fields(new: dict[str, Any], old: dict[str, Any]) -> None:
    """On update, the system fields come from the stored object, whatever the client sent."""
    for field in SYSTEM_FIELDS:
        if field == "resourceVersion":
            continue
        if field in old:
            new[field] = old[field]
        else:
            new.pop(field, None)


def validate_name(name: str, path: Path, dns_label: bool) -> list[FieldError]:
    if dns_label:
        if len(name) > 63 or not _DNS_LABEL.match(name):
            return [
                fieldpath.invalid(
                    path,
                    name,
                    "a lowercase RFC 1123 label must consist of lower case "
                    "alphanumeric characters or '-', start and end with an alphanumeric "
                    "character, and be at most 63 characters (e.g. 'my-name')",
                )
            ]
        return []
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        return [
            fieldpath.invalid(
                path,
                name,
                "a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', start and end with an alphanumeric "
                "character, and be at most 253 characters (e.g. 'example.com')",
            )
        ]
    return []


def _validate_qualified_key(key: Any, path: Path) -> list[FieldError]:
    if not isinstance(key, str):
        return [fieldpath.invalid(path, key, "must be a string")]
    prefix, _, name = key.rpartition("/")
    errors = []
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        errors.append(fieldpath.invalid(path, key, "the prefix must be a DNS subdomain such as 'example.com'"))
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        errors.append(
            fieldpath.invalid(
                path,
                key,
                "name part must consist of alphanumeric characters, '-', '_' "
                "or '.', start and end with an alphanumeric character, and be at most "
                "63 characters (e.g. 'MyName' or 'my.name' or '123-abc')",
            )
        )
    return errors


def validate_labels(labels: Any, path: Path) -> list[FieldError]:
    """A map of labels as ``metadata.labels`` holds them (qualified keys, label values), at ``path``."""
    if not isinstance(labels, dict):
        return [fieldpath.invalid(path, None, "must be a map of string keys to string values")]
    errors: list[FieldError] = []
    for key, value in labels.items():
        errors += _validate_qualified_key(key, path)
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(
                fieldpath.invalid(
                    path.key(str(key)),
                    value,
                    "a label value must be an empty string or consist of alphanumeric characters, '-', '_' or "
                    "'.', start and end with an alphanumeric character, and be at most 63 characters",
                )
            )
    return errors


def validate_metadata(metadata: Any, dns_label_names: bool) -> list[FieldError]:
    """Generic ObjectMeta checks: name, labels, annotations, finalizers, ownerReferences."""
    path = Path("metadata")
    if not isinstance(metadata, dict):
        return [fieldpath.required(path, "an object needs metadata with a name")]
    errors: list[FieldError] = []
    name = metadata.get("name")
    if not name:
        errors.append(fieldpath.required(path.child("name"), "name or generateName is required"))
    elif not isinstance(name, str):
        errors.append(fieldpath.invalid(path.child("name"), name, "must be a string"))
    else:
        errors += validate_name(name, path.child("name"), dns_label_names)
    labels = metadata.get("labels")
    if labels is not None:
        errors += validate_labels(labels, path.child("labels"))
    annotations = metadata.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            errors.append(fieldpath.invalid(path.child("annotations"), None, "must be a map of strings to strings"))
        else:
            size = 0
            for key, value in annotations.items():
                errors += _validate_qualified_key(key, path.child("annotations"))
                size += len(str(key)) + len(value)
            if size > ANNOTATIONS_MAX_BYTES:
                errors.append(fieldpath.too_long(path.child("annotations"), ANNOTATIONS_MAX_BYTES))
    errors += _validate_finalizers(metadata.get("finalizers"), path.child("finalizers"))
    errors += _validate_owner_references(metadata.get("ownerReferences"), path.child("ownerReferences"))
    return errors


def _validate_finalizers(finalizers: Any, path: Path) -> list[FieldError]:
    if finalizers is None:
        return []
    if not isinstance(finalizers, list):
        return [fieldpath.invalid(path, None, "must be a list of strings")]
    errors = []
    for i, item in enumerate(finalizers):
        if not isinstance(item, str) or not item:
            errors.append(fieldpath.invalid(path.index(i), item, "must be a non-empty string"))
        elif "/" not in item and item not in ("orphan", "foregroundDeletion"):
            errors.append(
                fieldpath.invalid(
                    path.index(i),
                    item,
                    "a finalizer must be domain-qualified, such as "
                    "'example.com/cleanup' (or the built-in 'orphan' or 'foregroundDeletion')",
                )
            )
        else:
            errors += [e for e in _validate_qualified_key(item, path.index(i))]
    return errors


def _validate_owner_references(refs: Any, path: Path) -> list[FieldError]:
    if refs is None:
        return []
    if not isinstance(refs, list):
        return [fieldpath.invalid(path, None, "must be a list of owner references")]
    errors: list[FieldError] = []
    controllers = 0
    for i, ref in enumerate(refs):
        item = path.index(i)
        if not isinstance(ref, dict):
            errors.append(fieldpath.invalid(item, None, "must be an object"))
            continue
        for key in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref.get(key), str) or not ref.get(key):
                errors.append(fieldpath.required(item.child(key)))
        if ref.get("controller") is True:
            controllers += 1
    if controllers > 1:
        errors.append(fieldpath.invalid(path, None, "only one reference can have controller set to true"))
    return errors
