"""The OpenAPI v3 documents: the group document of ``nodus.dev/v1`` and the ``/openapi/v3`` index.

The group document is the v2 document (see ``v2``) written in OpenAPI 3.0 form, the way
kube-apiserver publishes its per-group-version documents:

* ``paths`` are the same absolute paths (``/apis/nodus.dev/v1/...``): ``kubectl explain`` looks an
  operation up by them to learn the kind it explains;
* a parameter's type moves into ``schema``; a body parameter becomes ``requestBody`` with one
  ``content`` entry per media type the operation consumes (PATCH: exactly JSON patch, JSON merge
  patch and apply patch; ``kubectl apply`` reads their absence of strategic merge patch);
* a response's schema is given per media type the operation produces, where
  ``application/json;stream=watch`` carries ``WatchEvent``s; the ``default`` (error) response is JSON;
* definitions become ``components.schemas`` of the same names, references point there, and a
  reference with siblings (a description) becomes ``allOf: [{$ref}]`` beside them, since OpenAPI 3.0
  ignores the siblings of a bare ``$ref``.

The index maps ``apis/nodus.dev/v1`` to ``/openapi/v3/apis/nodus.dev/v1?hash=<H>``, where H is the
upper-case hexadecimal SHA-512 of the group document as served (:func:`serialize`), as
kube-apiserver computes it; clients cache a document under its hash.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from nodus.api.openapi.definitions import WATCH_EVENT, Schema
from nodus.api.openapi.v2 import SECURITY_DEFINITION, WATCH_STREAM, build_v2
from nodus.api.registry import API_VERSION, Registry

GROUP_PATH = f"apis/{API_VERSION}"
GROUP_URL = f"/openapi/v3/{GROUP_PATH}"
_V2_PREFIX = "#/definitions/"
_V3_PREFIX = "#/components/schemas/"
_ERROR_TYPES = ["application/json"]


def serialize(document: dict[str, Any]) -> bytes:
    """The served form of a document: compact JSON with sorted keys (what the hash is computed over)."""
    return orjson.dumps(document, option=orjson.OPT_SORT_KEYS)


def digest(body: bytes) -> str:
    """kube-apiserver's hash of a served document: upper-case hexadecimal SHA-512."""
    return hashlib.sha512(body).hexdigest().upper()


def _schema(node: Any) -> Any:
    """A v2 schema in v3 form: references into components, siblings of a reference beside ``allOf``."""
    if isinstance(node, list):
        return [_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _schema(value) for key, value in node.items() if key != "$ref"}
    if "$ref" in node:
        target = {"$ref": str(node["$ref"]).replace(_V2_PREFIX, _V3_PREFIX, 1)}
        if not out:
            return target
        out["allOf"] = [target]
    return out


def _parameter(parameter: Schema) -> Schema:
    schema = {key: parameter[key] for key in ("type", "uniqueItems", "enum") if key in parameter}
    out: Schema = {key: parameter[key] for key in ("name", "in", "description", "required") if key in parameter}
    out["schema"] = schema
    return out


def _response(response: Schema, media_types: list[str]) -> Schema:
    out: Schema = {"description": response["description"]}
    if "schema" in response:
        schema = _schema(response["schema"])
        watch_event = {"$ref": _V3_PREFIX + WATCH_EVENT}
        out["content"] = {media: {"schema": watch_event if media == WATCH_STREAM else schema} for media in media_types}
    return out


def _operation(operation: Schema) -> Schema:
    out: Schema = {
        key: value for key, value in operation.items() if key not in ("consumes", "produces", "parameters", "responses")
    }
    parameters = []
    for parameter in operation["parameters"]:
        if parameter["in"] == "body":
            content = {media: {"schema": _schema(parameter["schema"])} for media in operation["consumes"]}
            out["requestBody"] = {"content": content, "required": parameter["required"]}
        else:
            parameters.append(_parameter(parameter))
    if parameters:
        out["parameters"] = parameters
    out["responses"] = {
        code: _response(response, _ERROR_TYPES if code == "default" else operation["produces"])
        for code, response in operation["responses"].items()
    }
    return out


def _path_item(item: Schema) -> Schema:
    out: Schema = {}
    for key, value in item.items():
        out[key] = [_parameter(p) for p in value] if key == "parameters" else _operation(value)
    return out


def build_v3_group(registry: Registry) -> dict[str, Any]:
    """The OpenAPI 3.0 document of ``nodus.dev/v1``."""
    v2 = build_v2(registry)
    return {
        "openapi": "3.0.0",
        "info": v2["info"],
        "paths": {path: _path_item(item) for path, item in v2["paths"].items()},
        "components": {
            "schemas": {name: _schema(schema) for name, schema in v2["definitions"].items()},
            "securitySchemes": {"BearerToken": SECURITY_DEFINITION},
        },
        "security": v2["security"],
    }


def build_v3_index(registry: Registry) -> dict[str, Any]:
    """The ``/openapi/v3`` discovery document: where the group document is, under its current hash."""
    url = f"{GROUP_URL}?hash={digest(serialize(build_v3_group(registry)))}"
    return {"paths": {GROUP_PATH: {"serverRelativeURL": url}}}
