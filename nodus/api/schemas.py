"""JSON schemas of whole objects, shared by unknown-field detection and the OpenAPI documents.

A kind's schema is built once from its pydantic models plus the standard Kubernetes meta types
(ObjectMeta, ListMeta, Status, ...), which are written out here as kube-apiserver publishes them.
"""

from __future__ import annotations

import functools
from typing import Any

from nodus.api.registry import API_VERSION, KindInfo

Schema = dict[str, Any]
META = "io.k8s.apimachinery.pkg.apis.meta.v1"


def _string(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def _time(description: str) -> Schema:
    return {"type": "string", "format": "date-time", "description": description}


def _map(description: str) -> Schema:
    return {"type": "object", "additionalProperties": {"type": "string"}, "description": description}


OWNER_REFERENCE: Schema = {
    "type": "object",
    "description": "OwnerReference contains enough information to let you identify an owning object. "
    "Owners are deleted before their dependents; deleting an owner deletes its dependents (garbage collection).",
    "required": ["apiVersion", "kind", "name", "uid"],
    "properties": {
        "apiVersion": _string("API version of the referent."),
        "blockOwnerDeletion": {
            "type": "boolean",
            "description": "If true, the owner cannot be deleted in the foreground until this reference is removed.",
        },
        "controller": {"type": "boolean", "description": "If true, this reference points to the managing controller."},
        "kind": _string("Kind of the referent."),
        "name": _string("Name of the referent."),
        "uid": _string("UID of the referent."),
    },
    "x-kubernetes-map-type": "atomic",
}

MANAGED_FIELDS_ENTRY: Schema = {
    "type": "object",
    "description": "ManagedFieldsEntry is a workflow-id, a FieldSet and the group version of the resource that "
    "the fieldset applies to.",
    "properties": {
        "apiVersion": _string("The version of the resource this field set applies to."),
        "fieldsType": _string('The format of the fields; the only value is "FieldsV1".'),
        "fieldsV1": {"type": "object", "description": "The set of fields owned, in FieldsV1 format."},
        "manager": _string("The workflow managing these fields."),
        "operation": _string("Apply or Update: the kind of operation that owns these fields."),
        "subresource": _string("The subresource the fields were written through, for example status."),
        "time": _time("When these fields were last changed by this manager."),
    },
}

OBJECT_META: Schema = {
    "type": "object",
    "description": "ObjectMeta is metadata that all persisted resources must have. For namespaced kinds the "
    "namespace is the Nodus project.",
    "properties": {
        "annotations": _map(
            "Annotations is an unstructured key value map stored with a resource. Nodus reads "
            "nodus.dev/<action>-requested-at annotations as requested actions."
        ),
        "creationTimestamp": _time("When the object was created (set by the server)."),
        "deletionGracePeriodSeconds": {
            "type": "integer",
            "format": "int64",
            "description": "Seconds allowed for graceful termination (set by the server).",
        },
        "deletionTimestamp": _time(
            "When deletion was requested; the object is removed once its finalizers are gone (set by the server)."
        ),
        "finalizers": {
            "type": "array",
            "items": {"type": "string"},
            "x-kubernetes-list-type": "set",
            "description": "Must be empty before the object is deleted from storage.",
        },
        "generateName": _string("A prefix the server uses to generate a unique name when name is not given."),
        "generation": {
            "type": "integer",
            "format": "int64",
            "description": "A sequence number of the desired state; it moves only when spec changes.",
        },
        "labels": _map("Map of string keys and values used to organise and select objects."),
        "managedFields": {
            "type": "array",
            "items": MANAGED_FIELDS_ENTRY,
            "description": "Which field manager owns which fields (server-side apply).",
        },
        "name": _string("Name is unique within a project (or the cluster, for cluster-scoped kinds)."),
        "namespace": _string("The project the object belongs to."),
        "ownerReferences": {
            "type": "array",
            "items": OWNER_REFERENCE,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["uid"],
            "description": "Objects this object depends on; it is garbage collected with them.",
        },
        "resourceVersion": _string(
            "An opaque value that changes on every write, for optimistic concurrency and watches."
        ),
        "selfLink": _string("Deprecated; always empty."),
        "uid": _string("Unique in time and space; a deleted and recreated object has a new uid."),
    },
}

LIST_META: Schema = {
    "type": "object",
    "description": "ListMeta describes a list: its resourceVersion and, for a chunked list, how to continue.",
    "properties": {
        "continue": _string(
            "Set when more items remain; pass it as ?continue= for the next page of the same "
            "snapshot. It expires with the watch log's retention window (410 Expired)."
        ),
        "remainingItemCount": {
            "type": "integer",
            "format": "int64",
            "description": "How many items follow this page in the same snapshot.",
        },
        "resourceVersion": _string("The version of the list; watch from it to see every later change."),
        "selfLink": _string("Deprecated; always empty."),
    },
}

STATUS_CAUSE: Schema = {
    "type": "object",
    "properties": {
        "field": _string("The field at fault, for example spec.parallelism."),
        "message": _string("What is wrong with it."),
        "reason": _string("A machine-readable cause, for example FieldValueInvalid."),
    },
}

STATUS: Schema = {
    "type": "object",
    "description": "Status is the error body of every API response: a Kubernetes metav1.Status (so kubectl and "
    "client-go understand it) plus three top-level extensions that those clients ignore (ADR-028).",
    "properties": {
        "apiVersion": _string("v1"),
        "code": {"type": "integer", "format": "int32", "description": "The HTTP status code."},
        "details": {
            "type": "object",
            "properties": {
                "causes": {
                    "type": "array",
                    "items": STATUS_CAUSE,
                    "description": "Every problem found, each naming its field.",
                },
                "group": _string("The API group of the resource."),
                "kind": _string("The kind or resource of the object."),
                "name": _string("The name of the object."),
                "retryAfterSeconds": {
                    "type": "integer",
                    "format": "int32",
                    "description": "When to retry, in seconds.",
                },
                "uid": _string("The uid of the object."),
            },
        },
        "docs": _string("Docs is the URL of the code's docs page."),
        "fix": _string("Fix says what to do next, for example a CLI command or the field to change."),
        "kind": _string("Status"),
        "message": _string("A human-readable description of the error."),
        "metadata": LIST_META,
        "reason": _string("A registered reason code, for example Invalid, Conflict or InsufficientCredits."),
        "requestId": _string("RequestID identifies the request in logs and support tickets."),
        "status": _string("Failure or Success."),
    },
}


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """Resolve pydantic's ``$ref``/``$defs`` and collapse ``Optional`` unions to the inner schema."""
    if isinstance(schema, list):
        return [_inline(item, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = defs[schema["$ref"].split("/")[-1]]
        merged = {**_inline(target, defs), **{k: v for k, v in schema.items() if k != "$ref"}}
        return _inline(merged, defs)
    any_of = schema.get("anyOf")
    if isinstance(any_of, list):
        branches = [b for b in any_of if b.get("type") != "null"]
        if len(branches) == 1:
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            return {**_inline(branches[0], defs), **_inline(rest, defs)}
    out = {k: _inline(v, defs) for k, v in schema.items() if k not in ("$defs", "title", "default")}
    if "default" in schema and not isinstance(schema["default"], dict | list) and schema["default"] is not None:
        out["default"] = schema["default"]
    return out


def model_schema(model: Any) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _inline(raw, raw.get("$defs", {}))  # type: ignore[no-any-return]


@functools.cache
def object_schema(info: KindInfo) -> Schema:
    """The resolved JSON schema of a whole object of this kind."""
    properties: Schema = {
        "apiVersion": _string(f"APIVersion is {API_VERSION}.", enum=[API_VERSION]),
        "kind": _string(f"Kind is {info.kind}.", enum=[info.kind]),
        "metadata": OBJECT_META,
    }
    if info.spec_model is not None:
        properties["spec"] = model_schema(info.spec_model)
    if info.status_model is not None:
        properties["status"] = model_schema(info.status_model)
    if info.top_level_model is not None:  # fields beside metadata, as a Secret's data and type
        properties.update(model_schema(info.top_level_model).get("properties") or {})
    return {"type": "object", "description": info.description, "properties": properties}


UnknownField = tuple[str, tuple[str | int, ...]]


def unknown_fields(value: Any, schema: Schema) -> list[UnknownField]:
    """Fields in ``value`` that ``schema`` does not declare (maps are open): each as its dotted path for
    messages (``spec.bogus``, ``spec.env[0].x``, ``metadata.labels[k]``) and the keys and indexes that
    lead to it, for :func:`drop_fields`. The keys are kept apart from the text because a key may hold
    anything, dots and brackets included, or be empty."""
    found: list[UnknownField] = []
    _unknown(value, schema, "", (), found)
    return found


def _unknown(value: Any, schema: Schema, path: str, parts: tuple[str | int, ...], found: list[UnknownField]) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties is None:
            additional = schema.get("additionalProperties")
            if isinstance(additional, dict):
                for key, item in value.items():
                    _unknown(item, additional, f"{path}[{key}]" if path else str(key), (*parts, key), found)
            return
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if key not in properties:
                found.append((child, (*parts, key)))
            else:
                _unknown(item, properties[key], child, (*parts, key), found)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                _unknown(item, items, f"{path}[{index}]", (*parts, index), found)


def drop_fields(value: dict[str, Any], fields: list[UnknownField]) -> None:
    """Remove the fields :func:`unknown_fields` reported."""
    for _, parts in fields:
        _drop(value, parts)


def _drop(value: Any, parts: tuple[str | int, ...]) -> None:
    for part in parts[:-1]:
        if isinstance(value, dict) and isinstance(part, str):
            value = value.get(part)
        elif isinstance(value, list) and isinstance(part, int) and part < len(value):
            value = value[part]
        else:
            return
    if isinstance(value, dict) and parts:
        value.pop(parts[-1], None)
