"""The Pool and Node strategies without a server: defaults, the pool finalizer, and invalid specs by field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodus.api.kinds.node import NODE
from nodus.api.kinds.pool import POOL
from nodus.apis.v1 import labels


def make_pool(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Pool",
        "metadata": {"name": "lab", "namespace": "p"},
        "spec": spec,
    }


def problems(obj: dict[str, Any], info: Any = POOL) -> dict[str, str]:
    return {error.field: error.message() for error in info.strategy.validate(obj)}


def test_a_new_pool_gets_the_hosts_finalizer_and_no_status() -> None:
    obj = make_pool(maxHosts=2)
    obj["status"] = {"hosts": 9}
    POOL.strategy.prepare_for_create(obj)
    assert obj["metadata"]["finalizers"] == [labels.POOL_HOSTS]
    assert "status" not in obj
    assert problems(obj) == {}


def test_an_update_keeps_the_finalizer_until_the_pool_is_deleted() -> None:
    old = make_pool()
    POOL.strategy.prepare_for_create(old)
    replaced = make_pool(description="without the finalizer")
    POOL.strategy.prepare_for_update(replaced, old)
    assert replaced["metadata"]["finalizers"] == [labels.POOL_HOSTS]
    deleting = copy.deepcopy(old)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    lifted = copy.deepcopy(deleting)
    lifted["metadata"]["finalizers"] = []
    POOL.strategy.prepare_for_update(lifted, deleting)
    assert lifted["metadata"]["finalizers"] == []


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        pytest.param({"maxHosts": 0}, "spec.maxHosts", "greater than or equal to 1", id="max-hosts-zero"),
        pytest.param({"description": "x" * 257}, "spec.description", "256", id="description-too-long"),
        pytest.param(
            {"nodeLabels": {"nodus.dev/pool": "other"}},
            "spec.nodeLabels[nodus.dev/pool]",
            "Nodus's own",
            id="nodus-label-key",
        ),
        pytest.param({"nodeLabels": {"rack": "a b"}}, "spec.nodeLabels[rack]", "label value", id="bad-label-value"),
        pytest.param({"nodeLabels": {"-bad": "x"}}, "spec.nodeLabels", "name part", id="bad-label-key"),
        pytest.param({"hosts": 3}, "spec.hosts", "", id="unknown-field"),
    ],
)
def test_invalid_pools_name_the_field(spec: dict[str, Any], field: str, says: str) -> None:
    found = problems(make_pool(**spec))
    assert field in found, found
    assert says in found[field]


def test_labels_of_the_users_own_domain_are_fine() -> None:
    assert problems(make_pool(maxHosts=4, nodeLabels={"example.com/rack": "r4", "site": "lab-1"})) == {}


def make_node(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "nodus.dev/v1", "kind": "Node", "metadata": {"name": "n"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param({}, "spec.offering", id="neither"),
        pytest.param({"offering": "l4-x1-us", "pool": {"project": "p", "name": "lab"}}, "spec.pool", id="both"),
        pytest.param({"pool": {"project": "p"}}, "spec.pool.name", id="pool-without-name"),
    ],
)
def test_a_node_provides_exactly_one_of_an_offering_and_a_pool(spec: dict[str, Any], field: str) -> None:
    found = problems(make_node(**spec), NODE)
    assert field in found, found


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"offering": "l4-x1-us", "provider": "sim"}, id="offering"),
        pytest.param({"pool": {"project": "p", "name": "lab"}, "provider": "pool"}, id="pool"),
    ],
)
def test_valid_nodes(spec: dict[str, Any]) -> None:
    assert problems(make_node(**spec), NODE) == {}


def test_a_nodes_pool_is_immutable() -> None:
    old = make_node(pool={"project": "p", "name": "lab"}, provider="pool")
    moved = make_node(pool={"project": "p", "name": "other"}, provider="pool")
    found = {error.field: error.message() for error in NODE.strategy.validate_update(moved, old)}
    assert "immutable" in found["spec.pool"]
    cordoned = make_node(pool={"project": "p", "name": "lab"}, provider="pool", unschedulable=True)
    assert NODE.strategy.validate_update(cordoned, old) == []


def test_the_offering_column_names_a_pool_host_by_its_pool() -> None:
    column = next(c for c in NODE.printer_columns if c.name == "Offering")
    assert column.extract(make_node(pool={"project": "p", "name": "lab"})) == "pool:p/lab"
    assert column.extract(make_node(offering="l4-x1-us")) == "l4-x1-us"
