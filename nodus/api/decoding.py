"""Decoding request bodies: JSON or YAML, duplicate fields detected, size, depth and node count capped.

Duplicate keys are remembered so that ``fieldValidation=Strict`` can refuse them and ``Warn`` can
report them, as kube-apiserver does; the last value wins otherwise. YAML is read without implicit
timestamps so that times stay strings, exactly as they would arrive in JSON.

A body is data, never a program (ADR 0033): whatever a client sends, decoding it costs time and
memory in proportion to its bytes, and what comes out is plain JSON (objects with string keys,
lists, strings, finite numbers, booleans, null). So, before anything else looks at a value:

* YAML anchors and aliases are refused. An alias is a reference: a 1 KB document of nested aliases
  (a "billion laughs") stands for 10^9 nodes, and every walk over the value (validation, copying,
  serialising) would visit all of them.
* nesting deeper than :data:`MAX_DEPTH` levels and more than :data:`MAX_NODES` values are refused.
  YAML is checked on the parser's events, before a node is built; JSON is parsed by the C decoder
  (whose own recursion guard stops pathological nesting) and then measured.
* explicit YAML tags that make non-JSON values (``!!binary``, ``!!set``, ``!!timestamp``) and
  non-finite numbers (``NaN``, ``1e999``) are refused.

Every refusal is a 400 ``BadRequest`` Status that names the limit and the fix; the size cap
(:data:`MAX_BODY_BYTES`) is a 413 and is enforced while the body is read (``nodus.api.http.bodies``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from nodus.api.errors import APIError, bad_request

MAX_BODY_BYTES = 3 * 1024 * 1024
# kube-apiserver refuses JSON nested deeper than 10000 levels; no Nodus object nests more than about
# ten, so 100 leaves room for any map or list a user writes and none for a recursion bomb.
MAX_DEPTH = 100
# Keys, objects, lists and scalar values in one body. A 3 MiB body of one-character list items holds about 1.5
# million; a real object (even a Secret with many keys) holds a few thousand.
MAX_NODES = 100_000

_JSON_TYPES = (str, int, float, bool, type(None))

_Base: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when installed


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
    """Dotted paths of keys given twice. Recursive: called only on values within :data:`MAX_DEPTH`."""
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


class _Loader(_Base):  # type: ignore[misc]
    pass


# Times stay strings, as they are in JSON.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _construct_mapping(loader: Any, node: yaml.MappingNode) -> dict[str, Any]:
    loader.flatten_mapping(node)
    pairs = [(loader.construct_object(k, deep=True), loader.construct_object(v, deep=True)) for k, v in node.value]
    for key, _ in pairs:
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"map keys must be strings, found {key!r}", node.start_mark
            )
    return _pairs(pairs)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def too_deep() -> APIError:
    return bad_request(
        f"the body nests objects and lists more than {MAX_DEPTH} levels deep",
        fix=f"Flatten the object: at most {MAX_DEPTH} levels of nested objects and lists are accepted.",
    )


def too_many_nodes() -> APIError:
    return bad_request(
        f"the body holds more than {MAX_NODES} nodes (keys, objects, lists and scalar values)",
        fix=f"Send at most {MAX_NODES} values in one object; keep bulk data in a Volume or an uploaded blob.",
    )


def _aliases(mark: Any) -> APIError:
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return bad_request(
        f"YAML anchors and aliases (&name, *name) are not accepted{where}",
        fix="Write each value out in full (kubectl does when it sends YAML as JSON), or send JSON.",
    )


def _check_yaml_events(raw: bytes) -> None:
    """Refuse aliases, anchors, deep nesting and too many nodes from the parser's events, before any
    node is composed: the parser is iterative and its work is proportional to the body's bytes."""
    depth = nodes = 0
    for event in yaml.parse(raw, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _aliases(event.start_mark)
        if isinstance(event, yaml.ScalarEvent):
            nodes += 1
        elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            nodes += 1
            depth += 1
            if depth > MAX_DEPTH:
                raise too_deep()
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            depth -= 1
        if nodes > MAX_NODES:
            raise too_many_nodes()


def _not_json(what: str) -> APIError:
    return bad_request(
        f"the body holds {what}, which JSON cannot represent",
        fix="Send only objects, lists, strings, finite numbers, booleans and null (no YAML tags such as "
        "!!binary, !!set or !!timestamp, no NaN or Infinity).",
    )


def _measure(value: Any) -> bool:
    """Check depth, node count and value types without recursion; True when a key was given twice."""
    nodes = 0
    duplicates = False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise too_many_nodes()
        if isinstance(item, dict):
            if depth > MAX_DEPTH:
                raise too_deep()
            nodes += len(item)  # the keys
            duplicates = duplicates or isinstance(item, _DuplicateTracking)
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            if depth > MAX_DEPTH:
                raise too_deep()
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise _not_json(f"the number {item}")
        elif not isinstance(item, _JSON_TYPES):
            raise _not_json(f"a value of YAML type {type(item).__name__}")
    return duplicates


def _refuse_constant(name: str) -> Any:
    raise _NonFinite(name)


class _NonFinite(Exception):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a JSON body (Python's decoder accepts them)."""


def decode(raw: bytes, yaml_allowed: bool) -> tuple[Any, list[str]]:
    """The body's value and the dotted paths of duplicate fields in it; a 400 or 413 Status when the
    body is not JSON (or YAML, when allowed) or passes a limit of this module. Pure; CPU-bound in
    proportion to ``len(raw)``."""
    if len(raw) > MAX_BODY_BYTES:
        raise APIError("RequestEntityTooLarge", f"the request body is {len(raw)} bytes; the limit is {MAX_BODY_BYTES}")
    if not raw.strip():
        raise bad_request("the request has no body")
    try:
        value = json.loads(raw, object_pairs_hook=_pairs, parse_constant=_refuse_constant)
    except RecursionError:
        raise too_deep() from None
    except _NonFinite as exc:
        raise _not_json(f"the number {exc}") from None
    except ValueError as exc:
        if not yaml_allowed:
            raise bad_request(f"the body is not valid JSON: {exc}") from exc
        value = _decode_yaml(raw)
    duplicates = _measure(value)
    return value, _duplicate_paths(value) if duplicates else []


def _decode_yaml(raw: bytes) -> Any:
    try:
        _check_yaml_events(raw)
        return yaml.load(raw, Loader=_Loader)  # a safe loader (libyaml when installed), after the checks
    except (yaml.YAMLError, ValueError) as yaml_exc:  # ValueError: an integer of more than 4300 digits
        raise bad_request(f"the body is neither valid JSON nor valid YAML: {yaml_exc}") from yaml_exc


def plain(value: Any) -> Any:
    """Strip the duplicate-tracking dict subclass (before storing or comparing)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
