"""managedFields after non-apply writes: creates, updates, patches, /status writes, client-written managedFields."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client import ApiClient

from nodus.api.fieldmanagement import update_managed_fields
from tests.api.fieldmanagement import (
    API_VERSION,
    LIST_KEYS,
    T0,
    T1,
    T2,
    apply_as,
    configuration,
    entry,
    entry_ids,
    job_spec,
    owned,
    stored,
    update_as,
)

Change = Callable[[dict[str, Any]], None]


def created_job() -> dict[str, Any]:
    obj = stored(configuration(job_spec(), metadata={"labels": {"team": "llm"}, "finalizers": ["nodus.dev/cleanup"]}))
    obj["status"] = {"phase": "Pending"}
    return obj


def test_create_records_what_an_updater_created_in_kube_apiserver_shape() -> None:
    result = update_as(None, created_job(), "kubectl-create", now=T0)

    [created] = result["metadata"]["managedFields"]
    assert {key: value for key, value in created.items() if key != "fieldsV1"} == {
        "manager": "kubectl-create",
        "operation": "Update",
        "apiVersion": API_VERSION,
        "time": T0,
        "fieldsType": "FieldsV1",
    }
    # Objects, keyed lists and items the write created carry ".": {} (metadata itself is never tracked); status is
    # not owned through the main resource. Compared as the bytes kube-apiserver stores.
    assert json.dumps(created["fieldsV1"], separators=(",", ":")) == (
        '{"f:metadata":{"f:finalizers":{".":{},"v:\\"nodus.dev/cleanup\\"":{}},"f:labels":{".":{},"f:team":{}}},'
        '"f:spec":{".":{},"f:command":{},"f:completions":{},'
        '"f:env":{".":{},"k:{\\"name\\":\\"EPOCHS\\"}":{".":{},"f:name":{},"f:value":{}},'
        '"k:{\\"name\\":\\"LR\\"}":{".":{},"f:name":{},"f:value":{}}},'
        '"f:image":{},"f:parallelism":{},"f:resources":{".":{},"f:gpu":{".":{},"f:count":{}}}}}'
    )


def set_path(*path_and_value: Any) -> Change:
    *path, value = path_and_value

    def change(obj: dict[str, Any]) -> None:
        node = obj
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = value

    return change


def delete_path(*path: str) -> Change:
    def change(obj: dict[str, Any]) -> None:
        node = obj
        for name in path[:-1]:
            node = node[name]
        del node[path[-1]]

    return change


def append_env(name: str, value: str) -> Change:
    return lambda obj: obj["spec"].setdefault("env", []).append({"name": name, "value": value})


@pytest.mark.parametrize(
    ("changes", "owners"),
    [
        pytest.param(
            [("bob", set_path("spec", "parallelism", 6))],
            {("alice", "Apply"): [".spec.image"], ("bob", "Update"): [".spec.parallelism"]},
            id="changed-field-moves-to-the-updater",
        ),
        pytest.param(
            [("bob", set_path("spec", "parallelism", 2))],
            {("alice", "Apply"): [".spec.image", ".spec.parallelism"]},
            id="unchanged-value-is-not-taken",
        ),
        pytest.param(
            [("bob", delete_path("spec", "parallelism"))],
            {("alice", "Apply"): [".spec.image"]},
            id="removed-field-leaves-every-set-and-gives-nothing",
        ),
        pytest.param(
            [("bob", set_path("spec", "parallelism", 6)), ("bob", set_path("spec", "completions", 8))],
            {("alice", "Apply"): [".spec.image"], ("bob", "Update"): [".spec.completions", ".spec.parallelism"]},
            id="one-entry-per-manager-accumulates",
        ),
        pytest.param(
            [("bob", append_env("C", "3"))],
            {
                ("alice", "Apply"): [".spec.image", ".spec.parallelism"],
                ("bob", "Update"): [
                    ".spec.env",
                    '.spec.env[name="C"]',
                    '.spec.env[name="C"].name',
                    '.spec.env[name="C"].value',
                ],
            },
            id="created-list-and-item-are-members",
        ),
        pytest.param(
            [("bob", append_env("C", "3")), ("carol", append_env("D", "4"))],
            {
                ("alice", "Apply"): [".spec.image", ".spec.parallelism"],
                ("bob", "Update"): [
                    ".spec.env",
                    '.spec.env[name="C"]',
                    '.spec.env[name="C"].name',
                    '.spec.env[name="C"].value',
                ],
                ("carol", "Update"): ['.spec.env[name="D"]', '.spec.env[name="D"].name', '.spec.env[name="D"].value'],
            },
            id="item-added-to-an-existing-list",
        ),
        pytest.param(
            [("bob", set_path("spec", "resources", {"gpu": {"count": 2}}))],
            {
                ("alice", "Apply"): [".spec.image", ".spec.parallelism"],
                ("bob", "Update"): [".spec.resources", ".spec.resources.gpu", ".spec.resources.gpu.count"],
            },
            id="created-objects-are-members",
        ),
        pytest.param(
            [
                ("bob", set_path("metadata", "labels", {"team": "llm"})),
                ("carol", set_path("metadata", "labels", "tier", "x")),
            ],
            {
                ("alice", "Apply"): [".spec.image", ".spec.parallelism"],
                ("bob", "Update"): [".metadata.labels", ".metadata.labels.team"],
                ("carol", "Update"): [".metadata.labels.tier"],
            },
            id="labels-are-granular",
        ),
        pytest.param(
            [("bob", set_path("status", {"phase": "Running"}))],
            {("alice", "Apply"): [".spec.image", ".spec.parallelism"]},
            id="status-is-not-owned-through-the-main-resource",
        ),
        pytest.param(
            [("bob", set_path("metadata", "resourceVersion", "99")), ("bob", set_path("metadata", "generation", 3))],
            {("alice", "Apply"): [".spec.image", ".spec.parallelism"]},
            id="system-metadata-is-never-owned",
        ),
        pytest.param(
            [("bob", delete_path("spec", "parallelism")), ("bob", delete_path("spec", "image"))],
            {},
            id="entries-left-empty-are-dropped",
        ),
    ],
)
def test_update_ownership(changes: list[tuple[str, Change]], owners: dict[tuple[str, str], list[str]]) -> None:
    live = apply_as(None, configuration({"image": "x:1", "parallelism": 2}), "alice", now=T0)

    for manager, change in changes:
        new = copy.deepcopy(live)
        change(new)
        live = update_as(live, new, manager, now=T1)

    assert {(manager, operation) for manager, operation, _ in entry_ids(live)} == set(owners)
    for (manager, operation), paths in owners.items():
        assert owned(live, manager, operation) == paths


def test_the_time_moves_only_when_the_updater_takes_something() -> None:
    live = update_as(None, created_job(), "bob", now=T0)

    unchanged = update_as(live, copy.deepcopy(live), "bob", now=T1)
    changed_copy = copy.deepcopy(live)
    changed_copy["spec"]["parallelism"] = 3
    changed = update_as(live, changed_copy, "bob", now=T2)

    assert unchanged["metadata"]["managedFields"] == live["metadata"]["managedFields"]
    assert entry(changed, "bob", "Update")["time"] == T2


def test_status_subresource_writes_get_their_own_entry() -> None:
    live = update_as(None, created_job(), "kubectl-create", now=T0)
    new = copy.deepcopy(live)
    new["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    new["spec"]["parallelism"] = 100  # a /status write cannot own spec

    result = update_as(live, new, "controller", now=T1, subresource="status")

    assert entry_ids(result) == [("kubectl-create", "Update", ""), ("controller", "Update", "status")]
    status_entry = entry(result, "controller", "Update", "status")
    assert status_entry["subresource"] == "status"
    assert status_entry["fieldsV1"] == {
        "f:status": {
            "f:conditions": {".": {}, 'k:{"type":"Ready"}': {".": {}, "f:status": {}, "f:type": {}}},
            "f:phase": {},
        }
    }
    assert ".spec.parallelism" in owned(result, "kubectl-create", "Update")


def test_status_created_through_the_subresource_is_a_member() -> None:
    live = update_as(None, stored(configuration({"image": "x:1"})), "kubectl-create", now=T0)
    new = copy.deepcopy(live) | {"status": {"phase": "Running"}}

    result = update_as(live, new, "controller", now=T1, subresource="status")

    assert entry(result, "controller", "Update", "status")["fieldsV1"] == {"f:status": {".": {}, "f:phase": {}}}


def rewritten_to_apply(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """What kubectl's client-side to server-side apply migration writes: the updater's entry, now an applier's."""
    updater = entry(obj, "kubectl-client-side-apply", "Update")
    return [{**updater, "manager": "kubectl", "operation": "Apply"}]


@pytest.mark.parametrize(
    ("written", "subresource", "expected"),
    [
        pytest.param(
            rewritten_to_apply,
            "",
            [("kubectl", "Apply", "")],
            id="written-entries-replace-the-stored-ones",
        ),
        pytest.param(lambda obj: [], "", [], id="empty-list-clears"),
        pytest.param(lambda obj: [{}], "", [], id="one-empty-entry-clears"),
        pytest.param(
            lambda obj: [{"manager": "x", "operation": "Patch", "apiVersion": API_VERSION, "fieldsType": "FieldsV1"}],
            "",
            [("kubectl-client-side-apply", "Update", "")],
            id="unreadable-entries-are-ignored",
        ),
        pytest.param(
            lambda obj: [{**entry(obj, "kubectl-client-side-apply", "Update"), "fieldsType": "FieldsV2"}],
            "",
            [("kubectl-client-side-apply", "Update", "")],
            id="unknown-fields-type-is-ignored",
        ),
        pytest.param(
            rewritten_to_apply,
            "status",
            [("kubectl-client-side-apply", "Update", "")],
            id="status-writes-cannot-rewrite",
        ),
    ],
)
def test_written_managed_fields(
    written: Callable[[dict[str, Any]], list[dict[str, Any]]], subresource: str, expected: list[tuple[str, str, str]]
) -> None:
    live = update_as(None, created_job(), "kubectl-client-side-apply", now=T0)
    new = copy.deepcopy(live)
    new["metadata"]["managedFields"] = written(live)

    result = update_as(live, new, "kubectl", now=T1, subresource=subresource)

    assert entry_ids(result) == expected


def test_migrated_entry_keeps_its_fields() -> None:
    live = update_as(None, created_job(), "kubectl-client-side-apply", now=T0)
    new = copy.deepcopy(live)
    new["metadata"]["managedFields"] = rewritten_to_apply(live)

    result = update_as(live, new, "kubectl", now=T1)

    assert entry(result, "kubectl")["fieldsV1"] == entry(live, "kubectl-client-side-apply", "Update")["fieldsV1"]
    assert entry(result, "kubectl")["time"] == T0


def test_an_untracked_object_stays_untracked() -> None:
    live = stored(configuration({"image": "x:1"}))
    new = copy.deepcopy(live)
    new["spec"]["image"] = "x:2"

    assert update_managed_fields(live, new, manager="bob", api_version=API_VERSION, list_keys=LIST_KEYS, now=T1) == []


def test_a_create_gives_every_field_to_its_creator_even_against_written_entries() -> None:
    # kube-apiserver reads the written entries, then the creator takes every field the create added: all of them.
    obj = created_job()
    obj["metadata"]["managedFields"] = [
        {
            "manager": "importer",
            "operation": "Apply",
            "apiVersion": API_VERSION,
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:image": {}}},
        }
    ]

    result = update_as(None, obj, "kubectl-create", now=T1)

    assert entry_ids(result) == [("kubectl-create", "Update", "")]
    assert ".spec.image" in owned(result, "kubectl-create", "Update")


def test_old_updates_are_merged_into_ancient_changes() -> None:
    times = [f"2024-05-01T10:00:{second:02d}Z" for second in range(12)]
    live = update_as(None, stored(configuration({"f0": 0})), "u0", now=times[0])
    for number in range(1, 11):
        new = copy.deepcopy(live)
        new["spec"][f"f{number}"] = number
        live = update_as(live, new, f"u{number}", now=times[number])

    assert [manager for manager, _, _ in entry_ids(live)] == ["ancient-changes", *(f"u{n}" for n in range(2, 11))]
    bucket = entry(live, "ancient-changes", "Update")
    assert bucket["time"] == times[1]
    assert bucket["fieldsV1"] == {"f:spec": {".": {}, "f:f0": {}, "f:f1": {}}}


def test_an_object_whose_lists_do_not_fit_their_types_loses_its_managed_fields() -> None:
    live = update_as(None, created_job(), "bob", now=T0)
    new = copy.deepcopy(live)
    new["spec"]["env"].append({"value": "no name"})

    assert update_managed_fields(live, new, manager="bob", api_version=API_VERSION, list_keys=LIST_KEYS, now=T1) == []


def test_an_unchanged_entry_keeps_its_stored_document() -> None:
    live = apply_as(None, configuration({"image": "x:1", "parallelism": 2}), "alice", now=T0)
    live["metadata"]["managedFields"][0]["fieldsV1"] = {"f:spec": {"f:parallelism": {}, "f:image": {}}}
    new = copy.deepcopy(live)
    new["spec"]["completions"] = 3

    result = update_as(live, new, "bob", now=T1)

    assert list(entry(result, "alice")["fieldsV1"]["f:spec"]) == ["f:parallelism", "f:image"]


def test_update_never_mutates_its_inputs() -> None:
    live = update_as(None, created_job(), "bob", now=T0)
    new = copy.deepcopy(live)
    new["spec"]["parallelism"] = 7
    new["metadata"]["managedFields"] = []
    live_before, new_before = copy.deepcopy(live), copy.deepcopy(new)

    update_managed_fields(live, new, manager="carol", api_version=API_VERSION, list_keys=LIST_KEYS, now=T1)

    assert live == live_before
    assert new == new_before


def test_the_kubernetes_python_client_reads_the_entries() -> None:
    live = apply_as(None, configuration(job_spec()), "ci", now=T0)
    new = copy.deepcopy(live) | {"status": {"phase": "Running"}}
    live = update_as(live, new, "controller", now=T1, subresource="status")

    meta = ApiClient().deserialize(json.dumps(live["metadata"]), "V1ObjectMeta", "application/json")

    assert [(e.manager, e.operation, e.subresource) for e in meta.managed_fields] == [
        ("ci", "Apply", None),
        ("controller", "Update", "status"),
    ]
    assert meta.managed_fields[0].fields_type == "FieldsV1"
    assert meta.managed_fields[0].fields_v1 == entry(live, "ci")["fieldsV1"]
    assert meta.managed_fields[1].time.isoformat() == "2024-05-01T10:01:00+00:00"
