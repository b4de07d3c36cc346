"""The schema definitions both OpenAPI documents publish, named as kube-apiserver names them.

Contract:

* Every kind gets ``dev.nodus.v1.<Kind>`` and ``dev.nodus.v1.<Kind>List`` (the group reversed, as
  kube-apiserver names CustomResource definitions), each carrying ``x-kubernetes-group-version-kind``
  (``kubectl explain`` and ``kubectl apply`` find a kind's schema by it). ``metadata`` refers to the
  shared ``io.k8s.apimachinery.pkg.apis.meta.v1`` definitions; ``spec`` and ``status`` are inlined
  under the kind, as kube-apiserver does for CustomResources, so ``kubectl explain`` shows
  ``<Object>``, ``<[]Object>``, ``<string>``... with every field's description and enum.
* ``spec``/``status`` come from the kind's pydantic models, made structural: references resolved,
  ``Optional`` collapsed to its inner type, null defaults, titles and ``additionalProperties: false``
  dropped, ``additionalProperties: true`` written ``x-kubernetes-preserve-unknown-fields``, ``const``
  turned into ``enum``, exclusive bounds written the OpenAPI 2/3.0 way, and every integer given
  ``format: int32`` (counts) or ``int64`` (bytes, sizes in bytes, generations, sequence numbers,
  milliseconds, seconds, rows). Descriptions (a docstring's line breaks inside a paragraph become
  spaces), enums, ranges, patterns, list caps, formats and the ``x-kubernetes-*`` extensions pass
  through; the kind's ``list_map_keys`` are written on their lists.
* Definitions are written in OpenAPI v2 form: a reference is ``{"$ref": "#/definitions/<name>"}``,
  possibly with sibling ``description``. The v3 document rewrites them (see ``v3``).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from nodus.api import schemas
from nodus.api.registry import API_VERSION, GROUP, VERSION, KindInfo, Registry

Schema = dict[str, Any]

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
OBJECT_META = f"{META}.ObjectMeta"
LIST_META = f"{META}.ListMeta"
OWNER_REFERENCE = f"{META}.OwnerReference"
MANAGED_FIELDS_ENTRY = f"{META}.ManagedFieldsEntry"
STATUS = f"{META}.Status"
STATUS_DETAILS = f"{META}.StatusDetails"
STATUS_CAUSE = f"{META}.StatusCause"
PATCH = f"{META}.Patch"
DELETE_OPTIONS = f"{META}.DeleteOptions"
PRECONDITIONS = f"{META}.Preconditions"
WATCH_EVENT = f"{META}.WatchEvent"

_GVK = "x-kubernetes-group-version-kind"
_INT32_MAX = 2**31 - 1
_INT64_NAME_SUFFIXES = ("bytes", "generation", "seq", "ms", "seconds", "rows")


def definition_name(kind: str) -> str:
    """``dev.nodus.v1.<kind>``: the group's DNS labels reversed, then version and kind."""
    return ".".join([*reversed(GROUP.split(".")), VERSION, kind])


def ref(name: str, description: str | None = None) -> Schema:
    """A v2 reference to a definition, with the description of the place that refers to it."""
    out: Schema = {"$ref": f"#/definitions/{name}"}
    if description:
        out["description"] = description
    return out


def group_version_kind(kind: str, group: str = GROUP) -> dict[str, str]:
    return {"group": group, "kind": kind, "version": VERSION}


# --- The standard meta types, from nodus.api.schemas, with references where kube-apiserver has them.


def _meta_definitions() -> dict[str, Schema]:
    object_meta = copy.deepcopy(schemas.OBJECT_META)
    object_meta["properties"]["ownerReferences"]["items"] = ref(OWNER_REFERENCE)
    object_meta["properties"]["managedFields"]["items"] = ref(MANAGED_FIELDS_ENTRY)

    status = copy.deepcopy(schemas.STATUS)
    details = status["properties"].pop("details")
    details["description"] = "StatusDetails names the object an error is about and lists every cause."
    details["properties"]["causes"]["items"] = ref(STATUS_CAUSE)
    status["properties"]["details"] = ref(STATUS_DETAILS, "Details of the error, when the reason has any.")
    status["properties"]["metadata"] = ref(LIST_META, "Standard list metadata; always empty.")
    status[_GVK] = [group_version_kind("Status", group="")]

    cause = copy.deepcopy(schemas.STATUS_CAUSE)
    cause["description"] = "StatusCause is one problem with the request, naming the field at fault."

    string = {"type": "string"}
    return {
        OBJECT_META: object_meta,
        LIST_META: copy.deepcopy(schemas.LIST_META),
        OWNER_REFERENCE: copy.deepcopy(schemas.OWNER_REFERENCE),
        MANAGED_FIELDS_ENTRY: copy.deepcopy(schemas.MANAGED_FIELDS_ENTRY),
        STATUS: status,
        STATUS_DETAILS: details,
        STATUS_CAUSE: cause,
        PATCH: {
            "type": "object",
            "description": "Patch is the body of a PATCH request: a JSON patch, a JSON merge patch or a "
            "server-side apply configuration, as its Content-Type says.",
        },
        PRECONDITIONS: {
            "type": "object",
            "description": "Preconditions must hold for a delete to proceed; otherwise it fails with 409 Conflict.",
            "properties": {
                "resourceVersion": {**string, "description": "The object's current resourceVersion."},
                "uid": {**string, "description": "The object's uid."},
            },
        },
        DELETE_OPTIONS: {
            "type": "object",
            "description": "DeleteOptions may be provided when deleting an object.",
            "properties": {
                "apiVersion": {**string, "description": "v1, or omitted."},
                "dryRun": {
                    "type": "array",
                    "items": string,
                    "x-kubernetes-list-type": "atomic",
                    "description": 'When ["All"], the deletion is checked but not persisted.',
                },
                "gracePeriodSeconds": {
                    "type": "integer",
                    "format": "int64",
                    "description": "Seconds the object is given to terminate; recorded as "
                    "metadata.deletionGracePeriodSeconds.",
                },
                "kind": {**string, "description": "DeleteOptions, or omitted."},
                "orphanDependents": {
                    "type": "boolean",
                    "description": "Deprecated: use propagationPolicy. True means Orphan, false means Background.",
                },
                "preconditions": ref(PRECONDITIONS, "Must be fulfilled before the deletion is carried out."),
                "propagationPolicy": {
                    **string,
                    "enum": ["Background", "Foreground", "Orphan"],
                    "description": "Whether and how dependents are garbage collected: Orphan leaves them, "
                    "Background deletes them after the owner, Foreground before it.",
                },
            },
            _GVK: [group_version_kind("DeleteOptions", group=""), group_version_kind("DeleteOptions")],
        },
        WATCH_EVENT: {
            "type": "object",
            "description": "WatchEvent is one event of a watch stream (one JSON document per line).",
            "required": ["type", "object"],
            "properties": {
                "object": {
                    "type": "object",
                    "description": "The object for ADDED, MODIFIED and DELETED; a Status for ERROR; an object "
                    "carrying only metadata.resourceVersion (and annotations) for BOOKMARK.",
                },
                "type": {
                    **string,
                    "enum": ["ADDED", "BOOKMARK", "DELETED", "ERROR", "MODIFIED"],
                    "description": "What happened: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR.",
                },
            },
            _GVK: [group_version_kind("WatchEvent", group=""), group_version_kind("WatchEvent")],
        },
    }


# --- pydantic models -> structural schemas.


def model_schema(model: type[BaseModel]) -> Schema:
    """The structural, fully inlined schema of a spec or status model (see the module contract)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}), "", ())


def _structural(node: Schema, defs: dict[str, Schema], name: str, seen: tuple[str, ...]) -> Schema:
    node = {k: v for k, v in node.items() if k not in ("$defs", "title")}
    if "$ref" in node:
        target = node.pop("$ref").split("/")[-1]
        if target in seen:
            raise ValueError(f"{' -> '.join((*seen, target))}: a recursive model has no structural schema")
        return _merge(_structural(defs[target], defs, name, (*seen, target)), node, defs, name, seen)
    for combinator in ("allOf", "anyOf", "oneOf"):
        branches = node.get(combinator)
        if not isinstance(branches, list):
            continue
        kept = [b for b in branches if b.get("type") != "null"]
        if len(kept) == 1:
            del node[combinator]
            return _merge(_structural(kept[0], defs, name, seen), node, defs, name, seen)
        node[combinator] = [_structural(b, defs, name, seen) for b in kept]
        if combinator == "anyOf" and sorted(b.get("type", "") for b in kept) == ["integer", "string"]:
            del node["anyOf"]
            node["x-kubernetes-int-or-string"] = True
    return _shape(node, defs, name, seen)


def _merge(inner: Schema, outer: Schema, defs: dict[str, Schema], name: str, seen: tuple[str, ...]) -> Schema:
    """``inner`` with the keys written beside its reference (description, default...) taking precedence."""
    return {**inner, **_shape(outer, defs, name, seen)}


def _shape(node: Schema, defs: dict[str, Schema], name: str, seen: tuple[str, ...]) -> Schema:
    out: Schema = {}
    for key, value in node.items():
        if (key, value) in (("additionalProperties", False), ("default", None)):
            continue
        if key == "properties":
            out[key] = {prop: _structural(sub, defs, prop, seen) for prop, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _structural(value, defs, name, seen)
        elif key == "additionalProperties" and value is True:
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif key == "description" and isinstance(value, str):
            out[key] = _prose(value)
        elif key == "const":
            out.setdefault("enum", node.get("enum", [value]))
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        else:
            out[key] = value
    if out.get("type") == "integer" and "format" not in out:
        out["format"] = _integer_format(name, out)
    elif out.get("type") == "number" and "format" not in out:
        out["format"] = "double"
    return out


def _prose(text: str) -> str:
    """A docstring-wrapped description as prose: lines of a paragraph joined, paragraphs kept apart."""
    paragraphs = [" ".join(line.strip() for line in block.splitlines()) for block in text.strip().split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


def _integer_format(name: str, schema: Schema) -> str:
    """int64 for byte counts, generations, sequence numbers, milliseconds and seconds; int32 for counts."""
    lowered = name.lower()
    in_bytes = "bytes" in str(schema.get("description", "")).lower()
    maximum = schema.get("maximum")
    too_large = isinstance(maximum, int) and maximum > _INT32_MAX
    return "int64" if lowered.endswith(_INT64_NAME_SUFFIXES) or in_bytes or too_large else "int32"


def _mark_list_map_keys(schema: Schema, path: str, keys: tuple[str, ...], kind: str) -> None:
    """Write ``x-kubernetes-list-type: map`` and the keys on the list at the dotted ``path``."""
    node = schema
    for segment in path.split("."):
        while node.get("type") == "array":
            node = node["items"]
        child = node.get("properties", {}).get(segment.removesuffix("[]"))
        if child is None:
            raise ValueError(f"{kind}: list_map_keys names {path!r}, which the schema does not have")
        node = child
    if node.get("type") != "array":
        raise ValueError(f"{kind}: list_map_keys names {path!r}, which is not a list")
    node["x-kubernetes-list-type"] = "map"
    node["x-kubernetes-list-map-keys"] = list(keys)


# --- The kinds.


def _type_meta(kind: str) -> Schema:
    return {
        "apiVersion": {
            "type": "string",
            "description": f"APIVersion defines the versioned schema of this representation of an object: "
            f"{API_VERSION}.",
        },
        "kind": {
            "type": "string",
            "description": f"Kind is a string value representing the REST resource this object represents: {kind}.",
        },
    }


def kind_definition(info: KindInfo) -> Schema:
    properties: Schema = {
        **_type_meta(info.kind),
        "metadata": ref(OBJECT_META, "Standard object's metadata."),
    }
    if info.spec_model is not None:
        properties["spec"] = model_schema(info.spec_model)
    if info.status_model is not None:
        properties["status"] = model_schema(info.status_model)
    if info.top_level_model is not None:  # fields beside metadata, as a Secret's data and type
        properties.update(model_schema(info.top_level_model).get("properties") or {})
    schema: Schema = {
        "type": "object",
        "description": info.description,
        "properties": properties,
        _GVK: [group_version_kind(info.kind)],
    }
    for path, keys in sorted(info.list_map_keys.items()):
        _mark_list_map_keys(schema, path, keys, info.kind)
    return schema


def list_definition(info: KindInfo) -> Schema:
    return {
        "type": "object",
        "description": f"{info.list_kind} is a list of {info.kind}.",
        "required": ["items"],
        "properties": {
            **_type_meta(info.list_kind),
            "items": {
                "type": "array",
                "items": ref(definition_name(info.kind)),
                "description": f"List of {info.plural}.",
            },
            "metadata": ref(LIST_META, "Standard list metadata."),
        },
        _GVK: [group_version_kind(info.list_kind)],
    }


def build_definitions(registry: Registry) -> dict[str, Schema]:
    """Every definition the documents refer to, by name."""
    definitions = _meta_definitions()
    for info in registry:
        definitions[definition_name(info.kind)] = kind_definition(info)
        definitions[definition_name(info.list_kind)] = list_definition(info)
    return definitions
