"""Hosts of a shareable offering take several Works with disjoint GPUs; dedicated Works and other offerings do not
share; only the active provider's offerings are cold-started."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

from nodus.scheduler import run_cycle
from tests.scheduler import make_host, make_offering, make_shared_host, make_snapshot, make_work, use

X4 = dataclasses.replace(
    make_offering("h100-x4-us", gpus=4, vcpu=104, memory="900Gi", rate="10.000000"), shareable=True
)
X1 = make_offering("h100-x1-us", rate="3.000000")


def test_a_one_gpu_work_joins_a_shareable_host_with_room() -> None:
    host = make_shared_host("x4-a", "h100-x4-us", uses=(use([0, 1]),))
    result = run_cycle(make_snapshot([make_work()], [X4], [host]))
    [binding] = result.bindings
    assert (binding.node, binding.gpu_indexes, binding.warm_reuse) == ("x4-a", (2,), True)
    # The offering's rate for one of its four GPUs.
    assert binding.rate_usd_per_hour == Decimal("2.5")
    assert binding.placement()["gpuIndexes"] == [2]
    assert "shares its host: GPUs 2 of 4, at $2.500000/h for them" in binding.explain


def test_works_of_one_cycle_share_a_host_without_overlap() -> None:
    host = make_shared_host("x4-a", "h100-x4-us")
    works = [make_work(f"w{i}-0-1") for i in range(5)]
    result = run_cycle(make_snapshot(works, [dataclasses.replace(X4, capacity=1)], [host]))
    assert [(b.node, b.gpu_indexes) for b in result.bindings] == [("x4-a", (i,)) for i in range(4)]
    [waiting] = result.unschedulable
    assert waiting.work.name == "w4-0-1"


def test_cold_start_of_a_shareable_offering_gives_the_first_gpus_at_the_share_rate() -> None:
    result = run_cycle(make_snapshot([make_work(gpu={"type": ["H100"], "count": 2})], [X4], []))
    [binding] = result.bindings
    assert (binding.node, binding.gpu_indexes, binding.rate_usd_per_hour) == (None, (0, 1), Decimal("5"))


def test_a_non_shareable_offering_is_never_shared() -> None:
    x4 = dataclasses.replace(X4, shareable=False)
    host = make_shared_host("x4-a", "h100-x4-us", uses=(use([0]),))
    result = run_cycle(make_snapshot([make_work()], [x4], [host]))
    assert not result.bindings
    assert "has another GPU count per host than 1" in result.unschedulable[0].message


def test_dedicated_work_needs_an_empty_host_of_its_exact_count() -> None:
    busy = make_shared_host("x4-busy", "h100-x4-us", uses=(use([0]),))
    empty = make_shared_host("x4-empty", "h100-x4-us")
    four = {"type": ["H100"], "count": 4}
    result = run_cycle(make_snapshot([make_work(gpu=four, dedicated=True)], [X4], [busy, empty]))
    [binding] = result.bindings
    assert (binding.node, binding.gpu_indexes, binding.rate_usd_per_hour) == ("x4-empty", None, Decimal("10"))
    one = run_cycle(make_snapshot([make_work(dedicated=True)], [X4], [empty]))
    assert "has another GPU count per host than 1" in one.unschedulable[0].message


def test_nothing_joins_a_host_held_whole_or_dedicated() -> None:
    for holder in (use(None), use([0], dedicated=True)):
        host = make_shared_host("x4-a", "h100-x4-us", uses=(holder,))
        result = run_cycle(make_snapshot([make_work()], [dataclasses.replace(X4, capacity=1)], [host]))
        assert not result.bindings


def test_cordoned_shared_host_takes_nothing() -> None:
    host = dataclasses.replace(make_shared_host("x4-a", "h100-x4-us", uses=(use([0]),)), unschedulable=True)
    result = run_cycle(make_snapshot([make_work()], [dataclasses.replace(X4, capacity=1)], [host]))
    assert not result.bindings


def test_cpu_requests_split_a_shared_host() -> None:
    host = make_shared_host("x4-a", "h100-x4-us", uses=(use([0], cpu="100"),))
    capped = dataclasses.replace(X4, capacity=1)
    assert not run_cycle(make_snapshot([make_work(resources={"cpu": "8"})], [capped], [host])).bindings
    [fits] = run_cycle(make_snapshot([make_work(resources={"cpu": "4"})], [capped], [host])).bindings
    assert fits.node == "x4-a"


def test_only_the_active_providers_offerings_are_cold_started() -> None:
    aws = dataclasses.replace(make_offering("h100-x1-aws", rate="1.000000"), provider="aws")
    snapshot = dataclasses.replace(make_snapshot([make_work()], [X1, aws], []), cold_start=frozenset({"sim"}))
    [binding] = run_cycle(snapshot).bindings
    assert binding.offering == "h100-x1-us"  # the cheaper aws one is not booted by this provider


def test_without_a_provider_nothing_cold_starts_and_the_message_says_so() -> None:
    snapshot = dataclasses.replace(make_snapshot([make_work()], [X1], []), cold_start=frozenset())
    result = run_cycle(snapshot)
    assert not result.bindings
    [why] = result.unschedulable
    assert "no provider boots sim hosts (the controllers run with --provider none)" in why.message
    assert why.waiting_for_capacity


def test_without_a_provider_a_host_started_by_hand_still_gets_work() -> None:
    snapshot = dataclasses.replace(make_snapshot([make_work()], [X1], [make_host("by-hand")]), cold_start=frozenset())
    [binding] = run_cycle(snapshot).bindings
    assert (binding.node, binding.warm_reuse) == ("by-hand", True)
