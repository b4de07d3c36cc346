"""Discovery: legacy (``/api``, ``/apis``, ``/apis/nodus.dev[/v1]``) and aggregated (v2).

This server has no core (``/api/v1``) resources, but answers those paths with empty documents so
that clients that always look there (kubectl, the kubernetes Python client) do not fail.
Aggregated discovery is served when the Accept header asks for ``APIGroupDiscoveryList``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from nodus import __version__
from nodus.api.http.responses import respond
from nodus.api.negotiation import parse_media_types
from nodus.api.registry import API_VERSION, GROUP, VERSION, KindInfo, Registry

KUBERNETES_VERSION = ("1", "35")
_AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_AGGREGATED_BETA = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"


def version() -> dict[str, Any]:
    major, minor = KUBERNETES_VERSION
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{major}.{minor}.0+nodus.{__version__}",
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-11-29T00:00:00Z",
        "goVersion": "python",
        "compiler": "cpython",
        "platform": "linux/amd64",
    }


def _aggregated_version(accept: str | None) -> str | None:
    for media in parse_media_types(accept):
        if media.type == "application/json" and media.params.get("as") == "APIGroupDiscoveryList":
            if media.params.get("g") == "apidiscovery.k8s.io" and media.params.get("v") in ("v2", "v2beta1"):
                return media.params["v"]
        elif media.type in ("application/json", "*/*") and "as" not in media.params:
            return None
    return None


def _aggregated_response(body: dict[str, Any], version: str) -> Response:
    body["apiVersion"] = f"apidiscovery.k8s.io/{version}"
    content = orjson.dumps(body)
    media = _AGGREGATED if version == "v2" else _AGGREGATED_BETA
    return Response(content, media_type=media, headers={"ETag": f'"{hashlib.sha256(content).hexdigest()[:32]}"'})


def api_versions(request: Request) -> Response:
    version = _aggregated_version(request.headers.get("accept"))
    if version:
        return _aggregated_response({"kind": "APIGroupDiscoveryList", "metadata": {}, "items": []}, version)
    return respond({"kind": "APIVersions", "versions": [], "serverAddressByClientCIDRs": []})


def core_resources(_: Request) -> Response:
    return respond({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": []})


def _verbs(info: KindInfo) -> list[str]:
    return sorted(info.verbs)


def _resources(registry: Registry) -> list[dict[str, Any]]:
    resources: list[dict[str, Any]] = []
    for info in registry:
        resource: dict[str, Any] = {
            "name": info.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": _verbs(info),
            "storageVersionHash": hashlib.sha256(f"{API_VERSION}/{info.kind}".encode()).hexdigest()[:12],
        }
        if info.short_names:
            resource["shortNames"] = list(info.short_names)
        if info.categories:
            resource["categories"] = list(info.categories)
        resources.append(resource)
        if info.has_status:
            resources.append(
                {
                    "name": f"{info.plural}/status",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if info.has_log:
            resources.append(
                {
                    "name": f"{info.plural}/log",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": ["get"],
                }
            )
    return resources


def _group() -> dict[str, Any]:
    version = {"groupVersion": API_VERSION, "version": VERSION}
    return {"name": GROUP, "versions": [version], "preferredVersion": version}


def api_groups(request: Request) -> Response:
    registry: Registry = request.app.state.server.registry
    version = _aggregated_version(request.headers.get("accept"))
    if version:
        return _aggregated_response(
            {"kind": "APIGroupDiscoveryList", "metadata": {}, "items": [_aggregated_group(registry)]}, version
        )
    return respond({"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group()]})


def api_group(_: Request) -> Response:
    return respond({"kind": "APIGroup", "apiVersion": "v1", **_group()})


def api_resources(request: Request) -> Response:
    registry: Registry = request.app.state.server.registry
    return respond(
        {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION, "resources": _resources(registry)}
    )


def _aggregated_group(registry: Registry) -> dict[str, Any]:
    resources = []
    for info in registry:
        kind = {"group": GROUP, "version": VERSION, "kind": info.kind}
        resource: dict[str, Any] = {
            "resource": info.plural,
            "responseKind": kind,
            "scope": "Namespaced" if info.namespaced else "Cluster",
            "singularResource": info.singular,
            "verbs": _verbs(info),
        }
        if info.short_names:
            resource["shortNames"] = list(info.short_names)
        if info.categories:
            resource["categories"] = list(info.categories)
        subresources = []
        if info.has_status:
            subresources.append({"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]})
        if info.has_log:
            subresources.append(
                {"subresource": "log", "responseKind": {"group": "", "kind": "", "version": ""}, "verbs": ["get"]}
            )
        if subresources:
            resource["subresources"] = subresources
        resources.append(resource)
    return {
        "metadata": {"name": GROUP, "creationTimestamp": None},
        "versions": [{"version": VERSION, "resources": resources, "freshness": "Current"}],
    }
