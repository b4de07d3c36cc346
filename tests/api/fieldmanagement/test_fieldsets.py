"""Field sets: FieldsV1 bytes, ordering, decoding, set algebra and Go-compatible rendering."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nodus.api.fieldmanagement import fields_v1, gojson
from nodus.api.fieldmanagement.fieldsets import (
    FieldSet,
    FieldsV1Error,
    dotted,
    field,
    index,
    item_value,
    keyed,
    path_string,
    value_key,
)
from tests.api.fieldmanagement import LIST_KEYS, configuration, job_spec


def go_bytes(document: dict[str, Any]) -> str:
    """A FieldsV1 document the way kube-apiserver stores it: compact JSON in the document's own key order."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def test_fields_v1_of_a_job_matches_kube_apiserver_byte_for_byte() -> None:
    job = configuration(job_spec(), metadata={"labels": {"team": "llm", "app.kubernetes.io/name": "train"}})

    expected = (
        '{"f:metadata":{"f:labels":{"f:app.kubernetes.io/name":{},"f:team":{}}},'
        '"f:spec":{"f:command":{},"f:completions":{},'
        '"f:env":{"k:{\\"name\\":\\"EPOCHS\\"}":{".":{},"f:name":{},"f:value":{}},'
        '"k:{\\"name\\":\\"LR\\"}":{".":{},"f:name":{},"f:value":{}}},'
        '"f:image":{},"f:parallelism":{},"f:resources":{"f:gpu":{"f:count":{}}}}}'
    )
    assert go_bytes(fields_v1(job, LIST_KEYS)) == expected


@pytest.mark.parametrize(
    ("obj", "list_keys", "expected"),
    [
        pytest.param(
            {"metadata": {"finalizers": ["nodus.dev/cleanup", "a"]}},
            {},
            '{"f:metadata":{"f:finalizers":{"v:\\"a\\"":{},"v:\\"nodus.dev/cleanup\\"":{}}}}',
            id="finalizers-are-a-set",
        ),
        pytest.param(
            {"metadata": {"ownerReferences": [{"uid": "u-1", "kind": "Queue", "name": "q"}]}},
            {},
            '{"f:metadata":{"f:ownerReferences":'
            '{"k:{\\"uid\\":\\"u-1\\"}":{".":{},"f:kind":{},"f:name":{},"f:uid":{}}}}}',
            id="owner-references-keyed-by-uid",
        ),
        pytest.param(
            {"spec": {"ports": [{"protocol": "TCP", "port": 80, "name": "http"}]}},
            {"spec.ports": ("protocol", "port")},
            '{"f:spec":{"f:ports":{"k:{\\"port\\":80,\\"protocol\\":\\"TCP\\"}":'
            '{".":{},"f:name":{},"f:port":{},"f:protocol":{}}}}}',
            id="several-key-fields-sorted-by-name",
        ),
        pytest.param(
            {"spec": {"env": [{"name": "<&>"}]}},
            LIST_KEYS,
            '{"f:spec":{"f:env":{"k:{\\"name\\":\\"\\\\u003c\\\\u0026\\\\u003e\\"}":{".":{},"f:name":{}}}}}',
            id="keys-escaped-like-go",
        ),
        pytest.param(
            {"spec": {"sidecars": [{"name": "s", "env": [{"name": "A", "value": "1"}]}]}},
            {"spec.sidecars": ("name",), "spec.sidecars.env": ("name",)},
            '{"f:spec":{"f:sidecars":{"k:{\\"name\\":\\"s\\"}":{".":{},'
            '"f:env":{"k:{\\"name\\":\\"A\\"}":{".":{},"f:name":{},"f:value":{}}},"f:name":{}}}}}',
            id="nested-keyed-lists",
        ),
        pytest.param(
            {"spec": {"command": [], "env": [], "resources": {}, "image": None}},
            LIST_KEYS,
            '{"f:spec":{"f:command":{},"f:image":{}}}',
            id="empty-objects-and-associative-lists-own-nothing",
        ),
        pytest.param(
            configuration({"image": "x"}) | {"metadata": {"name": "n", "uid": "u", "resourceVersion": "1"}},
            {},
            '{"f:spec":{"f:image":{}}}',
            id="identity-and-system-fields-never-tracked",
        ),
    ],
)
def test_fields_v1_shapes(obj: dict[str, Any], list_keys: dict[str, tuple[str, ...]], expected: str) -> None:
    assert go_bytes(fields_v1(obj, list_keys)) == expected


def test_a_member_with_children_is_written_with_a_dot_first() -> None:
    fields = FieldSet([dotted("spec"), dotted("spec", "image"), dotted("spec", "a")])

    assert go_bytes(fields.to_fields_v1()) == '{"f:spec":{".":{},"f:a":{},"f:image":{}}}'


def test_element_kinds_sort_fields_then_keys_then_values_then_indices() -> None:
    fields = FieldSet(
        [
            (field("x"), index(0)),
            (field("x"), item_value("b")),
            (field("x"), keyed({"name": "a"})),
            (field("x"), field("z")),
            (field("x"), item_value(2)),
        ]
    )

    assert list(fields.to_fields_v1()["f:x"]) == ["f:z", 'k:{"name":"a"}', "v:2", 'v:"b"', "i:0"]


def test_ordered_lists_members_of_a_level_before_descending() -> None:
    fields = FieldSet(
        [dotted("spec", "resources", "gpu", "count"), dotted("spec", "parallelism"), dotted("spec", "completions")]
    )

    assert [path_string(path) for path in fields.ordered()] == [
        ".spec.completions",
        ".spec.parallelism",
        ".spec.resources.gpu.count",
    ]


@pytest.mark.parametrize(
    ("path", "text"),
    [
        pytest.param(dotted("spec", "parallelism"), ".spec.parallelism", id="fields"),
        pytest.param(
            (field("spec"), field("env"), keyed({"name": "FOO"}), field("value")),
            '.spec.env[name="FOO"].value',
            id="key",
        ),
        pytest.param(
            (field("spec"), field("ports"), keyed({"protocol": "TCP", "port": 80})),
            '.spec.ports[port=80,protocol="TCP"]',
            id="two-key-fields",
        ),
        pytest.param(
            (field("metadata"), field("finalizers"), item_value("a/b")), '.metadata.finalizers[="a/b"]', id="value"
        ),
        pytest.param((field("spec"), field("args"), index(3)), ".spec.args[3]", id="index"),
    ],
)
def test_path_strings_match_kube_apiserver_messages(path: tuple[Any, ...], text: str) -> None:
    assert path_string(path) == text


def test_fields_v1_round_trips() -> None:
    document = fields_v1(configuration(job_spec(), metadata={"finalizers": ["f"]}), LIST_KEYS)

    assert FieldSet.from_fields_v1(document).to_fields_v1() == document


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        pytest.param({"f:a": {}}, {".a"}, id="empty-object-is-a-leaf-member"),
        pytest.param({"f:a": {"f:b": {}}}, {".a.b"}, id="children-without-dot-are-not-members"),
        pytest.param({"f:a": {".": {}, "f:b": {}}}, {".a", ".a.b"}, id="dot-marks-the-enclosing-path"),
        pytest.param({"f:a": {"x:future": {}}}, {".a"}, id="unknown-element-kinds-are-ignored"),
        pytest.param({"f:a": {'k:{"port":1.0}': {}}}, {".a[port=1]"}, id="numbers-compare-numerically"),
        pytest.param({}, set(), id="empty-document"),
    ],
)
def test_decoding_fields_v1(document: dict[str, Any], expected: set[str]) -> None:
    assert {path_string(path) for path in FieldSet.from_fields_v1(document)} == expected


@pytest.mark.parametrize(
    "document",
    [
        pytest.param({"f": {}}, id="too-short"),
        pytest.param({"fx": {}}, id="missing-colon"),
        pytest.param({"k:{not json": {}}, id="bad-key-json"),
        pytest.param({'k:["a"]': {}}, id="key-not-an-object"),
        pytest.param({"v:NaN": {}}, id="not-json-constant"),
        pytest.param({"i:x": {}}, id="bad-index"),
        pytest.param({"f:a": []}, id="value-not-an-object"),
    ],
)
def test_malformed_fields_v1_is_refused(document: dict[str, Any]) -> None:
    with pytest.raises(FieldsV1Error):
        FieldSet.from_fields_v1(document)


def test_set_algebra() -> None:
    spec, image, gpu = dotted("spec"), dotted("spec", "image"), dotted("spec", "resources", "gpu", "count")
    owned = FieldSet([image, gpu])

    assert owned | FieldSet([spec]) == FieldSet([spec, image, gpu])
    assert owned - FieldSet([image]) == FieldSet([gpu])
    assert owned & FieldSet([gpu, spec]) == FieldSet([gpu])
    assert owned.recursive_difference(FieldSet([dotted("spec", "resources")])) == FieldSet([image])
    assert owned.children_of(field("spec")) == FieldSet([(field("image"),), dotted("resources", "gpu", "count")])
    assert owned.with_named_parents() == FieldSet(
        [spec, image, dotted("spec", "resources"), dotted("spec", "resources", "gpu"), gpu]
    )


def test_named_parents_stop_at_list_items() -> None:
    item = (field("spec"), field("env"), keyed({"name": "A"}))

    assert FieldSet([(*item, field("value"))]).with_named_parents() == FieldSet(
        [dotted("spec"), dotted("spec", "env"), (*item, field("value"))]
    )


def test_value_keys_follow_structured_merge_diff_equality() -> None:
    assert value_key(1) == value_key(1.0)
    assert value_key(True) != value_key(1)
    assert value_key(None) != value_key("null")
    assert sorted([value_key(None), value_key(True), value_key("a"), value_key(2)]) == [
        value_key(2),
        value_key("a"),
        value_key(True),
        value_key(None),
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param({"b": 1, "a": [True, None]}, '{"a":[true,null],"b":1}', id="sorted-compact"),
        pytest.param("<a&b>", '"\\u003ca\\u0026b\\u003e"', id="html-escaped"),
        pytest.param("line\nbreak\ttab\x01\u2028", '"line\\nbreak\\ttab\\u0001\\u2028"', id="control-characters"),
        pytest.param("héllo", '"héllo"', id="unicode-kept"),
        pytest.param(1.0, "1", id="integral-float"),
        pytest.param(0.5, "0.5", id="fraction"),
        pytest.param(1e21, "1e+21", id="large-exponent"),
        pytest.param(1e20, "100000000000000000000", id="below-exponent-threshold"),
        pytest.param(1.5e-7, "1.5e-7", id="small-exponent-shortened"),
        pytest.param(0.00001, "0.00001", id="small-fixed"),
    ],
)
def test_go_json_encoding(value: Any, text: str) -> None:
    assert gojson.dumps(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param("FOO", '"FOO"', id="string"),
        pytest.param('say "hi"\n', '"say \\"hi\\"\\n"', id="quoted-escapes"),
        pytest.param(80, "80", id="int"),
        pytest.param(1e6, "1e+06", id="float-exponent"),
        pytest.param(2.5, "2.5", id="float"),
        pytest.param(False, "false", id="bool"),
        pytest.param(None, "null", id="null"),
    ],
)
def test_go_value_strings(value: Any, text: str) -> None:
    assert gojson.value_string(value) == text
