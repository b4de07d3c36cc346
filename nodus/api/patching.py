"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) over JSON objects.

Strategic merge patch is refused with 415 by the caller: it needs Go struct tags that Nodus kinds
(like CustomResources) do not have; merge patch and server-side apply cover its uses.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from nodus.api.errors import APIError, bad_request


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
    path) is 422 naming the operation."""
    if not isinstance(operations, list):
        raise bad_request(
            'a JSON patch is a list of operations such as [{"op": "replace", "path": "/spec/parallelism", "value": 2}]'
        )
    for index, operation in enumerate(operations):
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise bad_request(f"JSON patch operation {index} needs 'op' and 'path'")
    try:
        patch = jsonpatch.JsonPatch(operations)
        result = patch.apply(target, in_place=False)
    except jsonpatch.JsonPatchTestFailed as exc:
        raise _unprocessable(f"the JSON patch test failed: {exc}") from exc
    except (jsonpatch.JsonPatchConflict, jsonpatch.JsonPointerException) as exc:
        raise _unprocessable(f"the JSON patch does not apply to the object: {exc}") from exc
    except (jsonpatch.InvalidJsonPatch, TypeError, ValueError) as exc:
        raise bad_request(f"invalid JSON patch: {exc}") from exc
    if not isinstance(result, dict):
        raise _unprocessable("the JSON patch must leave an object")
    return result


def _unprocessable(message: str) -> APIError:
    return APIError(
        "Invalid",
        message,
        fix="Read the object again (kubectl get -o json) and write the patch against its current content.",
    )
