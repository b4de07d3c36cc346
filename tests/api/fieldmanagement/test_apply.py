"""Server-side apply: merging, ownership, conflicts, removal, subresources and kubectl's migration."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from nodus.api.fieldmanagement import (
    LAST_APPLIED_ANNOTATION,
    ApplyConflict,
    Conflict,
    InvalidApplyConfiguration,
    gojson,
)
from nodus.api.fieldmanagement.merging import merge
from nodus.api.fieldmanagement.schema import ListTypes
from tests.api.fieldmanagement import (
    API_VERSION,
    LIST_KEYS,
    T0,
    T1,
    T2,
    T3,
    apply_as,
    configuration,
    entry,
    entry_ids,
    job_spec,
    owned,
    stored,
    update_as,
)

Step = Callable[[dict[str, Any] | None], dict[str, Any]]
Owners = dict[tuple[str, str], list[str]]


def applies(
    manager: str,
    spec: dict[str, Any] | None = None,
    *,
    metadata: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    force: bool = False,
    now: str = T1,
    subresource: str = "",
) -> Step:
    def step(live: dict[str, Any] | None) -> dict[str, Any]:
        applied = configuration(spec, metadata=metadata, status=status)
        return apply_as(live, applied, manager, force=force, now=now, subresource=subresource)

    return step


def creates(manager: str, obj: dict[str, Any], *, now: str = T0) -> Step:
    """A create by ``manager`` through a plain (non-apply) write."""

    def step(live: dict[str, Any] | None) -> dict[str, Any]:
        assert live is None
        return update_as(None, stored(obj), manager, now=now)

    return step


def updates(manager: str, change: Callable[[dict[str, Any]], None], *, now: str = T1) -> Step:
    """An update (PUT or non-apply patch) by ``manager`` that makes ``change`` to the live object."""

    def step(live: dict[str, Any] | None) -> dict[str, Any]:
        assert live is not None
        new = copy.deepcopy(live)
        change(new)
        return update_as(live, new, manager, now=now)

    return step


def set_spec(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda obj: obj["spec"].update(values)


def run(steps: list[Step]) -> dict[str, Any]:
    live: dict[str, Any] | None = None
    for step in steps:
        live = step(live)
    assert live is not None
    return live


def env(*pairs: str) -> list[dict[str, str]]:
    """``env("A=1", "B=2")``: a keyed list of name/value items."""
    return [{"name": name, "value": value} for name, value in (pair.split("=") for pair in pairs)]


def items(*names: str) -> list[str]:
    """The paths an applier owns for env items with a name and a value, in structured-merge-diff's order: the
    items, then the fields of each."""
    paths = [f'.spec.env[name="{name}"]' for name in names]
    return paths + [f'.spec.env[name="{name}"].{part}' for name in names for part in ("name", "value")]


@pytest.mark.parametrize(
    ("steps", "spec", "owners"),
    [
        pytest.param(
            [applies("alice", {"image": "x:1", "parallelism": 2}), applies("bob", {"image": "x:1", "completions": 4})],
            {"image": "x:1", "parallelism": 2, "completions": 4},
            {
                ("alice", "Apply"): [".spec.image", ".spec.parallelism"],
                ("bob", "Apply"): [".spec.completions", ".spec.image"],
            },
            id="two-managers-share-a-field-with-the-same-value",
        ),
        pytest.param(
            [applies("alice", {"image": "x:1", "parallelism": 2}), applies("alice", {"image": "x:1"})],
            {"image": "x:1"},
            {("alice", "Apply"): [".spec.image"]},
            id="field-removed-when-its-applier-stops-applying-it",
        ),
        pytest.param(
            [
                applies("alice", {"image": "x:1", "parallelism": 2}),
                applies("bob", {"parallelism": 2}),
                applies("alice", {"image": "x:1"}),
            ],
            {"image": "x:1", "parallelism": 2},
            {("alice", "Apply"): [".spec.image"], ("bob", "Apply"): [".spec.parallelism"]},
            id="shared-field-kept-when-one-owner-stops-applying-it",
        ),
        pytest.param(
            [
                applies("alice", {"image": "x:1", "parallelism": 2}),
                updates("autoscaler", set_spec(parallelism=6)),
                applies("alice", {"image": "x:1"}),
            ],
            {"image": "x:1", "parallelism": 6},
            {("alice", "Apply"): [".spec.image"], ("autoscaler", "Update"): [".spec.parallelism"]},
            id="field-an-updater-took-is-not-removed",
        ),
        pytest.param(
            [applies("alice", {"image": "x:1", "parallelism": 2}), applies("bob", {"parallelism": 5}, force=True)],
            {"image": "x:1", "parallelism": 5},
            {("alice", "Apply"): [".spec.image"], ("bob", "Apply"): [".spec.parallelism"]},
            id="force-takes-ownership",
        ),
        pytest.param(
            [applies("alice", {"parallelism": 2}), applies("bob", {"parallelism": 5}, force=True)],
            {"parallelism": 5},
            {("bob", "Apply"): [".spec.parallelism"]},
            id="force-drops-an-entry-left-empty",
        ),
        pytest.param(
            [applies("alice", {"env": env("A=1", "B=2")}), applies("bob", {"env": env("C=3")})],
            {"env": env("A=1", "B=2", "C=3")},
            {("alice", "Apply"): items("A", "B"), ("bob", "Apply"): items("C")},
            id="keyed-list-items-merge-by-key",
        ),
        pytest.param(
            [
                applies("alice", {"env": env("A=1", "B=2")}),
                applies("bob", {"env": env("C=3")}),
                applies("alice", {"env": env("B=2")}),
            ],
            {"env": env("B=2", "C=3")},
            {("alice", "Apply"): items("B"), ("bob", "Apply"): items("C")},
            id="keyed-list-item-removed-when-its-applier-drops-it",
        ),
        pytest.param(
            [applies("alice", {"env": env("A=1")}), applies("bob", {"env": env("A=1")}), applies("alice", {})],
            {"env": env("A=1")},
            {("bob", "Apply"): items("A")},
            id="keyed-list-item-kept-while-another-applier-owns-it",
        ),
        pytest.param(
            [applies("alice", {"env": env("A=1")}), applies("alice", {"env": env("A=2")})],
            {"env": env("A=2")},
            {("alice", "Apply"): items("A")},
            id="keyed-list-item-field-changed-in-place",
        ),
        pytest.param(
            [
                applies("alice", {"sidecars": [{"name": "s", "image": "proxy:1", "env": env("A=1")}]}),
                applies("bob", {"sidecars": [{"name": "s", "env": env("B=2")}]}),
            ],
            {"sidecars": [{"name": "s", "image": "proxy:1", "env": env("A=1", "B=2")}]},
            {
                ("alice", "Apply"): [
                    '.spec.sidecars[name="s"]',
                    '.spec.sidecars[name="s"].image',
                    '.spec.sidecars[name="s"].name',
                    '.spec.sidecars[name="s"].env[name="A"]',
                    '.spec.sidecars[name="s"].env[name="A"].name',
                    '.spec.sidecars[name="s"].env[name="A"].value',
                ],
                ("bob", "Apply"): [
                    '.spec.sidecars[name="s"]',
                    '.spec.sidecars[name="s"].name',
                    '.spec.sidecars[name="s"].env[name="B"]',
                    '.spec.sidecars[name="s"].env[name="B"].name',
                    '.spec.sidecars[name="s"].env[name="B"].value',
                ],
            },
            id="nested-keyed-lists-merge-at-every-level",
        ),
        pytest.param(
            [
                applies("alice", {"command": ["python", "-m", "train"]}),
                applies("bob", {"command": ["eval"]}, force=True),
            ],
            {"command": ["eval"]},
            {("bob", "Apply"): [".spec.command"]},
            id="atomic-list-replaced-whole",
        ),
        pytest.param(
            [applies("alice", {"command": ["a", "b"]}), applies("alice", {"command": ["b"]})],
            {"command": ["b"]},
            {("alice", "Apply"): [".spec.command"]},
            id="atomic-list-is-one-field",
        ),
        pytest.param(
            [
                applies("alice", {"resources": {"gpu": {"count": 8, "model": "h100"}}}),
                applies("bob", {"resources": {"gpu": {"count": 8}}}),
                applies("alice", {}),
            ],
            {"resources": {"gpu": {"count": 8}}},
            {("bob", "Apply"): [".spec.resources.gpu.count"]},
            id="objects-are-granular-and-emptied-objects-go",
        ),
        pytest.param(
            [
                applies("alice", {"image": "x:1", "parallelism": 2}),
                applies("alice", {"image": "x:1", "parallelism": None}),
            ],
            {"image": "x:1"},
            {("alice", "Apply"): [".spec.image", ".spec.parallelism"]},
            id="null-removes-a-scalar-and-owns-it",
        ),
        pytest.param(
            [applies("bob", {"resources": {"gpu": {"count": 8}}}), applies("alice", {"resources": None})],
            {"resources": {"gpu": {"count": 8}}},
            {("bob", "Apply"): [".spec.resources.gpu.count"]},
            id="null-leaves-an-object-alone-and-owns-nothing",
        ),
    ],
)
def test_ownership(steps: list[Step], spec: dict[str, Any], owners: Owners) -> None:
    result = run(steps)

    assert result["spec"] == spec
    assert {(manager, operation) for manager, operation, _ in entry_ids(result)} == set(owners)
    for (manager, operation), paths in owners.items():
        assert owned(result, manager, operation) == paths


def test_fields_nobody_owns_survive_an_applier_dropping_its_own() -> None:
    live = apply_as(None, configuration({"image": "x:1", "parallelism": 2, "env": env("A=1")}), "alice", now=T0)
    # Fields written before the object was tracked, or whose owner gave them up, belong to nobody.
    live["spec"]["completions"] = 4
    live["spec"]["env"][0]["note"] = "kept"

    result = apply_as(live, configuration({"image": "x:1", "env": env("A=1")}), "alice")

    assert result["spec"] == {"image": "x:1", "completions": 4, "env": [{"name": "A", "value": "1", "note": "kept"}]}


@pytest.mark.parametrize(
    ("live", "applied", "order"),
    [
        pytest.param(["a", "x", "b"], ["b", "a"], ["x", "b", "a"], id="unmentioned-item-keeps-its-place"),
        pytest.param(["a", "b"], ["c"], ["a", "b", "c"], id="new-items-appended"),
        pytest.param(["a", "b", "c"], ["c", "d", "a"], ["b", "c", "d", "a"], id="applied-order-wins-for-applied-items"),
        pytest.param(["a", "b"], ["b", "new", "a"], ["b", "new", "a"], id="new-item-between-reordered-items"),
        pytest.param(["x", "a"], ["a"], ["x", "a"], id="live-prefix-kept"),
    ],
)
def test_keyed_list_merge_order(live: list[str], applied: list[str], order: list[str]) -> None:
    merged = merge(
        {"spec": {"env": [{"name": name, "value": "live"} for name in live]}},
        {"spec": {"env": [{"name": name} for name in applied]}},
        ListTypes(LIST_KEYS),
    )

    assert [variable["name"] for variable in merged["spec"]["env"]] == order
    assert all(variable.get("value") == "live" for variable in merged["spec"]["env"] if variable["name"] in live)


def csa_created_job() -> Step:
    """A Job created by a plain write (as client-side kubectl apply does), labelled team=llm."""
    return creates("kubectl-client-side-apply", configuration(job_spec(), metadata={"labels": {"team": "llm"}}))


@pytest.mark.parametrize(
    ("steps", "conflicting", "message"),
    [
        pytest.param(
            [csa_created_job(), applies("ci", {"parallelism": 3})],
            [Conflict("kubectl-client-side-apply", ".spec.parallelism", "Update", "", API_VERSION)],
            'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using nodus.dev/v1: '
            ".spec.parallelism",
            id="one-conflict-with-an-updater",
        ),
        pytest.param(
            [
                csa_created_job(),
                applies("alice", metadata={"labels": {"tier": "gold"}}),
                applies(
                    "bob",
                    {"parallelism": 3, "completions": 4, "env": env("LR=0.01")},
                    metadata={"labels": {"tier": "silver", "team": "llm"}},
                ),
            ],
            [
                Conflict("alice", ".metadata.labels.tier", "Apply"),
                Conflict("kubectl-client-side-apply", ".spec.parallelism", "Update", "", API_VERSION),
                Conflict("kubectl-client-side-apply", '.spec.env[name="LR"].value', "Update", "", API_VERSION),
            ],
            'Apply failed with 3 conflicts: conflicts with "alice":\n'
            "- .metadata.labels.tier\n"
            'conflicts with "kubectl-client-side-apply" using nodus.dev/v1:\n'
            "- .spec.parallelism\n"
            '- .spec.env[name="LR"].value',
            id="every-conflict-reported-with-its-owner",
        ),
        pytest.param(
            [applies("alice", {"parallelism": 2}), applies("bob", {"parallelism": 1})],
            [Conflict("alice", ".spec.parallelism", "Apply")],
            'Apply failed with 1 conflict: conflict with "alice": .spec.parallelism',
            id="conflict-with-an-applier",
        ),
        pytest.param(
            [
                csa_created_job(),
                applies("controller", status={"phase": "Running"}, subresource="status"),
                applies("ops", status={"phase": "Failed"}, subresource="status"),
            ],
            [Conflict("controller", ".status.phase", "Apply", "status")],
            'Apply failed with 1 conflict: conflict with "controller" with subresource "status": .status.phase',
            id="conflict-with-a-status-applier",
        ),
        pytest.param(
            [creates("alice", configuration(job_spec())), applies("alice", {"parallelism": 9})],
            [Conflict("alice", ".spec.parallelism", "Update", "", API_VERSION)],
            'Apply failed with 1 conflict: conflict with "alice" using nodus.dev/v1: .spec.parallelism',
            id="an-applier-conflicts-with-its-own-update-entry",
        ),
    ],
)
def test_conflicts(steps: list[Step], conflicting: list[Conflict], message: str) -> None:
    before = run(steps[:-1])

    with pytest.raises(ApplyConflict) as raised:
        steps[-1](before)

    assert raised.value.conflicts == conflicting
    assert raised.value.message() == message
    assert str(raised.value) == message
    assert raised.value.causes() == [
        {"type": "FieldManagerConflict", "message": f"conflict with {conflict.owner}", "field": conflict.field}
        for conflict in conflicting
    ]


def test_conflicts_built_by_hand_are_worded_like_kube_apiserver() -> None:
    conflict = ApplyConflict(
        [
            Conflict("m1", ".spec.a", "Update", "", API_VERSION),
            Conflict("m0", ".spec.b", "Apply"),
            Conflict("m1", ".spec.b", "Update", "", API_VERSION),
        ]
    )

    assert conflict.message() == (
        'Apply failed with 3 conflicts: conflicts with "m0":\n- .spec.b\n'
        'conflicts with "m1" using nodus.dev/v1:\n- .spec.a\n- .spec.b'
    )


def test_unchanged_values_never_conflict() -> None:
    live = run([csa_created_job()])

    result = apply_as(live, configuration(job_spec(), metadata={"labels": {"team": "llm"}}), "ci")

    assert result["spec"] == live["spec"]
    assert owned(result, "ci") == [
        ".metadata.labels.team",
        ".spec.command",
        ".spec.completions",
        ".spec.image",
        ".spec.parallelism",
        *items("EPOCHS", "LR"),
        ".spec.resources.gpu.count",
    ]
    # Shared: the creator keeps every field too.
    assert entry(result, "kubectl-client-side-apply", "Update") == entry(live, "kubectl-client-side-apply", "Update")
    assert entry_ids(result) == [("ci", "Apply", ""), ("kubectl-client-side-apply", "Update", "")]


def test_force_moves_only_the_conflicting_fields() -> None:
    live = run([csa_created_job()])

    result = apply_as(live, configuration({"parallelism": 3, "env": env("LR=0.01")}), "ci", force=True)

    assert result["spec"]["parallelism"] == 3
    assert owned(result, "ci") == [".spec.parallelism", *items("LR")]
    csa = owned(result, "kubectl-client-side-apply", "Update")
    assert ".spec.parallelism" not in csa and '.spec.env[name="LR"].value' not in csa
    assert ".spec.completions" in csa and '.spec.env[name="LR"].name' in csa


def test_create_by_apply() -> None:
    applied = configuration(job_spec(), metadata={"labels": {"team": "llm"}}, status={"phase": "Running"})

    result = apply_as(None, applied, "ci", now=T0)

    assert "status" not in result
    assert result["spec"] == job_spec()
    assert result["metadata"]["managedFields"] == [
        {
            "manager": "ci",
            "operation": "Apply",
            "apiVersion": API_VERSION,
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {"f:team": {}}},
                "f:spec": {
                    "f:command": {},
                    "f:completions": {},
                    "f:env": {
                        'k:{"name":"EPOCHS"}': {".": {}, "f:name": {}, "f:value": {}},
                        'k:{"name":"LR"}': {".": {}, "f:name": {}, "f:value": {}},
                    },
                    "f:image": {},
                    "f:parallelism": {},
                    "f:resources": {"f:gpu": {"f:count": {}}},
                },
            },
        }
    ]


def test_an_apply_that_changes_nothing_keeps_the_time() -> None:
    first = apply_as(None, configuration(job_spec()), "ci", now=T0)

    again = apply_as(first, configuration(job_spec()), "ci", now=T2)

    assert again == first


def test_an_apply_that_changes_the_object_moves_the_time() -> None:
    first = apply_as(None, configuration(job_spec()), "ci", now=T0)

    changed = apply_as(first, configuration({**job_spec(), "parallelism": 3}), "ci", now=T2)

    assert entry(changed, "ci")["time"] == T2


def test_sharing_values_without_changing_the_object_records_no_time() -> None:
    # kube-apiserver stamps an applier's time only when its apply changed the object.
    first = apply_as(None, configuration({"image": "x:1"}), "alice", now=T0)

    shared = apply_as(first, configuration({"image": "x:1"}), "bob", now=T2)

    assert "time" not in entry(shared, "bob")
    assert owned(shared, "bob") == [".spec.image"]


def test_status_is_ignored_on_the_main_resource() -> None:
    live = run([csa_created_job()])
    live["status"] = {"phase": "Pending"}

    result = apply_as(live, configuration({"image": "x:2"}, status={"phase": "Running"}), "ci", force=True)

    assert result["spec"]["image"] == "x:2"
    assert result["status"] == {"phase": "Pending"}
    assert owned(result, "ci") == [".spec.image"]


def test_status_subresource_apply_owns_and_changes_only_status() -> None:
    live = run([csa_created_job()])

    result = apply_as(
        live,
        configuration({"parallelism": 99}, status={"phase": "Running", "conditions": [{"type": "Ready"}]}),
        "controller",
        subresource="status",
    )

    assert result["spec"] == live["spec"]
    assert result["status"] == {"phase": "Running", "conditions": [{"type": "Ready"}]}
    assert entry_ids(result) == [("controller", "Apply", "status"), ("kubectl-client-side-apply", "Update", "")]
    assert entry(result, "controller", subresource="status")["subresource"] == "status"
    assert owned(result, "controller", subresource="status") == [
        ".status.phase",
        '.status.conditions[type="Ready"]',
        '.status.conditions[type="Ready"].type',
    ]


def test_status_applier_removes_the_status_fields_it_stops_applying() -> None:
    live = run(
        [csa_created_job(), applies("controller", status={"phase": "Running", "message": "ok"}, subresource="status")]
    )

    result = apply_as(live, configuration(status={"phase": "Running"}), "controller", subresource="status", now=T2)

    assert result["status"] == {"phase": "Running"}


def test_status_subresource_apply_owns_metadata_without_changing_it() -> None:
    # As kube-apiserver: /status owns the metadata fields it applies, while the strategy keeps the stored metadata.
    live = run([csa_created_job()])
    applied = configuration(metadata={"labels": {"stage": "x"}}, status={"phase": "Running"})

    result = apply_as(live, applied, "kubectl", subresource="status")

    assert result["metadata"]["labels"] == {"team": "llm"}
    assert "annotations" not in result["metadata"]
    assert owned(result, "kubectl", subresource="status") == [".metadata.labels.stage", ".status.phase"]


def test_update_then_apply_by_the_same_manager_gives_two_entries() -> None:
    result = run([creates("alice", configuration(job_spec())), applies("alice", job_spec(), now=T1)])

    assert entry_ids(result) == [("alice", "Apply", ""), ("alice", "Update", "")]
    assert entry(result, "alice", "Update")["time"] == T0


def test_entries_are_ordered_as_kube_apiserver_orders_them() -> None:
    result = run(
        [
            creates("zz-creator", configuration({"image": "x:1"})),
            applies("zeta", {"completions": 1}, now=T2),
            applies("alpha", {"parallelism": 1}, now=T3),
            updates("aa-editor", set_spec(image="x:2"), now=T1),
        ]
    )

    # Apply entries first, then Update entries; each by time, then by manager.
    assert entry_ids(result) == [
        ("zeta", "Apply", ""),
        ("alpha", "Apply", ""),
        ("zz-creator", "Update", ""),
        ("aa-editor", "Update", ""),
    ]


def test_labels_and_annotations_are_granular() -> None:
    result = run(
        [
            applies("alice", metadata={"labels": {"team": "llm"}, "annotations": {"a": "1"}}),
            applies("bob", metadata={"labels": {"tier": "gold"}, "annotations": {"b": "2"}}),
            applies("alice", metadata={"annotations": {"a": "1"}}),
        ]
    )

    assert result["metadata"]["labels"] == {"tier": "gold"}
    assert result["metadata"]["annotations"] == {"a": "1", "b": "2"}
    assert owned(result, "alice") == [".metadata.annotations.a"]
    assert owned(result, "bob") == [".metadata.annotations.b", ".metadata.labels.tier"]


def test_finalizers_merge_as_a_set() -> None:
    result = run(
        [
            applies("alice", metadata={"finalizers": ["nodus.dev/a"]}),
            applies("bob", metadata={"finalizers": ["nodus.dev/b"]}),
        ]
    )
    assert result["metadata"]["finalizers"] == ["nodus.dev/a", "nodus.dev/b"]
    assert owned(result, "alice") == ['.metadata.finalizers[="nodus.dev/a"]']

    dropped = apply_as(result, configuration(metadata={}), "alice", now=T2)

    assert dropped["metadata"]["finalizers"] == ["nodus.dev/b"]


def test_an_untracked_object_is_first_owned_by_before_first_apply() -> None:
    untracked = stored(configuration(job_spec()))

    with pytest.raises(ApplyConflict) as raised:
        apply_as(untracked, configuration({"parallelism": 5}), "ci")
    assert raised.value.conflicts == [Conflict("before-first-apply", ".spec.parallelism", "Update", "", API_VERSION)]

    shared = apply_as(untracked, configuration({"parallelism": 2}), "ci", now=T1)
    assert entry_ids(shared) == [("ci", "Apply", ""), ("before-first-apply", "Update", "")]
    assert entry(shared, "before-first-apply", "Update")["time"] == T1


def last_applied(applied: dict[str, Any]) -> str:
    return gojson.dumps(applied) + "\n"


def csa_applied(spec: dict[str, Any]) -> Step:
    """A Job as client-side ``kubectl apply`` leaves it: annotated with what it applied, owned by its updater."""
    applied = configuration(spec)
    annotated = configuration(spec, metadata={"annotations": {LAST_APPLIED_ANNOTATION: last_applied(applied)}})
    return creates("kubectl-client-side-apply", annotated)


def test_kubectl_server_side_apply_takes_over_from_client_side_apply() -> None:
    live = run([csa_applied(job_spec())])
    config = configuration({**job_spec(), "parallelism": 3})

    result = apply_as(live, config, "kubectl")

    assert result["spec"]["parallelism"] == 3
    assert ".spec.parallelism" in owned(result, "kubectl")
    assert ".spec.parallelism" not in owned(result, "kubectl-client-side-apply", "Update")
    assert result["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] == last_applied(config)


def test_client_side_apply_does_not_excuse_conflicts_with_other_managers() -> None:
    live = run([csa_applied(job_spec()), updates("autoscaler", set_spec(parallelism=6))])

    with pytest.raises(ApplyConflict) as raised:
        apply_as(live, configuration({**job_spec(), "parallelism": 3, "completions": 8}), "kubectl")

    assert raised.value.conflicts == [Conflict("autoscaler", ".spec.parallelism", "Update", "", API_VERSION)]


def test_kubectl_adds_no_annotation_of_its_own() -> None:
    result = apply_as(None, configuration(job_spec()), "kubectl")

    assert "annotations" not in result["metadata"]


def test_only_the_kubectl_manager_migrates() -> None:
    live = run([csa_applied(job_spec())])

    with pytest.raises(ApplyConflict):
        apply_as(live, configuration({**job_spec(), "parallelism": 3}), "ci")


@pytest.mark.parametrize(
    ("applied", "error"),
    [
        pytest.param(
            {**configuration({}), "apiVersion": "nodus.dev/v2"},
            "invalid object type: nodus.dev/v2, Kind=Job",
            id="other-api-version",
        ),
        pytest.param(
            {**configuration({}), "kind": "Queue"}, "invalid object type: nodus.dev/v1, Kind=Queue", id="kind"
        ),
        pytest.param(
            configuration({}, metadata={"managedFields": []}), "metadata.managedFields must be nil", id="managed-fields"
        ),
        pytest.param(
            configuration({"env": env("A=1", "A=2")}),
            'failed to create typed patch object: .spec.env: duplicate entries for key [name="A"]',
            id="duplicate-key",
        ),
        pytest.param(
            configuration({"env": [{"value": "1"}]}),
            "failed to create typed patch object: .spec.env: element 0: associative list with keys has an element "
            'that omits key field "name" (and doesn\'t have default value)',
            id="missing-key",
        ),
        pytest.param(
            configuration({"env": ["A"]}),
            "failed to create typed patch object: .spec.env: element 0: associative list with keys may not have "
            "non-map elements",
            id="item-not-an-object",
        ),
    ],
)
def test_invalid_configurations_are_refused(applied: dict[str, Any], error: str) -> None:
    live = run([applies("ci", {"image": "x:1"})])

    with pytest.raises(InvalidApplyConfiguration) as raised:
        apply_as(live, applied, "ci")

    assert str(raised.value) == error


def test_apply_needs_a_manager_and_a_known_subresource() -> None:
    with pytest.raises(InvalidApplyConfiguration, match="fieldManager is required"):
        apply_as(None, configuration({}), "")
    with pytest.raises(ValueError, match="subresource"):
        apply_as(None, configuration({}), "ci", subresource="scale")
    with pytest.raises(ValueError, match="existing object"):
        apply_as(None, configuration(status={}), "ci", subresource="status")


def test_apply_never_mutates_its_inputs() -> None:
    live = run([csa_created_job(), applies("alice", {"env": env("A=1")})])
    applied = configuration({"env": env("B=2"), "parallelism": None}, status={"phase": "x"})
    live_before, applied_before = copy.deepcopy(live), copy.deepcopy(applied)

    apply_as(live, applied, "alice", force=True)
    with pytest.raises(ApplyConflict):
        apply_as(live, configuration({"parallelism": 1}), "bob")

    assert live == live_before
    assert applied == applied_before


def test_entries_of_versions_no_longer_served_are_dropped() -> None:
    live = run([applies("alice", {"image": "x:1"})])
    old = copy.deepcopy(entry(live, "alice")) | {"manager": "legacy", "apiVersion": "nodus.dev/v1beta1"}
    live["metadata"]["managedFields"].append(old)

    result = apply_as(live, configuration({"image": "x:2"}), "bob", force=True, now=T0)

    assert entry_ids(result) == [("bob", "Apply", "")]
