"""Pool Works go only to Ready, schedulable hosts of their Pool in their project, at the platform fee."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from nodus.scheduler import Binding, Host, Unschedulable, run_cycle
from nodus.scheduler.capacity import PlatformFee
from tests.scheduler import make_host, make_offering, make_pool_host, make_snapshot, make_work, use

FEE = PlatformFee(Decimal("0.20"), Decimal("0.05"))


def decide(hosts: list[Host], *works: Any, offerings: Any = None) -> tuple[list[Binding], list[Unschedulable]]:
    snapshot = make_snapshot(list(works), offerings if offerings is not None else [make_offering()], hosts)
    result = run_cycle(snapshot)
    return result.bindings, result.unschedulable


def place(hosts: list[Host], **work: Any) -> Binding:
    bindings, refused = decide(hosts, make_work(pool="lab", **work))
    assert not refused, refused
    [binding] = bindings
    return binding


def refuse(hosts: list[Host], **work: Any) -> Unschedulable:
    bindings, refused = decide(hosts, make_work(pool="lab", **work))
    assert not bindings, bindings
    [why] = refused
    return why


def test_pool_binding_names_pool_node_gpus_and_fee() -> None:
    binding = place([make_pool_host("gpu-a")], gpu={"type": ["H100"], "count": 2})
    placement = binding.placement()
    assert placement["pool"] == "lab"
    assert placement["node"] == "gpu-a"
    assert placement["provider"] == "pool"
    assert placement["gpuIndexes"] == [0, 1]
    assert placement["rateUSDPerHour"] == "0.400000"
    assert "offering" not in placement
    assert "placed on pool lab host gpu-a (GPUs 0,1 of 4; platform fee $0.400000/h = 2 GPUs x $0.200000)" in (
        binding.explain
    )


def test_pool_work_never_goes_to_an_offering_or_cold_starts() -> None:
    # An idle warm host of a fitting offering is there, and capacity is unlimited: still only the pool.
    why = refuse([make_host("warm-h100")])
    assert "Pool lab has no hosts in project demo" in why.message
    assert "nodus pools join-token lab --project demo" in why.message


def test_other_projects_pool_is_invisible() -> None:
    why = refuse([make_pool_host("theirs", project="other")])
    assert "has no hosts in project demo" in why.message
    assert "theirs" not in why.message


def test_work_without_pool_never_lands_on_a_pool_host() -> None:
    # Only a pool host is up and the only offering is full: the Work waits rather than use the pool host.
    bindings, refused = decide([make_pool_host("gpu-a")], make_work(), offerings=[make_offering(capacity=0)])
    assert not bindings
    assert "gpu-a" not in refused[0].message


def test_other_pool_of_the_project_is_named_not_used() -> None:
    binding = place([make_pool_host("a-other", "other"), make_pool_host("b-lab")])
    assert binding.node == "b-lab"
    assert "a-other is in pool other, not lab" in binding.explain


def test_best_fit_takes_the_host_left_with_fewest_free_gpus() -> None:
    hosts = [
        make_pool_host("roomy", uses=()),
        make_pool_host("snug", uses=(use([0, 1, 2]),)),  # one GPU free
    ]
    binding = place(hosts)
    assert (binding.node, binding.gpu_indexes) == ("snug", (3,))
    assert "roomy fits too" in binding.explain


def test_ties_break_by_name_and_lowest_ordinals_first() -> None:
    hosts = [make_pool_host("b"), make_pool_host("a", uses=(use([0]),)), make_pool_host("c", uses=(use([1]),))]
    binding = place(hosts)
    assert (binding.node, binding.gpu_indexes) == ("a", (1,))


def test_two_works_in_one_cycle_get_disjoint_gpus() -> None:
    bindings, refused = decide(
        [make_pool_host("gpu-a")],
        make_work("one-0-1", pool="lab", gpu={"type": ["H100"], "count": 1}),
        make_work("two-0-1", pool="lab", gpu={"type": ["H100"], "count": 2}),
        make_work("three-0-1", pool="lab", gpu={"type": ["H100"], "count": 2}),
    )
    assert [(b.node, b.gpu_indexes) for b in bindings] == [("gpu-a", (0,)), ("gpu-a", (1, 2))]
    [waiting] = refused
    assert waiting.work.name == "three-0-1"
    assert "gpu-a has 1 of 4 GPUs free and the Work asks for 2" in waiting.message
    assert waiting.waiting_for_capacity


@pytest.mark.parametrize(
    ("host", "work", "reason"),
    [
        pytest.param(make_pool_host("h", unschedulable=True), {}, "h is cordoned (spec.unschedulable)", id="cordoned"),
        pytest.param(make_pool_host("h", phase="Lost"), {}, "h is Lost, not Ready", id="lost"),
        pytest.param(make_pool_host("h", phase=None), {}, "h is Booting, not Ready", id="booting"),
        pytest.param(
            make_pool_host("h", gpus=2),
            {"gpu": {"type": ["H100"], "count": 4}},
            "h has 2 GPUs and the Work asks for 4",
            id="too-few-gpus",
        ),
        pytest.param(
            make_pool_host("h", accelerator="a100-sxm-80g", family="A100"),
            {},
            "h has GPU family A100, not [H100]",
            id="other-family",
        ),
        pytest.param(
            make_pool_host("h", accelerator=None, family=None),
            {},
            "h has GPU family an unrecognised model (NVIDIA H100 80GB HBM3), not [H100]",
            id="unrecognised-model",
        ),
        pytest.param(
            make_pool_host("h", interconnect="pcie"),
            {"gpu": {"type": ["H100"], "interconnect": "NVLink"}},
            "h lacks NVLink",
            id="no-nvlink",
        ),
        pytest.param(
            make_pool_host("h", cpu="8"),
            {"resources": {"cpu": "16"}},
            "h has fewer vCPUs (8) than resources.cpu 16",
            id="too-few-vcpus",
        ),
        pytest.param(
            make_pool_host("h", uses=(use([0], dedicated=True),)),
            {},
            "h is held by a dedicated attempt",
            id="dedicated-holds-it",
        ),
        pytest.param(
            make_pool_host("h", uses=(use(None),)),
            {},
            "h runs an attempt that holds the whole host",
            id="whole-host-attempt",
        ),
        pytest.param(
            make_pool_host("h", uses=(use([0]),)),
            {"dedicated": True},
            "h is in use (1 attempt) and the Work is dedicated (placement.dedicated)",
            id="dedicated-needs-empty",
        ),
        pytest.param(
            make_pool_host("h", uses=(use([0], cpu="60"),)),
            {"resources": {"cpu": "8"}},
            "h has 4 of 64 vCPUs free and the Work needs 8",
            id="cpu-taken",
        ),
    ],
)
def test_explain_says_why_a_pool_host_was_not_used(host: Host, work: dict[str, Any], reason: str) -> None:
    why = refuse([host], **work)
    assert reason in why.message
    assert why.message.startswith("No host of pool lab can run it now (1 in the pool): ")


def test_unset_cpu_and_memory_count_as_the_per_gpu_share() -> None:
    # Three 1-GPU attempts without requests hold 3/4 of 64 vCPUs: 16 are left, so asking for 17 must wait.
    host = make_pool_host("h", uses=(use([0]), use([1]), use([2])))
    assert "h has 16 of 64 vCPUs free and the Work needs 17" in refuse([host], resources={"cpu": "17"}).message
    assert place([host], resources={"cpu": "16"}).gpu_indexes == (3,)


def test_memory_split_between_attempts() -> None:
    host = make_pool_host("h", memory="512Gi", uses=(use([0], memory="500Gi"),))
    why = refuse([host], resources={"memory": "16Gi"})
    assert "h has 12Gi of 512Gi memory free and the Work needs 16Gi" in why.message


def test_dedicated_takes_every_gpu_and_pays_for_them() -> None:
    binding = place([make_pool_host("h")], dedicated=True)
    assert binding.gpu_indexes == (0, 1, 2, 3)
    assert binding.rate_usd_per_hour == Decimal("0.80")
    assert "dedicated: the whole, empty host" in binding.explain


def test_nothing_joins_a_dedicated_binding_of_the_same_cycle() -> None:
    bindings, refused = decide(
        [make_pool_host("h")],
        make_work("ded-0-1", pool="lab", dedicated=True),
        make_work("small-0-1", pool="lab"),
    )
    assert [b.work.name for b in bindings] == ["ded-0-1"]
    assert "h runs an attempt that holds the whole host" in refused[0].message


def test_cpu_only_work_pays_the_host_fee() -> None:
    cpu_host = make_pool_host("cpu", gpus=0)
    binding = place([cpu_host], cpu_only=True, resources={"cpu": "4", "memory": "8Gi"})
    assert binding.placement()["gpuIndexes"] == []
    assert binding.rate_usd_per_hour == Decimal("0.05")


def test_cpu_only_work_without_requests_takes_the_whole_host() -> None:
    binding = place([make_pool_host("cpu", gpus=0)], cpu_only=True)
    assert "gpuIndexes" not in binding.placement()
    assert binding.placement()["node"] == "cpu"


def test_fee_above_max_rate_is_refused_with_the_field() -> None:
    why = refuse([make_pool_host("h")], gpu={"type": ["H100"], "count": 2}, maxRateUSDPerHour="0.30")
    assert "platform fee on pool lab is $0.400000/h, above placement.maxRateUSDPerHour $0.300000" in why.message


def test_gang_ranks_on_a_pool_wait_with_a_clear_message() -> None:
    from nodus.scheduler import Work
    from tests.scheduler import attempt_object

    obj = attempt_object("dist-0-1", pool="lab")
    obj["spec"].update(jobUID="u1", rank=0, gang={"size": 1, "network": "Colocated", "transport": "Direct"})
    bindings, refused = decide([make_pool_host("h")], Work.from_object(obj))
    assert not bindings
    assert "Distributed Jobs are not placed on Pools yet" in refused[0].message
