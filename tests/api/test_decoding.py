"""Decoding request bodies: what is accepted, what is refused and why (ADR 0033)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from nodus.api import decoding
from nodus.api.errors import APIError


def _bomb(levels: int) -> bytes:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]" for n in range(1, levels)]
    return "\n".join(lines).encode()


@pytest.mark.parametrize(
    ("raw", "expected", "duplicates"),
    [
        pytest.param(b'{"a": 1, "b": [true, null, "x"]}', {"a": 1, "b": [True, None, "x"]}, [], id="json"),
        pytest.param(b"a: 1\nb: [x, y]\n", {"a": 1, "b": ["x", "y"]}, [], id="yaml"),
        pytest.param(b"t: 2026-11-29T12:00:00Z\n", {"t": "2026-11-29T12:00:00Z"}, [], id="yaml-times-stay-strings"),
        pytest.param(
            b'{"a": 1, "a": 2, "b": {"c": [{"d": 1, "d": 2}]}}',
            {"a": 2, "b": {"c": [{"d": 2}]}},
            ["a", "b.c[0].d"],
            id="json-duplicates",
        ),
        pytest.param(b"a: 1\na: 2\n", {"a": 2}, ["a"], id="yaml-duplicates"),
        pytest.param(b"<<: {a: 1}\nb: 2\n", {"a": 1, "b": 2}, [], id="yaml-merge-key-without-alias"),
    ],
)
def test_accepted(raw: bytes, expected: Any, duplicates: list[str]) -> None:
    value, found = decoding.decode(raw, yaml_allowed=True)
    assert decoding.plain(value) == expected
    assert found == duplicates


@pytest.mark.parametrize("raw", [b"[" * 100 + b"]" * 100, b"a: " + b"[" * 99 + b"]" * 99], ids=["json", "yaml"])
def test_a_hundred_levels_are_accepted(raw: bytes) -> None:
    value, _ = decoding.decode(raw, yaml_allowed=True)
    depth = 0
    while isinstance(value, list | dict) and value:
        value, depth = (value["a"] if isinstance(value, dict) else value[0]), depth + 1
    assert depth == 99 and value == []


@pytest.mark.parametrize(
    ("raw", "code", "words"),
    [
        pytest.param(_bomb(9), 400, "anchors and aliases", id="alias-bomb"),
        pytest.param(b"a: &x 1\nb: 2\n", 400, "anchors and aliases", id="anchor-alone"),
        pytest.param(b"[" * 101 + b"]" * 101, 400, "more than 100 levels", id="json-101-levels"),
        pytest.param(b"[" * 50_000 + b"]" * 50_000, 400, "more than 100 levels", id="json-recursion"),
        pytest.param(b"a: " + b"{b: " * 101 + b"1" + b"}" * 101, 400, "more than 100 levels", id="yaml-101-levels"),
        pytest.param(json.dumps([0] * 100_000).encode(), 400, "more than 100000 nodes", id="json-nodes"),
        pytest.param(json.dumps({str(n): 0 for n in range(50_001)}).encode(), 400, "100000 nodes", id="json-keys"),
        pytest.param(yaml.safe_dump([0] * 100_000).encode(), 400, "more than 100000 nodes", id="yaml-nodes"),
        pytest.param(b"x: !!binary aGVsbG8=\n", 400, "JSON cannot represent", id="yaml-binary"),
        pytest.param(b"x: !!set {a, b}\n", 400, "JSON cannot represent", id="yaml-set"),
        pytest.param(b'{"x": NaN}', 400, "JSON cannot represent", id="json-nan"),
        pytest.param(b'{"x": 1e999}', 400, "JSON cannot represent", id="json-infinity"),
        pytest.param(b"x: .inf\n", 400, "JSON cannot represent", id="yaml-infinity"),
        pytest.param(b"x: " + b"9" * 5000, 400, "neither valid JSON nor valid YAML", id="yaml-huge-integer"),
        pytest.param(b"!!python/object/apply:os.system [true]\n", 400, "neither valid JSON", id="python-tag"),
        pytest.param(b" \n", 400, "no body", id="empty"),
        pytest.param(b" " * (decoding.MAX_BODY_BYTES + 1), 413, "the limit is 3145728", id="too-large"),
    ],
)
def test_refused(raw: bytes, code: int, words: str) -> None:
    with pytest.raises(APIError) as refused:
        decoding.decode(raw, yaml_allowed=True)
    assert refused.value.code == code
    assert words in refused.value.message
    assert refused.value.fix


def test_yaml_is_refused_where_only_json_is_allowed() -> None:
    with pytest.raises(APIError) as refused:
        decoding.decode(b"a: 1\n", yaml_allowed=False)
    assert refused.value.code == 400 and "not valid JSON" in refused.value.message


def test_an_alias_bomb_is_refused_without_expanding_it() -> None:
    started = time.perf_counter()
    with pytest.raises(APIError):
        decoding.decode(_bomb(12), yaml_allowed=True)  # 10^12 strings if expanded
    assert time.perf_counter() - started < 1.0  # a generous bound: refused at the first alias
