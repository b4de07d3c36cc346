"""Decoding request bodies: JSON or YAML, duplicate fields detected, size capped.

Duplicate keys are remembered so that ``fieldValidation=Strict`` can refuse them and ``Warn`` can
report them, as kube-apiserver does; the last value wins otherwise. YAML is read without implicit
timestamps so that times stay strings, exactly as they would arrive in JSON.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from nodus.api.errors import APIError, bad_request

MAX_BODY_BYTES = 3 * 1024 * 1024


class _DuplicateTracking(dict[str, Any]):
    duplicates: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    duplicates: list[str] = []
    for key, value in pairs:
        if key in out:
            duplicates.append(key)
        out[key] = value
    if duplicates:
        tracked = _DuplicateTracking(out)
        tracked.duplicates = duplicates
        return tracked
    return out


def _duplicate_paths(value: Any, path: str = "") -> list[str]:
    found: list[str] = []
    if isinstance(value, dict):
        if isinstance(value, _DuplicateTracking):
            found += [f"{path}.{k}" if path else k for k in value.duplicates]
        for key, item in value.items():
            found += _duplicate_paths(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _duplicate_paths(item, f"{path}[{index}]")
    return found


class _Loader(yaml.SafeLoader):
    pass


# Times stay strings, as they are in JSON.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[str, Any]:
    loader.flatten_mapping(node)
    pairs = [(loader.construct_object(k, deep=True), loader.construct_object(v, deep=True)) for k, v in node.value]
    for key, _ in pairs:
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"map keys must be strings, found {key!r}", node.start_mark
            )
    return _pairs(pairs)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def decode(raw: bytes, yaml_allowed: bool) -> tuple[Any, list[str]]:
    """The body's value and the dotted paths of duplicate fields in it."""
    if len(raw) > MAX_BODY_BYTES:
        raise APIError("RequestEntityTooLarge", f"the request body is {len(raw)} bytes; the limit is {MAX_BODY_BYTES}")
    if not raw.strip():
        raise bad_request("the request has no body")
    try:
        value = json.loads(raw, object_pairs_hook=_pairs)
    except ValueError as exc:
        if not yaml_allowed:
            raise bad_request(f"the body is not valid JSON: {exc}") from exc
        try:
            value = yaml.load(raw, Loader=_Loader)
        except yaml.YAMLError as yaml_exc:
            raise bad_request(f"the body is neither valid JSON nor valid YAML: {yaml_exc}") from yaml_exc
    return value, _duplicate_paths(value)


def plain(value: Any) -> Any:
    """Strip the duplicate-tracking dict subclass (before storing or comparing)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
