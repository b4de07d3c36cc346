"""Validating list and watch query parameters (the full Kubernetes set; shardSelector refused)."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import orjson
from starlette.datastructures import QueryParams

from nodus.api.errors import APIError, bad_request
from nodus.api.registry import KindInfo
from nodus.apimachinery.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)

_TRUE = ("true", "1")
_LARGEST_LIMIT = 2**62


@dataclass(frozen=True)
class ListOptions:
    labels: LabelSelector
    fields: FieldSelector
    limit: int | None
    continue_from: tuple[int, str, str] | None  # (rv, namespace, name)
    resource_version: str  # '' when unset
    resource_version_match: str
    watch: bool
    allow_bookmarks: bool
    timeout_seconds: int | None
    send_initial_events: bool | None
    include_object: str


def _bool(params: QueryParams, key: str) -> bool:
    return params.get(key, "").lower() in _TRUE


def encode_continue(rv: int, namespace: str, name: str) -> str:
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "ns": namespace, "start": name})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
        return int(data["rv"]), str(data["ns"]), str(data["start"])
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise bad_request(
            "continue key is not valid: it must be the metadata.continue of a previous list",
            fix="Pass the continue value exactly as the previous page returned it.",
        ) from exc


def parse(params: QueryParams, info: KindInfo, watch_path: bool = False) -> ListOptions:
    if params.get("shardSelector"):
        raise bad_request(
            "shardSelector is not supported by this server",
            fix="List without shardSelector; use labelSelector or fieldSelector to narrow the list.",
        )
    try:
        labels = parse_label_selector(params.get("labelSelector"))
        fields = parse_field_selector(params.get("fieldSelector"), info.field_selectors)
    except SelectorError as exc:
        raise bad_request(str(exc), fix="Fix the selector; see `kubectl get --help` for the syntax.") from exc
    limit: int | None = None
    if params.get("limit"):
        try:
            limit = int(params["limit"])
        except ValueError as exc:
            raise bad_request(f"limit must be an integer, got {params['limit']!r}") from exc
        if limit < 0:
            raise bad_request("limit must not be negative")
        # More than any list holds means "all"; storage counts in int64 (a larger limit was a 500).
        limit = min(limit, _LARGEST_LIMIT) or None
    rv = params.get("resourceVersion", "")
    match = params.get("resourceVersionMatch", "")
    token = params.get("continue", "")
    watch = watch_path or _bool(params, "watch")
    if match not in ("", "Exact", "NotOlderThan"):
        raise bad_request(f"resourceVersionMatch must be Exact or NotOlderThan, got {match!r}")
    if match and not rv:
        raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
    if rv and rv != "0" and not rv.isdigit():
        raise APIError("BadRequest", f'resourceVersion must be a number, got "{rv}"')
    if match == "Exact" and rv == "0":
        raise bad_request('resourceVersionMatch "Exact" is forbidden for resourceVersion "0"')
    continue_from = None
    if token:
        if rv or match:
            raise bad_request("specifying resource version is not allowed when using continue")
        if watch:
            raise bad_request("continue is not supported for watch")
        continue_from = decode_continue(token)
    timeout: int | None = None
    if params.get("timeoutSeconds"):
        try:
            timeout = int(params["timeoutSeconds"])
        except ValueError as exc:
            raise bad_request("timeoutSeconds must be an integer") from exc
    send_initial: bool | None = None
    if "sendInitialEvents" in params:
        send_initial = _bool(params, "sendInitialEvents")
        if not watch:
            raise bad_request("sendInitialEvents is forbidden for list")
        if match != "NotOlderThan":
            raise bad_request('sendInitialEvents requires resourceVersionMatch="NotOlderThan"')
        if send_initial and not _bool(params, "allowWatchBookmarks"):
            raise bad_request("sendInitialEvents requires allowWatchBookmarks=true")
    elif watch and match:
        raise bad_request(f'resourceVersionMatch "{match}" is forbidden for watch unless sendInitialEvents is set')
    include = params.get("includeObject", "Metadata")
    if include not in ("None", "Metadata", "Object"):
        raise bad_request("includeObject must be None, Metadata or Object")
    return ListOptions(
        labels=labels,
        fields=fields,
        limit=limit,
        continue_from=continue_from,
        resource_version=rv,
        resource_version_match=match,
        watch=watch,
        allow_bookmarks=_bool(params, "allowWatchBookmarks"),
        timeout_seconds=timeout,
        send_initial_events=send_initial,
        include_object=include,
    )
