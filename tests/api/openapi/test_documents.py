"""The OpenAPI v2 and v3 documents: what kubectl, server-side apply clients and code generators rely on.

``kubectl explain`` finds a kind by the ``x-kubernetes-group-version-kind`` of the operations on its
absolute paths and of its schema; ``kubectl apply`` computes a JSON merge patch when the PATCH
operation does not list strategic merge patch, and sends ``fieldValidation`` when the PATCH operation
declares it. The last section checks the endpoints that serve the documents.
"""

from __future__ import annotations

import types
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nodus.api.errors import APIError
from nodus.api.http.responses import error_response
from nodus.api.kinds import catalog
from nodus.api.openapi import build_v2, build_v3_group, build_v3_index, serve_v2, serve_v3_group, serve_v3_index
from nodus.api.openapi.v3 import digest, serialize
from nodus.api.registry import KindInfo, Registry

Schema = dict[str, Any]
PREFIX = "/apis/nodus.dev/v1"
PATCH_TYPES = {"application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"}
LIST_QUERY = {
    "labelSelector",
    "fieldSelector",
    "limit",
    "continue",
    "resourceVersion",
    "resourceVersionMatch",
    "timeoutSeconds",
}
WATCH_QUERY = {"watch", "allowWatchBookmarks", "sendInitialEvents", "resourceVersion", "timeoutSeconds"}
WRITE_QUERY = {"dryRun", "fieldManager", "fieldValidation"}
DELETE_QUERY = {"dryRun", "propagationPolicy", "gracePeriodSeconds", "orphanDependents"}


@pytest.fixture(scope="module")
def registry() -> Registry:
    return catalog.registry()


@pytest.fixture(scope="module")
def v2(registry: Registry) -> Schema:
    return build_v2(registry)


@pytest.fixture(scope="module")
def v3(registry: Registry) -> Schema:
    return build_v3_group(registry)


def kinds(registry: Registry) -> list[KindInfo]:
    return list(registry)


def collection_path(info: KindInfo) -> str:
    return f"{PREFIX}/namespaces/{{namespace}}/{info.plural}" if info.namespaced else f"{PREFIX}/{info.plural}"


def resolve(document: Schema, schema: Schema) -> Schema:
    """Follow ``$ref`` and single-element ``allOf`` (with its siblings) to the schema they name."""
    while True:
        if "$ref" in schema:
            *_, section, name = schema["$ref"].split("/")
            store = document["definitions"] if section == "definitions" else document["components"]["schemas"]
            schema = {**store[name], **{k: v for k, v in schema.items() if k != "$ref"}}
        elif len(schema.get("allOf", [])) == 1:
            schema = {**schema["allOf"][0], **{k: v for k, v in schema.items() if k != "allOf"}}
        else:
            return schema


def at(document: Schema, schema: Schema, path: str) -> Schema:
    """The schema of a dotted field path, descending through arrays."""
    for part in path.split("."):
        schema = resolve(document, schema)
        while schema.get("type") == "array":
            schema = resolve(document, schema["items"])
        schema = schema["properties"][part]
    return resolve(document, schema)


def schemas_of(document: Schema) -> Schema:
    return document.get("definitions") or document["components"]["schemas"]


def walk(schema: Any, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Every schema node below ``schema`` (properties, items, map values) with its dotted path."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}" if path else name)
    yield from walk(schema.get("items"), f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from refs(item)


# --- Schemas.


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_every_kind_and_list_has_a_schema_with_its_group_version_kind(
    version: str, registry: Registry, v2: Schema, v3: Schema
) -> None:
    schemas = schemas_of(v2 if version == "v2" else v3)
    for info in registry:
        for kind in (info.kind, info.list_kind):
            schema = schemas[f"dev.nodus.v1.{kind}"]
            assert schema["x-kubernetes-group-version-kind"] == [{"group": "nodus.dev", "kind": kind, "version": "v1"}]
        assert schemas[f"dev.nodus.v1.{info.kind}"]["description"] == info.description


def test_meta_definitions_follow_kube_apiserver_names(v2: Schema, v3: Schema) -> None:
    meta = "io.k8s.apimachinery.pkg.apis.meta.v1"
    for name in ("ObjectMeta", "ListMeta", "Status", "Patch", "DeleteOptions", "Preconditions", "WatchEvent"):
        assert f"{meta}.{name}" in v2["definitions"]
        assert f"{meta}.{name}" in v3["components"]["schemas"]
    job_schema = v2["definitions"]["dev.nodus.v1.Job"]
    assert job_schema["properties"]["metadata"]["$ref"] == f"#/definitions/{meta}.ObjectMeta"
    v3_metadata = v3["components"]["schemas"]["dev.nodus.v1.Job"]["properties"]["metadata"]
    assert v3_metadata["allOf"] == [{"$ref": f"#/components/schemas/{meta}.ObjectMeta"}]
    assert "description" in v3_metadata
    list_meta = v2["definitions"]["dev.nodus.v1.JobList"]["properties"]["metadata"]
    assert list_meta["$ref"] == f"#/definitions/{meta}.ListMeta"


def test_every_reference_resolves(v2: Schema, v3: Schema) -> None:
    for document, prefix, store in (
        (v2, "#/definitions/", v2["definitions"]),
        (v3, "#/components/schemas/", v3["components"]["schemas"]),
    ):
        for target in refs(document):
            assert target.startswith(prefix) and target.removeprefix(prefix) in store, target


def test_every_jobspec_field_is_described(v2: Schema, v3: Schema) -> None:
    for document in (v2, v3):
        spec = schemas_of(document)["dev.nodus.v1.Job"]["properties"]["spec"]
        undescribed = [
            path for path, node in walk(spec) if path and not path.endswith(("[]", "}")) and not node.get("description")
        ]
        assert undescribed == []
        assert len(list(walk(spec))) > 50


def test_spec_and_status_are_structural(v2: Schema, registry: Registry) -> None:
    for info in registry:
        for path, node in walk(v2["definitions"][f"dev.nodus.v1.{info.kind}"]):
            assert not {"anyOf", "oneOf", "allOf", "$defs", "title", "const"} & node.keys(), path
            assert node.get("additionalProperties") is not False, path
            assert "default" not in node or node["default"] is not None, path
            if "properties" in node:
                assert node["type"] == "object", path
            if node.get("type") == "integer":
                assert node["format"] in ("int32", "int64"), path


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("spec.state", {"enum": ["Running", "Suspended", "Cancelled"], "default": "Running"}, id="state"),
        pytest.param("spec.parallelism", {"minimum": 1, "maximum": 256, "format": "int32"}, id="parallelism"),
        pytest.param("spec.backoffLimit", {"minimum": 0, "maximum": 100, "default": 6}, id="backoff-limit"),
        pytest.param("spec.completions", {"minimum": 1, "maximum": 10000}, id="completions"),
        pytest.param("spec.recovery.maxAttempts", {"minimum": 1, "maximum": 32}, id="max-attempts"),
        pytest.param("spec.recovery.checkpoint.format", {"enum": ["Snapshot", "Dcp"]}, id="checkpoint-format"),
        pytest.param("spec.recovery.checkpoint.maxSize", {"format": "quantity", "default": "1Ti"}, id="max-size"),
        pytest.param("spec.recovery.checkpoint.paths", {"maxItems": 64, "type": "array"}, id="checkpoint-paths"),
        pytest.param("spec.outputs", {"maxItems": 32}, id="outputs"),
        pytest.param("spec.outputs.name", {"pattern": "^[a-z0-9._-]{1,64}$"}, id="output-name"),
        pytest.param("spec.distributed.nodes", {"minimum": 2, "maximum": 16}, id="gang-nodes"),
        pytest.param("spec.resources.gpu.count", {"enum": [1, 2, 4, 8], "type": "integer"}, id="gpu-count"),
        pytest.param("spec.timeout", {"format": "duration", "type": "string"}, id="timeout"),
        pytest.param("spec.maxCostUSD", {"format": "decimal", "type": "string"}, id="max-cost"),
        pytest.param("spec.completeByTime", {"format": "date-time"}, id="complete-by"),
        pytest.param("spec.resources.memory", {"format": "quantity"}, id="memory"),
        pytest.param("status.phase", {"type": "string"}, id="phase"),
        pytest.param("status.storage.bytes", {"format": "int64"}, id="storage-bytes"),
        pytest.param("status.checkpoint.size", {"format": "int64"}, id="checkpoint-size"),
        pytest.param("status.observedGeneration", {"format": "int64"}, id="observed-generation"),
        pytest.param("status.failed", {"format": "int32"}, id="failed"),
    ],
)
def test_job_constraints_reach_the_documents(path: str, expected: Schema, v2: Schema, v3: Schema) -> None:
    for document in (v2, v3):
        schema = at(document, schemas_of(document)["dev.nodus.v1.Job"], path)
        assert {key: schema.get(key) for key in expected} == expected
        assert schema.get("description")


def test_list_map_keys_survive(v2: Schema, v3: Schema, registry: Registry) -> None:
    declared = 0
    for info in registry:
        for document in (v2, v3):
            for path, keys in info.list_map_keys.items():
                schema = at(document, schemas_of(document)[f"dev.nodus.v1.{info.kind}"], path)
                assert schema["x-kubernetes-list-type"] == "map", path
                assert schema["x-kubernetes-list-map-keys"] == list(keys), path
                declared += 1
    assert declared >= 4
    conditions = at(v3, schemas_of(v3)["dev.nodus.v1.Job"], "status.conditions")
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


# --- Paths and operations.


def operations(path_item: Schema) -> dict[str, Schema]:
    return {method: op for method, op in path_item.items() if method != "parameters"}


def parameter_names(path_item: Schema, operation: Schema, where: str = "query") -> set[str]:
    both = [*path_item.get("parameters", []), *operation.get("parameters", [])]
    return {p["name"] for p in both if p["in"] == where}


def test_job_operations_have_kube_style_ids_and_actions(v2: Schema) -> None:
    paths = v2["paths"]
    namespaced = f"{PREFIX}/namespaces/{{namespace}}/jobs"
    expected = {
        (f"{PREFIX}/jobs", "get"): ("listNodusDevV1JobForAllNamespaces", "list"),
        (namespaced, "get"): ("listNodusDevV1NamespacedJob", "list"),
        (namespaced, "post"): ("createNodusDevV1NamespacedJob", "post"),
        (namespaced, "delete"): ("deleteNodusDevV1CollectionNamespacedJob", "deletecollection"),
        (f"{namespaced}/{{name}}", "get"): ("readNodusDevV1NamespacedJob", "get"),
        (f"{namespaced}/{{name}}", "put"): ("replaceNodusDevV1NamespacedJob", "put"),
        (f"{namespaced}/{{name}}", "patch"): ("patchNodusDevV1NamespacedJob", "patch"),
        (f"{namespaced}/{{name}}", "delete"): ("deleteNodusDevV1NamespacedJob", "delete"),
        (f"{namespaced}/{{name}}/status", "get"): ("readNodusDevV1NamespacedJobStatus", "get"),
        (f"{namespaced}/{{name}}/status", "put"): ("replaceNodusDevV1NamespacedJobStatus", "put"),
        (f"{namespaced}/{{name}}/status", "patch"): ("patchNodusDevV1NamespacedJobStatus", "patch"),
    }
    for (path, method), (operation_id, action) in expected.items():
        operation = paths[path][method]
        assert (operation["operationId"], operation["x-kubernetes-action"]) == (operation_id, action)
        assert operation["x-kubernetes-group-version-kind"] == {"group": "nodus.dev", "kind": "Job", "version": "v1"}
        assert operation["tags"] == ["nodusDev_v1"]
    assert set(operations(paths[f"{PREFIX}/jobs"])) == {"get"}


def test_every_verb_of_every_kind_has_its_operation(v2: Schema, registry: Registry) -> None:
    paths = v2["paths"]
    for info in registry:
        collection, item = paths[collection_path(info)], paths[f"{collection_path(info)}/{{name}}"]
        verbs = [
            ("list", collection, "get"),
            ("create", collection, "post"),
            ("deletecollection", collection, "delete"),
            ("get", item, "get"),
            ("update", item, "put"),
            ("patch", item, "patch"),
            ("delete", item, "delete"),
        ]
        for verb, path_item, method in verbs:
            assert (method in path_item) == (verb in info.verbs), (info.kind, verb)
        if info.has_status:
            assert set(operations(paths[f"{collection_path(info)}/{{name}}/status"])) <= {"get", "put", "patch"}
        if not info.namespaced:
            assert f"{PREFIX}/namespaces/{{namespace}}/{info.plural}" not in paths
    ids = [op["operationId"] for item in paths.values() for op in operations(item).values()]
    assert len(ids) == len(set(ids))


def test_parameters_of_each_verb(v2: Schema, registry: Registry) -> None:
    for info in registry:
        base = collection_path(info)
        collection, item = v2["paths"][base], v2["paths"][f"{base}/{{name}}"]
        path_params = {"namespace"} if info.namespaced else set()
        assert parameter_names(collection, collection["get"], "path") == path_params
        assert parameter_names(item, item["get"], "path") == path_params | {"name"}
        assert parameter_names(collection, collection["get"]) >= LIST_QUERY | WATCH_QUERY | {"pretty"}
        # Only the verbs a kind serves have operations (Offerings: get, list, watch, update, patch).
        expected = [
            (collection, "post", "create", WRITE_QUERY),
            (collection, "delete", "deletecollection", LIST_QUERY | DELETE_QUERY),
            (item, "put", "update", WRITE_QUERY),
            (item, "patch", "patch", WRITE_QUERY | {"force"}),
            (item, "delete", "delete", DELETE_QUERY),
        ]
        for path_item, method, verb, wanted in expected:
            if verb in info.verbs:
                assert parameter_names(path_item, path_item[method]) >= wanted, (info.kind, verb)
        for parameter in collection["parameters"] + item["parameters"]:
            if parameter["in"] == "path":
                assert parameter["required"] is True and parameter["type"] == "string"
        if "patch" in info.verbs:
            body = {p["name"]: p for p in item["patch"]["parameters"] if p["in"] == "body"}["body"]
            assert body["schema"] == {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}


def test_patch_never_offers_strategic_merge(v2: Schema, v3: Schema) -> None:
    for path, item in v2["paths"].items():
        if "patch" in item:
            assert set(item["patch"]["consumes"]) == PATCH_TYPES, path
            assert len(item["patch"]["consumes"]) == 3
    for path, item in v3["paths"].items():
        if "patch" in item:
            assert set(item["patch"]["requestBody"]["content"]) == PATCH_TYPES, path
            # kubectl's field-validation check reads the PATCH operation's own parameters.
            assert "fieldValidation" in {p["name"] for p in item["patch"]["parameters"]}, path
    assert "strategic-merge-patch" not in serialize(v2).decode() + serialize(v3).decode()


def test_responses_end_with_status_and_unauthorized(v2: Schema, v3: Schema) -> None:
    status = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
    for item in v2["paths"].values():
        for operation in operations(item).values():
            responses = operation["responses"]
            assert responses["default"]["schema"] == {"$ref": f"#/definitions/{status}"}
            assert "401" in responses and any(code.startswith("2") for code in responses)
    for item in v3["paths"].values():
        for operation in operations(item).values():
            default = operation["responses"]["default"]["content"]["application/json"]["schema"]
            assert default == {"$ref": f"#/components/schemas/{status}"}


def test_v3_list_responses_and_request_bodies(v3: Schema) -> None:
    collection = v3["paths"][f"{PREFIX}/namespaces/{{namespace}}/jobs"]
    content = collection["get"]["responses"]["200"]["content"]
    assert set(content) == {"application/json", "application/yaml", "application/json;stream=watch"}
    assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/dev.nodus.v1.JobList"}
    watch_event = {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent"}
    assert content["application/json;stream=watch"]["schema"] == watch_event
    create = collection["post"]
    assert create["requestBody"]["required"] is True
    assert create["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/dev.nodus.v1.Job"
    }
    assert set(create["responses"]) == {"201", "401", "default"}
    watch = {p["name"]: p for p in collection["get"]["parameters"]}["watch"]
    assert watch["in"] == "query" and watch["schema"]["type"] == "boolean"
    assert v3["openapi"] == "3.0.0" and all(path.startswith(PREFIX) for path in v3["paths"])


def test_documents_are_deterministic(registry: Registry) -> None:
    assert serialize(build_v2(registry)) == serialize(build_v2(catalog.registry()))
    assert serialize(build_v3_group(registry)) == serialize(build_v3_group(catalog.registry()))


def test_index_names_the_group_document_by_its_hash(registry: Registry, v3: Schema) -> None:
    url = build_v3_index(registry)["paths"]["apis/nodus.dev/v1"]["serverRelativeURL"]
    expected = digest(serialize(v3))
    assert url == f"/openapi/v3/apis/nodus.dev/v1?hash={expected}"
    assert expected == expected.upper() and len(expected) == 128


# --- Serving.


@pytest.fixture
async def client(registry: Registry) -> AsyncIterator[httpx.AsyncClient]:
    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, APIError)
        return error_response(request, exc)

    routes = [
        Route("/openapi/v2", serve_v2),
        Route("/openapi/v3", serve_v3_index),
        Route("/openapi/v3/apis/nodus.dev/v1", serve_v3_group),
    ]
    app = Starlette(routes=routes, exception_handlers={APIError: api_error})
    app.state.server = types.SimpleNamespace(registry=registry, settings=types.SimpleNamespace(external_url=""))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://nodus.test") as http:
        yield http


@pytest.mark.parametrize(
    "accept",
    [None, "application/json", "*/*", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf, application/json"],
)
async def test_v2_is_served_as_json(client: httpx.AsyncClient, accept: str | None, v2: Schema) -> None:
    response = await client.get("/openapi/v2", headers={"Accept": accept} if accept else {})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == v2
    assert response.headers["etag"] == f'"{digest(response.content)}"'


@pytest.mark.parametrize(
    "accept", ["application/com.github.proto-openapi.spec.v2@v1.0+protobuf", "application/json;q=0"]
)
async def test_v2_refuses_a_client_that_does_not_accept_json(client: httpx.AsyncClient, accept: str) -> None:
    response = await client.get("/openapi/v2", headers={"Accept": accept})
    assert response.status_code == 406
    assert response.json()["reason"] == "NotAcceptable"


@pytest.mark.parametrize("path", ["/openapi/v2", "/openapi/v3", "/openapi/v3/apis/nodus.dev/v1"])
async def test_if_none_match_is_answered_not_modified(client: httpx.AsyncClient, path: str) -> None:
    etag = (await client.get(path)).headers["etag"]
    again = await client.get(path, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == etag
    assert (await client.get(path, headers={"If-None-Match": '"other"'})).status_code == 200


async def test_group_document_is_immutable_under_its_hash(client: httpx.AsyncClient, v3: Schema) -> None:
    url = (await client.get("/openapi/v3")).json()["paths"]["apis/nodus.dev/v1"]["serverRelativeURL"]
    response = await client.get(url)
    assert response.status_code == 200 and response.json() == v3
    assert response.headers["cache-control"] == "public, immutable"
    assert response.headers["etag"] == f'"{url.rsplit("=", 1)[1]}"'
    unhashed = await client.get("/openapi/v3/apis/nodus.dev/v1")
    assert unhashed.status_code == 200 and "cache-control" not in unhashed.headers
    stale = await client.get("/openapi/v3/apis/nodus.dev/v1?hash=0123")
    assert stale.status_code == 301 and stale.headers["location"] == url
    cached = await client.get(url, headers={"If-None-Match": response.headers["etag"]})
    assert cached.status_code == 304
