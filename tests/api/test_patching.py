"""Merge patch (RFC 7386) and JSON patch (RFC 6902)."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.api.errors import APIError
from nodus.api.patching import json_patch, merge_patch

BASE: dict[str, Any] = {"spec": {"a": 1, "b": {"c": 2, "d": 3}, "list": [1, 2]}, "metadata": {"labels": {"x": "1"}}}


@pytest.mark.parametrize(
    ("patch", "expected_spec"),
    [
        pytest.param({"spec": {"a": 5}}, {"a": 5, "b": {"c": 2, "d": 3}, "list": [1, 2]}, id="replace-scalar"),
        pytest.param({"spec": {"b": {"c": None}}}, {"a": 1, "b": {"d": 3}, "list": [1, 2]}, id="null-deletes"),
        pytest.param({"spec": {"list": [9]}}, {"a": 1, "b": {"c": 2, "d": 3}, "list": [9]}, id="lists-replace"),
        pytest.param(
            {"spec": {"new": {"x": 1}}},
            {"a": 1, "b": {"c": 2, "d": 3}, "list": [1, 2], "new": {"x": 1}},
            id="adds-nested",
        ),
    ],
)
def test_merge_patch(patch: dict[str, Any], expected_spec: dict[str, Any]) -> None:
    result = merge_patch(BASE, patch)
    assert result["spec"] == expected_spec
    assert BASE["spec"]["a"] == 1, "the target is not mutated"


def test_json_patch_applies_and_refuses() -> None:
    result = json_patch(
        BASE, [{"op": "replace", "path": "/spec/a", "value": 7}, {"op": "add", "path": "/spec/list/-", "value": 3}]
    )
    assert result["spec"]["a"] == 7 and result["spec"]["list"] == [1, 2, 3]
    with pytest.raises(APIError) as failed:
        json_patch(BASE, [{"op": "test", "path": "/spec/a", "value": 99}])
    assert failed.value.code == 422
    with pytest.raises(APIError) as missing:
        json_patch(BASE, [{"op": "replace", "path": "/spec/nope/x", "value": 1}])
    assert missing.value.code == 422
    with pytest.raises(APIError) as malformed:
        json_patch(BASE, {"op": "replace"})
    assert malformed.value.code == 400
