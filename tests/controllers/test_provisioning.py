"""Whether a placed attempt still fits the host chosen for it, as the provisioner checks before assigning it:
pure, table-driven (ADR 0048). A pool placement that no longer fits is given up, never given a new Node."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.controllers.nodes.provisioning import NEVER_RELEASED, unfit
from tests.scheduler import offering_object, pool_node_object


def attempt(
    uid: str = "me",
    *,
    gpus: list[int] | None = None,
    pool: str | None = "lab",
    node: str = "h",
    cpu: str | None = None,
    dedicated: bool = False,
) -> dict[str, Any]:
    placement: dict[str, Any] = {"node": node, "rateUSDPerHour": "0.200000"}
    if pool is not None:
        placement.update(pool=pool, provider="pool")
    if gpus is not None:
        placement["gpuIndexes"] = gpus
    spec: dict[str, Any] = {
        "job": "j",
        "jobUID": "j-uid",
        "index": 0,
        "number": 1,
        "resources": {"cpu": cpu} if cpu else {},
        "placement": {"pool": pool, "dedicated": True} if dedicated else {"pool": pool},
    }
    return {
        "metadata": {"name": f"a-{uid}", "namespace": "demo", "uid": uid},
        "spec": {**spec, "node": node} if uid != "me" else spec,
        "status": {"phase": "Running" if uid != "me" else "Provisioning", "placement": placement},
    }


def shared_node(name: str = "h", offering: str = "h100-x4-us") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"offering": offering, "provider": "sim"},
        "status": {"phase": "Ready", "capacity": {"gpus": 4}},
    }


X4 = offering_object("h100-x4-us", gpus=4, vcpu=104, memory="900Gi")


@pytest.mark.parametrize(
    ("me", "node", "others", "offering", "reason"),
    [
        pytest.param(attempt(gpus=[0]), pool_node_object("h"), [], None, None, id="pool-empty-fits"),
        pytest.param(attempt(gpus=[1]), pool_node_object("h"), [attempt("o", gpus=[0])], None, None, id="disjoint"),
        pytest.param(
            attempt(gpus=[0, 1]),
            pool_node_object("h"),
            [attempt("o", gpus=[1])],
            None,
            "has GPU 1 in use or absent",
            id="overlap",
        ),
        pytest.param(attempt(gpus=[5]), pool_node_object("h"), [], None, "has GPU 5 in use or absent", id="absent"),
        pytest.param(attempt(gpus=[0]), None, [], None, "is gone", id="node-gone"),
        pytest.param(attempt(gpus=[0]), pool_node_object("h", phase="Lost"), [], None, "is Lost", id="lost"),
        pytest.param(attempt(gpus=[0]), pool_node_object("h", phase=None), [], None, "is Booting", id="pool-booting"),
        pytest.param(
            attempt(gpus=[0]), pool_node_object("h", unschedulable=True), [], None, "is cordoned", id="cordoned"
        ),
        pytest.param(
            attempt(gpus=[1]),
            pool_node_object("h"),
            [attempt("o", gpus=[0], dedicated=True)],
            None,
            "is held by a dedicated attempt",
            id="dedicated-other",
        ),
        pytest.param(
            attempt(gpus=[0, 1, 2, 3], dedicated=True),
            pool_node_object("h"),
            [attempt("o", gpus=[3])],
            None,
            "is in use (1 attempt) and the Work is dedicated (placement.dedicated)",
            id="dedicated-me",
        ),
        pytest.param(
            attempt(gpus=[1], cpu="16"),
            pool_node_object("h", cpu="64"),
            [attempt("o", gpus=[0], cpu="50")],
            None,
            "has 14 of 64 vCPUs free and the Work needs 16",
            id="cpu",
        ),
        pytest.param(
            attempt(gpus=[2], pool=None), shared_node(), [attempt("o", gpus=[0, 1], pool=None)], X4, None, id="shared"
        ),
        pytest.param(
            attempt(pool=None), shared_node(), [attempt("o", gpus=[0], pool=None)], X4, "is in use", id="whole-on-busy"
        ),
        pytest.param(attempt(pool=None), shared_node(), [], X4, None, id="whole-on-empty"),
        pytest.param(
            attempt(gpus=[0], pool=None),
            shared_node(),
            [],
            None,
            "is of an offering gone from the price book",
            id="gone",
        ),
    ],
)
def test_a_placement_fits_its_host_or_says_why_not(
    me: dict[str, Any],
    node: dict[str, Any] | None,
    others: list[dict[str, Any]],
    offering: dict[str, Any] | None,
    reason: str | None,
) -> None:
    assert unfit(me, node, others, offering) == reason


def test_pool_and_hand_started_hosts_are_never_scaled_down() -> None:
    assert {"pool", "manual"} <= NEVER_RELEASED
