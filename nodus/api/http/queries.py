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
    """The options of a list or watch request (``watch_path``: the legacy ``/watch/`` path, a watch whatever
    ``watch`` says). Raises a 400 for the first parameter, or combination of them, that is not valid."""
    if params.get("shardSelector"):
        raise bad_request(
            "shardSelector is not supported by this server",
            fix="List without shardSelector; use labelSelector or fieldSelector to narrow the list.",
        )
    labels, fields = _selectors(params, info)
    limit = _limit(params)
    rv = params.get("resourceVersion", "")
    match = params.get("resourceVersionMatch", "")
    token = params.get("continue", "")
    watch = watch_path or _bool(params, "watch")
    _check_resource_version(rv, match)
    continue_from = _continue_from(token, rv, match, watch)
    timeout = _timeout_seconds(params)
    send_initial = _send_initial_events(params, watch, match)
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


def _selectors(params: QueryParams, info: KindInfo) -> tuple[LabelSelector, FieldSelector]:
    """``labelSelector`` and ``fieldSelector`` (only the fields ``info`` declares); a 400 when either does not
    parse."""
    try:
        labels = parse_label_selector(params.get("labelSelector"))
        fields = parse_field_selector(params.get("fieldSelector"), info.field_selectors)
    except SelectorError as exc:
        raise bad_request(str(exc), fix="Fix the selector; see `kubectl get --help` for the syntax.") from exc
    return labels, fields


def _limit(params: QueryParams) -> int | None:
    """``limit``: None (no limit) when unset or zero, at most ``_LARGEST_LIMIT``; a 400 unless a non-negative
    integer."""
    if not params.get("limit"):
        return None
    try:
        limit = int(params["limit"])
    except ValueError as exc:
        raise bad_request(f"limit must be an integer, got {params['limit']!r}") from exc
    if limit < 0:
        raise bad_request("limit must not be negative")
    # More than any list holds means "all"; storage counts in int64 (a larger limit was a 500).
    return min(limit, _LARGEST_LIMIT) or None


def _check_resource_version(rv: str, match: str) -> None:
    """Raises a 400 unless ``resourceVersion`` (``rv``, '' when unset) is a number and ``resourceVersionMatch``
    (``match``) is one Kubernetes allows with it."""
    if match not in ("", "Exact", "NotOlderThan"):
        raise bad_request(f"resourceVersionMatch must be Exact or NotOlderThan, got {match!r}")
    if match and not rv:
        raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
    if rv and rv != "0" and not rv.isdigit():
        raise APIError("BadRequest", f'resourceVersion must be a number, got "{rv}"')
    if match == "Exact" and rv == "0":
        raise bad_request('resourceVersionMatch "Exact" is forbidden for resourceVersion "0"')


def _continue_from(token: str, rv: str, match: str, watch: bool) -> tuple[int, str, str] | None:
    """Where a list resumes (``continue``, '' when unset): None for the first page; a 400 when the token is
    not one a list returned, or comes with a resource version or on a watch."""
    if not token:
        return None
    if rv or match:
        raise bad_request("specifying resource version is not allowed when using continue")
    if watch:
        raise bad_request("continue is not supported for watch")
    return decode_continue(token)


def _timeout_seconds(params: QueryParams) -> int | None:
    """``timeoutSeconds``, None when unset; a 400 unless an integer."""
    if not params.get("timeoutSeconds"):
        return None
    try:
        return int(params["timeoutSeconds"])
    except ValueError as exc:
        raise bad_request("timeoutSeconds must be an integer") from exc


def _send_initial_events(params: QueryParams, watch: bool, match: str) -> bool | None:
    """``sendInitialEvents``, None when unset. A 400 when it is set on a list, without
    ``resourceVersionMatch=NotOlderThan``, or true without ``allowWatchBookmarks``; and when a watch sets
    ``resourceVersionMatch`` without it."""
    if "sendInitialEvents" not in params:
        if watch and match:
            raise bad_request(f'resourceVersionMatch "{match}" is forbidden for watch unless sendInitialEvents is set')
        return None
    send_initial = _bool(params, "sendInitialEvents")
    if not watch:
        raise bad_request("sendInitialEvents is forbidden for list")
    if match != "NotOlderThan":
        raise bad_request('sendInitialEvents requires resourceVersionMatch="NotOlderThan"')
    if send_initial and not _bool(params, "allowWatchBookmarks"):
        raise bad_request("sendInitialEvents requires allowWatchBookmarks=true")
    return send_initial
