"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) over JSON objects, with bounded cost.

Strategic merge patch is refused with 415 by the caller: it needs Go struct tags that Nodus kinds
(like CustomResources) do not have; merge patch and server-side apply cover its uses.

A patch is small but its result need not be (ADR 0033): a JSON patch of thirty ``copy`` operations,
each copying the object into itself, doubles it thirty times. So a JSON patch has at most
:data:`MAX_JSON_PATCH_OPERATIONS` operations (kube-apiserver's limit), the bytes its ``copy``
operations duplicate are counted as they are applied, and every patched object (merge, JSON or
apply) must serialise to at most :data:`MAX_OBJECT_BYTES` (:func:`check_size`), the cap on a body:
repeated patches cannot grow an object past what a create could have stored. Each refusal is a 413.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import orjson

from nodus.api import decoding
from nodus.api.errors import APIError, bad_request

MAX_JSON_PATCH_OPERATIONS = 10_000
MAX_OBJECT_BYTES = decoding.MAX_BODY_BYTES


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` deletes, anything else replaces. Pure."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: dict[str, Any], operations: Any) -> dict[str, Any]:
    """RFC 6902. A malformed patch is 400; one that does not apply (a failed ``test``, a missing
    path) is 422 naming the operation; one with too many operations, or whose copies would grow the
    object past :data:`MAX_OBJECT_BYTES`, is 413. Pure: neither ``target`` nor ``operations`` is
    mutated (a store retrying on a conflict applies the same patch again)."""
    if not isinstance(operations, list):
        raise bad_request(
            'a JSON patch is a list of operations such as [{"op": "replace", "path": "/spec/parallelism", "value": 2}]'
        )
    if len(operations) > MAX_JSON_PATCH_OPERATIONS:
        raise APIError(
            "RequestEntityTooLarge",
            f"the JSON patch has {len(operations)} operations; the limit is {MAX_JSON_PATCH_OPERATIONS}",
            fix=f"Split the change into patches of at most {MAX_JSON_PATCH_OPERATIONS} operations, or send a "
            "merge patch (kubectl patch --type merge) or the whole object.",
        )
    for index, operation in enumerate(operations):
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise bad_request(f"JSON patch operation {index} needs 'op' and 'path'")
    try:
        result = _apply_bounded(target, copy.deepcopy(operations))
    except jsonpatch.JsonPatchTestFailed as exc:
        raise _unprocessable(f"the JSON patch test failed: {exc}") from exc
    except (jsonpatch.JsonPatchConflict, jsonpatch.JsonPointerException) as exc:
        raise _unprocessable(f"the JSON patch does not apply to the object: {exc}") from exc
    except (jsonpatch.InvalidJsonPatch, TypeError, ValueError) as exc:
        raise bad_request(f"invalid JSON patch: {exc}") from exc
    if not isinstance(result, dict):
        raise _unprocessable("the JSON patch must leave an object")
    return result


def _apply_bounded(target: dict[str, Any], operations: list[dict[str, Any]]) -> Any:
    """Apply ``operations`` one by one to a copy of ``target``, counting the bytes each ``copy``
    duplicates: their sum and the object's size may not pass :data:`MAX_OBJECT_BYTES`. Measuring a copy
    costs its size, so the whole check costs at most twice the cap."""
    document: Any = copy.deepcopy(target)
    budget = MAX_OBJECT_BYTES - size(document)
    for operation in operations:
        if operation.get("op") == "copy" and isinstance(operation.get("from"), str):
            try:
                copied = jsonpatch.JsonPointer(operation["from"]).resolve(document)
            except jsonpatch.JsonPointerException:
                copied = None  # the operation itself fails below, naming the path
            budget -= size(copied)
            if budget < 0:
                raise too_large("the JSON patch's copy operations would make the object larger than")
        document = jsonpatch.JsonPatch([operation]).apply(document, in_place=True)
    return document


def size(value: Any) -> int:
    """The bytes ``value`` takes as JSON, as it is stored and sent."""
    return len(orjson.dumps(value))


def check_size(obj: dict[str, Any]) -> None:
    """413 when a patched object would serialise to more than :data:`MAX_OBJECT_BYTES`."""
    measured = size(obj)
    if measured > MAX_OBJECT_BYTES:
        raise too_large(f"the patched object would be {measured} bytes, more than")


def too_large(what: str) -> APIError:
    return APIError(
        "RequestEntityTooLarge",
        f"{what} the limit of {MAX_OBJECT_BYTES} bytes for an object",
        fix="Keep objects under 3 MiB: put large data in a Volume or an uploaded blob and name it in the object.",
    )


def _unprocessable(message: str) -> APIError:
    return APIError(
        "Invalid",
        message,
        fix="Read the object again (kubectl get -o json) and write the patch against its current content.",
    )
