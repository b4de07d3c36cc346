"""The OpenAPI v2 (Swagger 2.0) document of the ``nodus.dev/v1`` group, shaped as kube-apiserver's for CRs.

Contract: for every kind, and only for the verbs its ``KindInfo.verbs`` allow, the document has

* the collection path (``/apis/nodus.dev/v1/namespaces/{namespace}/<plural>``, or ``/apis/nodus.dev/v1/
  <plural>`` for a cluster-scoped kind) with list (which is also watch, through ``?watch=true``), create
  and deletecollection; a namespaced kind also has the list across projects at
  ``/apis/nodus.dev/v1/<plural>``;
* the object path (``.../{name}``) with read, replace, patch and delete, and, when the kind has a
  status, ``.../{name}/status`` with read, replace and patch.

Each operation has a kube-style ``operationId`` (``listNodusDevV1NamespacedJob``,
``patchNodusDevV1NamespacedJobStatus``, ``deleteNodusDevV1CollectionNamespacedJob``...), the tag
``nodusDev_v1``, ``x-kubernetes-action`` and ``x-kubernetes-group-version-kind``, the query parameters
the server reads for that verb, and its responses: the success codes this server returns, 401, and a
``default`` response whose body is a ``Status``. PATCH consumes exactly JSON patch, JSON merge patch and
apply patch: never strategic merge patch, which this server refuses (415), so that ``kubectl apply``
computes a JSON merge patch for these kinds, as it does for CustomResources.

The document is plain JSON data; lists are in a fixed order, so it serializes deterministically.
"""

from __future__ import annotations

from typing import Any

from nodus.api.negotiation import APPLY_PATCH, JSON_PATCH, MERGE_PATCH
from nodus.api.openapi import definitions
from nodus.api.openapi.definitions import Schema, definition_name, group_version_kind, ref
from nodus.api.registry import API_VERSION, GROUP, VERSION, KindInfo, Registry

PREFIX = f"/apis/{API_VERSION}"
PATCH_TYPES = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
BODY_TYPES = ["application/json", "application/yaml"]
OBJECT_TYPES = ["application/json", "application/yaml"]
WATCH_STREAM = "application/json;stream=watch"
INFO = {"title": "Nodus", "version": VERSION, "description": f"The {API_VERSION} API of Nodus."}
SECURITY_DEFINITION = {
    "type": "apiKey",
    "name": "authorization",
    "in": "header",
    "description": "Bearer token authentication: Authorization: Bearer <token>.",
}


def _camel(text: str, capitalize_first: bool) -> str:
    """kube-openapi's operation-id spelling of a path segment: ``nodus.dev`` -> ``NodusDev``."""
    words = [w for w in text.replace("-", ".").replace("/", ".").split(".") if w]
    out = "".join(w[:1].upper() + w[1:] for w in words)
    return out if capitalize_first else out[:1].lower() + out[1:]


GROUP_VERSION_ID = _camel(GROUP, True) + _camel(VERSION, True)
TAG = f"{_camel(GROUP, False)}_{VERSION}"


# --- Parameters (Swagger 2.0 form).

# Every query parameter the server reads: its type and what it does.
QUERY_PARAMETERS: dict[str, tuple[str, str]] = {
    "allowWatchBookmarks": (
        "boolean",
        "With watch, ask for BOOKMARK events, which carry only a newer resourceVersion to resume from.",
    ),
    "continue": (
        "string",
        "The metadata.continue of the previous page, to get the next page of the same snapshot. "
        "It expires with the watch log's retention window (410 Expired).",
    ),
    "dryRun": ("string", "All: validate and admit the request, but persist nothing. All is the only value."),
    "fieldManager": (
        "string",
        "The name of the actor making the change, recorded in metadata.managedFields; "
        "required for apply patches. At most 128 characters.",
    ),
    "fieldSelector": (
        "string",
        "Select objects by fields (=, ==, !=): metadata.name, metadata.namespace and the kind's selectable fields.",
    ),
    "fieldValidation": (
        "string",
        "What to do with fields the schema does not declare and fields given twice: "
        "Ignore (drop them), Warn (drop them and say so in a Warning header; the default) or "
        "Strict (fail with 400).",
    ),
    "force": ("boolean", "For apply patches: take the fields other managers own instead of failing with a conflict."),
    "gracePeriodSeconds": (
        "integer",
        "Seconds the object is given to terminate; recorded as metadata.deletionGracePeriodSeconds.",
    ),
    "labelSelector": (
        "string",
        "Select objects by labels: k=v, k!=v, k in (a,b), k notin (a,b), k, !k, comma-separated.",
    ),
    "limit": (
        "integer",
        "The largest number of items to return; the list then carries metadata.continue when more remain.",
    ),
    "orphanDependents": ("boolean", "Deprecated: use propagationPolicy. True means Orphan, false Background."),
    "pretty": ("string", "Accepted for compatibility with Kubernetes clients; responses are always compact."),
    "propagationPolicy": (
        "string",
        "Whether and how dependents are garbage collected: Orphan leaves them, "
        "Background deletes them after the owner, Foreground before it.",
    ),
    "resourceVersion": (
        "string",
        "For list: how fresh the result must be (see resourceVersionMatch); for watch: "
        "the version after which changes are sent.",
    ),
    "resourceVersionMatch": ("string", "How resourceVersion applies to a list: Exact or NotOlderThan."),
    "sendInitialEvents": (
        "boolean",
        "With watch, resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true: "
        "first ADDED events for the current state, then a BOOKMARK annotated "
        "k8s.io/initial-events-end.",
    ),
    "timeoutSeconds": ("integer", "End the list or watch call after this many seconds."),
    "watch": (
        "boolean",
        "Watch for changes to the described objects instead of listing them: the response is a stream of WatchEvents.",
    ),
}
QUERY_ENUMS = {
    "fieldValidation": ["Ignore", "Strict", "Warn"],
    "propagationPolicy": ["Background", "Foreground", "Orphan"],
    "resourceVersionMatch": ["Exact", "NotOlderThan"],
}


def query(*names: str) -> list[Schema]:
    """The query parameters ``names``, as kube-apiserver writes them (``uniqueItems`` included)."""
    out = []
    for name in names:
        kind, description = QUERY_PARAMETERS[name]
        parameter = {"name": name, "in": "query", "type": kind, "uniqueItems": True, "description": description}
        if name in QUERY_ENUMS:
            parameter["enum"] = QUERY_ENUMS[name]
        out.append(parameter)
    return out


NAMESPACE = {
    "name": "namespace",
    "in": "path",
    "required": True,
    "type": "string",
    "uniqueItems": True,
    "description": "The project (namespace) the object belongs to.",
}
LIST_PARAMETERS = query(
    "continue", "fieldSelector", "labelSelector", "limit", "resourceVersion", "resourceVersionMatch", "timeoutSeconds"
)
WATCH_PARAMETERS = query(
    "allowWatchBookmarks", "resourceVersion", "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds", "watch"
)
WRITE_PARAMETERS = query("dryRun", "fieldManager", "fieldValidation")
DELETE_PARAMETERS = query("dryRun", "gracePeriodSeconds", "orphanDependents", "propagationPolicy")


def _name(info: KindInfo) -> Schema:
    return {**NAMESPACE, "name": "name", "description": f"The name of the {info.kind}."}


def _body(name: str, required: bool = True) -> Schema:
    return {"name": "body", "in": "body", "required": required, "schema": ref(name)}


def _sorted(parameters: list[Schema]) -> list[Schema]:
    """The body first, then the query parameters by name, each once (as kube-apiserver orders them)."""
    unique = {(p["in"], p["name"]): p for p in parameters}
    return sorted(unique.values(), key=lambda p: (p["in"] != "body", p["name"]))


# --- Operations.


def _responses(codes: dict[str, str], body: str) -> Schema:
    out: Schema = {code: {"description": text, "schema": ref(body)} for code, text in codes.items()}
    out["401"] = {"description": "Unauthorized"}
    out["default"] = {
        "description": "Error: the Status names the reason and what to do.",
        "schema": ref(definitions.STATUS),
    }
    return out


def _operation(
    info: KindInfo,
    verb: str,
    scope: str,
    action: str,
    summary: str,
    *,
    parameters: list[Schema],
    codes: dict[str, str],
    body: str,
    consumes: list[str],
    produces: list[str],
) -> Schema:
    """One operation; ``verb`` and ``scope`` spell its id: ``<verb>NodusDevV1<scope>``."""
    return {
        "operationId": f"{verb}{GROUP_VERSION_ID}{scope}",
        "description": summary,
        "tags": [TAG],
        "consumes": consumes,
        "produces": produces,
        "parameters": _sorted(parameters),
        "responses": _responses(codes, body),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": group_version_kind(info.kind),
    }


def _collection_get(info: KindInfo, scope: str, description: str) -> Schema:
    parameters = (LIST_PARAMETERS if "list" in info.verbs else []) + (WATCH_PARAMETERS if "watch" in info.verbs else [])
    return _operation(
        info,
        "list",
        scope,
        "list" if "list" in info.verbs else "watch",
        description,
        parameters=parameters,
        codes={"200": "OK"},
        body=definition_name(info.list_kind),
        consumes=["*/*"],
        produces=[*OBJECT_TYPES, WATCH_STREAM],
    )


def _collection_path(info: KindInfo, scope: str) -> Schema:
    kind = definition_name(info.kind)
    item: Schema = {}
    if "list" in info.verbs or "watch" in info.verbs:
        item["get"] = _collection_get(info, scope, f"list or watch objects of kind {info.kind}")
    if "create" in info.verbs:
        item["post"] = _operation(
            info,
            "create",
            scope,
            "post",
            f"create a {info.kind}",
            parameters=[_body(kind), *WRITE_PARAMETERS],
            codes={"201": "Created"},
            body=kind,
            consumes=BODY_TYPES,
            produces=OBJECT_TYPES,
        )
    if "deletecollection" in info.verbs:
        item["delete"] = _operation(
            info,
            "delete",
            f"Collection{scope}",
            "deletecollection",
            f"delete collection of {info.kind}",
            parameters=[_body(definitions.DELETE_OPTIONS, False), *LIST_PARAMETERS, *DELETE_PARAMETERS],
            codes={"200": "OK: the objects deleted or marked for deletion"},
            body=definition_name(info.list_kind),
            consumes=BODY_TYPES,
            produces=OBJECT_TYPES,
        )
    return item


def _object_path(info: KindInfo, scope: str, subresource: str) -> Schema:
    kind = definition_name(info.kind)
    of = f" {subresource} of" if subresource else ""
    scope += subresource.title()
    item: Schema = {}
    if "get" in info.verbs:
        item["get"] = _operation(
            info,
            "read",
            scope,
            "get",
            f"read{of} the specified {info.kind}",
            parameters=[],
            codes={"200": "OK"},
            body=kind,
            consumes=["*/*"],
            produces=OBJECT_TYPES,
        )
    if "update" in info.verbs:
        item["put"] = _operation(
            info,
            "replace",
            scope,
            "put",
            f"replace{of} the specified {info.kind}",
            parameters=[_body(kind), *WRITE_PARAMETERS],
            codes={"200": "OK"},
            body=kind,
            consumes=BODY_TYPES,
            produces=OBJECT_TYPES,
        )
    if "patch" in info.verbs:
        created = {} if subresource else {"201": "Created: an apply patch created the object"}
        item["patch"] = _operation(
            info,
            "patch",
            scope,
            "patch",
            f"partially update{of} the specified {info.kind}",
            parameters=[_body(definitions.PATCH), *WRITE_PARAMETERS, *query("force")],
            codes={"200": "OK", **created},
            body=kind,
            consumes=PATCH_TYPES,
            produces=OBJECT_TYPES,
        )
    if "delete" in info.verbs and not subresource:
        item["delete"] = _operation(
            info,
            "delete",
            scope,
            "delete",
            f"delete a {info.kind}",
            parameters=[_body(definitions.DELETE_OPTIONS, False), *DELETE_PARAMETERS],
            codes={
                "200": "OK: the object was deleted",
                "202": "Accepted: the object is marked for deletion and waits for its finalizers",
            },
            body=kind,
            consumes=BODY_TYPES,
            produces=OBJECT_TYPES,
        )
    return item


def build_paths(registry: Registry) -> dict[str, Schema]:
    paths: dict[str, Schema] = {}

    def add(path: str, item: Schema, parameters: list[Schema]) -> None:
        if item:
            paths[path] = {"parameters": [*parameters, *query("pretty")], **item}

    for info in registry:
        if info.namespaced:
            collection = f"{PREFIX}/namespaces/{{namespace}}/{info.plural}"
            scope = f"Namespaced{info.kind}"
            if "list" in info.verbs or "watch" in info.verbs:
                across = {
                    "get": _collection_get(
                        info,
                        f"{info.kind}ForAllNamespaces",
                        f"list or watch objects of kind {info.kind} in every project",
                    )
                }
                add(f"{PREFIX}/{info.plural}", across, [])
            scoped = [NAMESPACE]
        else:
            collection, scope, scoped = f"{PREFIX}/{info.plural}", info.kind, []
        add(collection, _collection_path(info, scope), scoped)
        add(f"{collection}/{{name}}", _object_path(info, scope, ""), [_name(info), *scoped])
        if info.has_status:
            add(f"{collection}/{{name}}/status", _object_path(info, scope, "status"), [_name(info), *scoped])
        if info.has_log:
            add(f"{collection}/{{name}}/log", {"get": _log_get(info, scope)}, [_name(info), *scoped])
    return paths


_LOG_PARAMETERS: tuple[tuple[str, str, str], ...] = (
    ("follow", "boolean", "Stream new lines until the attempt ends."),
    ("limitBytes", "integer", "Stop after this many bytes."),
    ("sinceSeconds", "integer", "Only lines newer than this many seconds."),
    ("sinceTime", "string", "Only lines at or after this RFC 3339 time (not with sinceSeconds)."),
    ("stream", "string", "stdout, stderr or All (the default, interleaved in order)."),
    ("tailLines", "integer", "Only the last N lines."),
    ("timestamps", "boolean", "Prefix each line with its RFC 3339 time."),
)
_JOB_LOG_PARAMETERS: tuple[tuple[str, str, str], ...] = (
    ("attempt", "integer", "The attempt number within the index (default: the latest)."),
    ("index", "integer", "The Job index (default 0)."),
)


def _log_get(info: KindInfo, scope: str) -> Schema:
    """``GET .../{name}/log``: the attempt's stdout and stderr as plain text, like pods/log."""
    extra = _JOB_LOG_PARAMETERS if info.kind == "Job" else ()
    parameters = [
        {"name": name, "in": "query", "type": kind, "uniqueItems": True, "description": description}
        for name, kind, description in (*_LOG_PARAMETERS, *extra)
    ]
    return {
        "operationId": f"read{GROUP_VERSION_ID}{scope}Log",
        "description": f"read the log of the {info.kind}'s attempt (stdout and stderr)",
        "tags": [TAG],
        "consumes": ["*/*"],
        "produces": ["text/plain"],
        "parameters": _sorted(parameters),
        "responses": {
            "200": {"description": "OK", "schema": {"type": "string"}},
            "401": {"description": "Unauthorized"},
            "default": {
                "description": "Error: the Status names the reason and what to do.",
                "schema": ref(definitions.STATUS),
            },
        },
        "x-kubernetes-action": "get",
        "x-kubernetes-group-version-kind": group_version_kind(info.kind),
    }


def build_v2(registry: Registry) -> dict[str, Any]:
    """The Swagger 2.0 document of the group."""
    return {
        "swagger": "2.0",
        "info": INFO,
        "paths": build_paths(registry),
        "definitions": definitions.build_definitions(registry),
        "securityDefinitions": {"BearerToken": SECURITY_DEFINITION},
        "security": [{"BearerToken": []}],
    }
