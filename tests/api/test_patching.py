"""Merge patch (RFC 7386) and JSON patch (RFC 6902)."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.api import patching
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


def test_a_json_patch_has_at_most_ten_thousand_operations() -> None:
    test = {"op": "test", "path": "/spec/a", "value": 1}
    assert json_patch(BASE, [test] * 10_000) == BASE
    with pytest.raises(APIError) as refused:
        json_patch(BASE, [test] * 10_001)
    assert refused.value.code == 413 and "10001 operations" in refused.value.message


def test_copies_that_would_grow_the_object_past_the_cap_are_refused_as_they_apply() -> None:
    target = {"spec": {"a": "x" * 1024}}
    doubling = [{"op": "copy", "from": "/spec", "path": f"/spec/c{n}"} for n in range(40)]  # 2^40 KiB if applied
    with pytest.raises(APIError) as refused:
        json_patch(target, doubling)
    assert refused.value.code == 413 and "copy operations" in refused.value.message
    assert len(json_patch(target, doubling[:3])["spec"]) == 4, "a few copies are fine"


def test_a_patch_is_applied_to_copies_so_a_retry_applies_the_same_patch() -> None:
    operations = [{"op": "add", "path": "/spec/new", "value": {}}, {"op": "add", "path": "/spec/new/x", "value": 1}]
    first, second = json_patch(BASE, operations), json_patch(BASE, operations)
    assert first == second and first["spec"]["new"] == {"x": 1}
    assert operations[0]["value"] == {} and "new" not in BASE["spec"]


def test_check_size_measures_the_object_as_json() -> None:
    patching.check_size({"spec": {"a": "x" * (patching.MAX_OBJECT_BYTES - 100)}})
    with pytest.raises(APIError) as refused:
        patching.check_size({"spec": {"a": "x" * patching.MAX_OBJECT_BYTES}})
    assert refused.value.code == 413 and "patched object" in refused.value.message
