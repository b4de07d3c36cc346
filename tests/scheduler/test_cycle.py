"""A cycle binds pending Work in queue order, consuming capacity and warm hosts as it goes."""

from __future__ import annotations

import dataclasses
import random
from decimal import Decimal
from typing import Any

import pytest

from nodus.scheduler import Binding, CycleResult, Host, Offering, WorkKey, run_cycle
from tests.scheduler import make_cpu_offering, make_host, make_offering, make_snapshot, make_work


def chosen(result: CycleResult) -> list[tuple[str, str, str | None]]:
    """(attempt, offering, warm node) per binding, in order."""
    return [(b.work.name, b.offering, b.node) for b in result.bindings]


def place_one(offerings: list[Offering], hosts: list[Host] | None = None, **work: Any) -> Binding:
    result = run_cycle(make_snapshot([make_work(**work)], offerings, hosts))
    assert not result.unschedulable, result.unschedulable
    [binding] = result.bindings
    return binding


def test_binding_carries_the_placement() -> None:
    binding = place_one([make_offering("h100-x1-us", rate="2.690000", region_class="us")])
    assert binding.work == WorkKey("demo", "train-0-1")
    assert (binding.offering, binding.node, binding.warm_reuse) == ("h100-x1-us", None, False)
    assert binding.rate_usd_per_hour == Decimal("2.69")
    assert (binding.region_class, binding.interruptible, binding.cycle) == ("us", False, 7)
    assert binding.placement() == {
        "offering": "h100-x1-us",
        "provider": "sim",
        "region": "us-east",
        "regionClass": "us",
        "interruptible": False,
        "rateUSDPerHour": "2.690000",
        "warmReuse": False,
        "explain": binding.explain,
        "cycle": 7,
    }


# Expected 1h run: cheap $10.333333 (boot 2m), mid $10.98 (boot 1m), fast $11.595833 (boot 30s).
THREE = [
    make_offering("cheap", rate="10.000000", boot="2m"),
    make_offering("mid", rate="10.800000", boot="1m"),
    make_offering("fast", rate="11.500000", boot="30s"),
]


@pytest.mark.parametrize(
    ("profile", "offering"),
    [
        pytest.param("Cost", "cheap", id="cost"),
        pytest.param("Speed", "fast", id="speed"),
        pytest.param("Balanced", "mid", id="balanced"),
    ],
)
def test_profiles(profile: str, offering: str) -> None:
    assert place_one(THREE, profile=profile).offering == offering


def test_cost_profile_uses_expected_duration() -> None:
    # A slow boot matters less the longer the run: over 20h the lower rate wins ($49.20 vs $50.020833).
    offerings = [
        make_offering("slow-boot-cheaper", rate="2.400000", boot="30m"),
        make_offering("quick-boot", rate="2.500000", boot="30s"),
    ]
    assert place_one(offerings, profile="Cost", expected="1h").offering == "quick-boot"
    assert place_one(offerings, profile="Cost", expected="20h").offering == "slow-boot-cheaper"


ON_DEMAND = make_offering("on-demand", rate="1.200000")  # expected $1.23 for 1h
SPOT = make_offering("spot", rate="1.000000", interruptible=True, mtbi="6h")  # expected $1.1125 with re-work
SPOT_THIN = make_offering("spot-thin", rate="1.150000", interruptible=True, mtbi="6h")  # $1.279375: discount too thin
SPOT_DEAR = make_offering("spot-dear", rate="3.000000", interruptible=True, mtbi="6h")


@pytest.mark.parametrize(
    ("interruptible", "offerings", "offering"),
    [
        pytest.param("Never", [ON_DEMAND, SPOT], "on-demand", id="never"),
        pytest.param("Allow", [ON_DEMAND, SPOT], "spot", id="allow-cheaper-spot"),
        pytest.param("Allow", [ON_DEMAND, SPOT_THIN], "on-demand", id="allow-rework-outweighs-discount"),
        pytest.param("Prefer", [ON_DEMAND, SPOT_DEAR], "spot-dear", id="prefer-even-if-dearer"),
        pytest.param("Prefer", [ON_DEMAND], "on-demand", id="prefer-falls-back"),
    ],
)
def test_interruptible(interruptible: str, offerings: list[Offering], offering: str) -> None:
    assert place_one(offerings, profile="Cost", interruptible=interruptible).offering == offering


def test_prefer_falls_back_to_on_demand_when_interruptible_is_full() -> None:
    spot = make_offering("spot", rate="1.000000", interruptible=True, mtbi="6h", capacity=1)
    work = [make_work(f"job-{i}-1", interruptible="Prefer", profile="Speed") for i in range(2)]
    result = run_cycle(make_snapshot(work, [ON_DEMAND, spot]))
    assert chosen(result) == [("job-0-1", "spot", None), ("job-1-1", "on-demand", None)]
    assert result.bindings[0].interruptible is True
    assert "on-demand because no interruptible offering is available" in result.bindings[1].explain


def test_capacity_is_consumed_within_a_cycle() -> None:
    offerings = [make_offering("a-small", capacity=2), make_offering("b-other", rate="3.000000", capacity=1)]
    hosts = [make_host("n-busy", "a-small", busy=True)]
    work = [make_work(f"job-{i}-1", profile="Cost") for i in range(3)]
    result = run_cycle(make_snapshot(work, offerings, hosts))
    assert chosen(result) == [("job-0-1", "a-small", None), ("job-1-1", "b-other", None)]
    [waiting] = result.unschedulable
    assert waiting.work == WorkKey("demo", "job-2-1")
    assert waiting.reason == "Unschedulable"
    assert waiting.waiting_for_capacity is True
    # Offerings full at different levels are counted together.
    assert "No offering fits: 2 are full; or wait" not in waiting.message
    assert waiting.message.startswith("No offering fits: 2 are full. Wait for capacity")
    assert "a-small is full (2 of 2 hosts in use)" in result.bindings[1].explain


@pytest.mark.parametrize(
    ("hosts", "capacity_left"),
    [
        pytest.param([make_host("n1", phase="Booting", busy=True)], False, id="booting-counts"),
        pytest.param([make_host("n1", phase="Ready", busy=True)], False, id="ready-counts"),
        pytest.param([make_host("n1", phase="Lost")], True, id="lost-does-not-count"),
        pytest.param([make_host("n1", phase="Failed")], True, id="failed-does-not-count"),
        pytest.param([make_host("n1", phase="Terminating")], True, id="terminating-does-not-count"),
        pytest.param([make_host("n1", "gone-from-pricebook", busy=True)], True, id="unknown-offering-ignored"),
    ],
)
def test_hosts_in_use_count_against_capacity(hosts: list[Host], capacity_left: bool) -> None:
    result = run_cycle(make_snapshot([make_work()], [make_offering(capacity=1)], hosts))
    assert bool(result.bindings) is capacity_left


def test_unknown_capacity_is_unlimited() -> None:
    hosts = [make_host(f"n{i}", busy=True) for i in range(50)]
    work = [make_work(f"job-{i}-1") for i in range(20)]
    assert len(run_cycle(make_snapshot(work, [make_offering()], hosts)).bindings) == 20


def test_warm_hosts_are_reused_in_name_order_without_new_capacity() -> None:
    hosts = [make_host("n-b"), make_host("n-a", phase="Booting"), make_host("n-busy", busy=True)]
    work = [make_work(f"job-{i}-1") for i in range(4)]
    result = run_cycle(make_snapshot(work, [make_offering(capacity=4)], hosts))
    assert chosen(result) == [
        ("job-0-1", "h100-x1-us", "n-a"),
        ("job-1-1", "h100-x1-us", "n-b"),
        ("job-2-1", "h100-x1-us", None),  # all three hosts hold capacity; the fourth is new
    ]
    assert [b.warm_reuse for b in result.bindings] == [True, True, False]
    assert result.bindings[0].placement()["node"] == "n-a"
    assert "warm node n-a reused" in result.bindings[0].explain
    assert "1 is full (4 of 4 hosts in use)" in result.unschedulable[0].message


@pytest.mark.parametrize(
    "host",
    [
        pytest.param(make_host("n1", busy=True), id="busy"),
        pytest.param(make_host("n1", unschedulable=True), id="unschedulable"),
        pytest.param(make_host("n1", warm_until="2026-11-29T11:59:00Z"), id="warm-period-over"),
        pytest.param(make_host("n1", "a100-x1-us"), id="other-offering-does-not-fit"),
    ],
)
def test_hosts_that_are_not_reused(host: Host) -> None:
    offerings = [make_offering(), make_offering("a100-x1-us", family="A100", accelerator="a100-sxm-80g")]
    binding = place_one(offerings, [host])
    assert (binding.offering, binding.node, binding.warm_reuse) == ("h100-x1-us", None, False)


@pytest.mark.parametrize(
    ("profile", "cold_rate", "offering"),
    [
        # Warm on $2.50 costs $2.50; cold on $2.45 costs $2.51125 with its 90s boot: warm wins.
        pytest.param("Cost", "2.450000", "warm-offering", id="cost-warm-saves-the-boot"),
        # Cold on $2.00 costs $2.05: cheaper even with the boot.
        pytest.param("Cost", "2.000000", "cold-offering", id="cost-cheaper-cold"),
        pytest.param("Speed", "0.100000", "warm-offering", id="speed-warm-first"),
        pytest.param("Balanced", "2.400000", "warm-offering", id="balanced-warm-within-band"),
        pytest.param("Balanced", "1.000000", "cold-offering", id="balanced-warm-too-dear"),
    ],
)
def test_warm_reuse_where_the_profile_allows(profile: str, cold_rate: str, offering: str) -> None:
    offerings = [make_offering("warm-offering"), make_offering("cold-offering", rate=cold_rate)]
    binding = place_one(offerings, [make_host("n1", "warm-offering")], profile=profile)
    assert binding.offering == offering
    assert binding.warm_reuse is (offering == "warm-offering")


def test_speed_takes_a_warm_host_of_a_slower_family() -> None:
    offerings = [make_offering("h100"), make_offering("a100", family="A100", accelerator="a100-sxm-80g")]
    binding = place_one(offerings, [make_host("n1", "a100")], gpu={"type": ["H100", "A100"]}, profile="Speed")
    assert (binding.offering, binding.node) == ("a100", "n1")


def test_gpu_and_cpu_work_share_a_cycle() -> None:
    offerings = [make_offering("h100-x8", gpus=8), make_cpu_offering("cpu")]
    work = [
        make_work("gpu-0-1", gpu={"type": ["H100"], "count": 8}),
        make_work("cpu-0-1", cpu_only=True, resources={"cpu": "8"}),
    ]
    assert chosen(run_cycle(make_snapshot(work, offerings))) == [("gpu-0-1", "h100-x8", None), ("cpu-0-1", "cpu", None)]


def test_same_snapshot_in_any_listing_order_gives_the_same_result() -> None:
    offerings = [make_offering(f"h100-{i:02d}", rate="2.500000", capacity=2) for i in range(6)]
    hosts = [make_host(f"n{i}", f"h100-{i % 6:02d}") for i in range(4)]
    work = [make_work(f"job-{i}-1", profile=profile) for i, profile in enumerate(["Cost", "Speed", "Balanced"] * 5)]
    expected = run_cycle(make_snapshot(work, offerings, hosts))
    shuffler = random.Random(1)
    for _ in range(5):
        shuffler.shuffle(offerings)
        shuffler.shuffle(hosts)
        assert run_cycle(make_snapshot(work, offerings, hosts)) == expected
    assert expected.bindings[0].offering == "h100-00"  # ties break by offering id
    assert expected.bindings[0].node == "n0"


def test_queue_order_decides_who_gets_the_last_host() -> None:
    offerings = [make_offering(capacity=1)]
    work = [make_work("older-0-1"), make_work("newer-0-1")]
    result = run_cycle(make_snapshot(work, offerings))
    assert chosen(result) == [("older-0-1", "h100-x1-us", None)]
    assert result.unschedulable[0].work.name == "newer-0-1"


def test_nothing_fits_is_unschedulable_without_waiting() -> None:
    offerings = [make_offering("a100", family="A100", accelerator="a100-sxm-80g")]
    [unschedulable] = run_cycle(make_snapshot([make_work()], offerings)).unschedulable
    assert unschedulable.waiting_for_capacity is False
    assert unschedulable.message == (
        "No offering fits: 1 has another GPU family than [H100]. To widen the choice, change spec.resources.gpu.type."
    )


def test_the_snapshot_is_not_changed() -> None:
    offerings, hosts = [make_offering(capacity=1)], [make_host("n1")]
    snapshot = make_snapshot([make_work("a-0-1"), make_work("b-0-1")], offerings, hosts)
    run_cycle(snapshot)
    assert snapshot.offerings == offerings
    assert snapshot.hosts == hosts
    assert run_cycle(snapshot) == run_cycle(snapshot)


def test_a_replacement_avoids_the_offering_that_preempted_it_while_another_fits() -> None:
    us = make_offering("spot-us", rate="1.000000", interruptible=True, mtbi="6h", capacity=1)
    eu = make_offering("spot-eu", rate="1.100000", interruptible=True, mtbi="6h", capacity=1)
    work = dataclasses.replace(make_work("job-0-2", interruptible="Prefer", profile="Cost"), avoid=("spot-us",))
    assert chosen(run_cycle(make_snapshot([work], [ON_DEMAND, us, eu]))) == [("job-0-2", "spot-eu", None)]
    # Nothing else fits: the avoided offering is still taken rather than waiting.
    assert chosen(run_cycle(make_snapshot([work], [us]))) == [("job-0-2", "spot-us", None)]
