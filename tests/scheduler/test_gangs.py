"""A gang epoch's ranks are placed together under their network and transport, or not at all."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from nodus.scheduler import CycleResult, Offering, Work, WorkKey, gangs, run_cycle
from nodus.scheduler.snapshot import GangKey, Network, Transport
from tests.scheduler import attempt_object, make_host, make_offering, make_snapshot, make_work


def gang_object(
    job: str = "train",
    rank: int = 0,
    *,
    size: int = 4,
    number: int = 1,
    network: str = "Colocated",
    transport: str = "Direct",
    **placement: Any,
) -> dict[str, Any]:
    """One rank's pending Attempt, ``<job>-0-<number>-r<rank>``, as the Job controller writes it."""
    obj = attempt_object(f"{job}-0-{number}-r{rank}", **placement)
    obj["spec"].update(
        job=job,
        jobUID=f"uid-{job}",
        number=number,
        rank=rank,
        gang={
            "size": size,
            "epoch": number,
            "gpusPerNode": 1,
            "launcher": "Torchrun",
            "members": [f"{job}-0-{number}-r{r}" for r in range(size)],
            "network": network,
            "transport": transport,
            "startupTimeout": "15m",
        },
    )
    return obj


def make_gang(job: str = "train", size: int = 4, *, ranks: range | None = None, **fields: Any) -> list[Work]:
    """The pending ranks (all of them unless ``ranks``) of one gang epoch; ``fields`` as :func:`gang_object`."""
    return [Work.from_object(gang_object(job, rank, size=size, **fields)) for rank in ranks or range(size)]


def located(
    name: str, provider: str = "sim", region: str = "us-east", region_class: str = "us", **fields: Any
) -> Offering:
    """An H100 offering in ``provider``/``region`` (the builders put every offering in sim/<class>-east)."""
    offering = make_offering(name, region_class=region_class, **fields)
    return dataclasses.replace(offering, provider=provider, region=region)


def placed(result: CycleResult) -> list[tuple[str, str, str | None]]:
    return [(b.work.name, b.offering, b.node) for b in result.bindings]


def waiting(result: CycleResult) -> list[str]:
    return [u.work.name for u in result.unschedulable]


US_EAST = located("h100-us-east", region="us-east", rate="2.000000", capacity=2)
US_WEST = located("h100-us-west", region="us-west", rate="2.000000", capacity=2)
EU = located("h100-eu", region="eu-west", region_class="eu", rate="3.000000", capacity=8)


@pytest.mark.parametrize(
    ("a", "b", "path"),
    [
        pytest.param(US_EAST, US_EAST, "Private", id="same-offering"),
        pytest.param(US_EAST, located("other-us-east", capacity=1), "Private", id="same-provider-and-region"),
        pytest.param(US_EAST, US_WEST, "Direct", id="same-provider-other-region"),
        pytest.param(US_EAST, located("cloud-b", provider="cloud-b"), "Public", id="other-provider"),
    ],
)
def test_path_class(a: Offering, b: Offering, path: gangs.PathClass) -> None:
    assert gangs.path_class(a, b) == path
    assert gangs.path_class(b, a) == path


def test_a_pair_is_relayed_when_either_side_takes_no_inbound_connections() -> None:
    # No price book says so today; the hook is there for when one does.
    assert gangs.path_class(US_EAST, US_EAST, inbound=lambda o: o.id != US_EAST.id) == "Relayed"
    assert gangs.path_class(US_EAST, US_WEST, inbound=lambda o: o.id != US_WEST.id) == "Relayed"


@pytest.mark.parametrize(
    ("transport", "admitted"),
    [
        pytest.param("Direct", {"Private", "Direct"}, id="direct"),
        pytest.param("Auto", {"Private", "Direct", "Public", "Relayed"}, id="auto"),
    ],
)
def test_transport_admits(transport: Transport, admitted: set[str]) -> None:
    paths: tuple[gangs.PathClass, ...] = ("Private", "Direct", "Public", "Relayed")
    assert {path for path in paths if gangs.admits(transport, path)} == admitted


@pytest.mark.parametrize(
    ("network", "transport", "key"),
    [
        pytest.param("Colocated", "Direct", ("sim", "us-east"), id="colocated"),
        pytest.param("Colocated", "Auto", ("sim", "us-east"), id="colocated-auto"),
        pytest.param("Regional", "Auto", ("us",), id="regional-auto"),
        pytest.param("Regional", "Direct", ("us", "sim"), id="regional-direct-one-provider"),
        pytest.param("Global", "Auto", (), id="global-auto"),
        pytest.param("Global", "Direct", ("sim",), id="global-direct-one-provider"),
    ],
)
def test_group_key(network: Network, transport: Transport, key: tuple[str, ...]) -> None:
    assert gangs.group_key(US_EAST, network, transport) == key


def test_queue_gathers_a_gang_at_its_oldest_member() -> None:
    rank0, rank1 = make_gang(size=2)
    items = gangs.queue([make_work("older-0-1"), rank1, make_work("plain-0-1"), rank0])
    assert [item.key for item in items] == [
        WorkKey("demo", "older-0-1"),
        GangKey("demo", "uid-train", 1),
        WorkKey("demo", "plain-0-1"),
    ]
    gang = items[1]
    assert isinstance(gang, gangs.Gang)
    assert [w.key.name for w in gang.members] == ["train-0-1-r0", "train-0-1-r1"]
    assert gang.complete


def test_a_colocated_gang_is_placed_whole_in_one_provider_region() -> None:
    result = run_cycle(make_snapshot(make_gang(profile="Cost"), [US_EAST, US_WEST, EU]))
    # us-east and us-west hold 2 each: only the dearer eu region holds all 4 together.
    assert placed(result) == [(f"train-0-1-r{rank}", "h100-eu", None) for rank in range(4)]
    assert not result.unschedulable
    head = result.bindings[0].explain.splitlines()[0]
    assert head == (
        "gang of 4 (Colocated, sim/eu-west): all 4 ranks placed together, expected $12.300000 in total; "
        "the only group that could hold it"
    )
    assert result.bindings[3].explain.splitlines()[1].startswith("cycle 7: chose h100-eu")


def test_a_gang_no_group_can_hold_waits_whole() -> None:
    offerings = [located("h100-us-east", rate="1.000000", capacity=6), US_WEST]
    hosts = [make_host(f"n{i}", "h100-us-east", busy=True) for i in range(4)]
    result = run_cycle(make_snapshot([*make_gang(), make_work("plain-0-1")], offerings, hosts))
    assert waiting(result) == [f"train-0-1-r{rank}" for rank in range(4)]
    # Nothing was held back for the gang: the plain Work after it takes the cheapest host.
    assert placed(result) == [("plain-0-1", "h100-us-east", None)]
    message = result.unschedulable[0].message
    assert message == (
        "The gang needs 4 hosts together under network Colocated; the most free in one provider region is 2 "
        "(sim/us-east; offering h100-us-east: 4 of 6 in use). It waits whole: no member is placed until all 4 fit. "
        "Fix: wait for capacity, or recreate the Job with spec.distributed.network Regional or Global "
        "(members may span regions), or with a wider spec.placement (regions, offerings, interruptible)."
    )
    assert {u.message for u in result.unschedulable} == {message}
    assert all(u.waiting_for_capacity for u in result.unschedulable)


def test_a_gang_larger_than_any_group_does_not_wait_for_capacity() -> None:
    result = run_cycle(make_snapshot(make_gang(), [located("small", capacity=3), US_WEST]))
    [message] = {u.message for u in result.unschedulable}
    assert not any(u.waiting_for_capacity for u in result.unschedulable)
    assert "the most free in one provider region is 3 (sim/us-east; offering small: 0 of 3 in use)" in message
    assert "No one provider region has 4 hosts in all (the most is 3)." in message
    assert message.endswith(
        "Fix: recreate the Job with spec.distributed.network Regional or Global (members may "
        "span regions), or with a wider spec.placement (regions, offerings, interruptible), or "
        "with fewer spec.distributed.nodes."
    )


def test_a_gang_nothing_fits_gets_the_plain_message() -> None:
    a100 = make_offering("a100", family="A100", accelerator="a100-sxm-80g")
    result = run_cycle(make_snapshot(make_gang(size=2), [a100]))
    message = (
        "No offering fits: 1 has another GPU family than [H100]. To widen the choice, change spec.resources.gpu.type."
    )
    assert [(u.message, u.waiting_for_capacity) for u in result.unschedulable] == [(message, False)] * 2


@pytest.mark.parametrize(
    ("network", "transport"),
    [
        pytest.param("Regional", "Direct", id="regional"),
        pytest.param("Regional", "Auto", id="regional-auto"),
        pytest.param("Global", "Direct", id="global-one-provider"),
        pytest.param("Global", "Auto", id="global-auto"),
    ],
)
def test_wider_networks_span_regions(network: str, transport: str) -> None:
    # us-east and us-west hold 2 each and cost less than eu: together they hold the gang.
    result = run_cycle(
        make_snapshot(make_gang(network=network, transport=transport, profile="Cost"), [US_EAST, US_WEST, EU])
    )
    assert sorted(b.offering for b in result.bindings) == ["h100-us-east"] * 2 + ["h100-us-west"] * 2


def test_members_across_providers_need_transport_auto() -> None:
    cloud_b = located("cloud-b-us", provider="cloud-b", region="us-central")
    assert gangs.admitted([US_EAST, US_WEST, US_EAST], "Direct")
    assert not gangs.admitted([US_EAST, US_WEST, cloud_b], "Direct")
    assert gangs.admitted([US_EAST, US_WEST, cloud_b], "Auto")


def test_transport_direct_keeps_a_gang_on_one_provider() -> None:
    cloud_b = located("cloud-b-us", provider="cloud-b", region="us-central", rate="1.000000", capacity=2)
    offerings = [US_EAST, cloud_b]
    direct = run_cycle(make_snapshot(make_gang(network="Regional", transport="Direct"), offerings))
    assert not direct.bindings
    message = direct.unschedulable[0].message
    assert message.startswith(
        "The gang needs 4 hosts together under network Regional and transport Direct; "
        "the most free in one region class on one provider is 2 (us on cloud-b; offering cloud-b-us: 0 of 2 in use)."
    )
    assert "recreate the Job with spec.distributed.transport Auto (members may span providers)" in message
    auto = run_cycle(make_snapshot(make_gang(network="Regional", transport="Auto"), offerings))
    assert sorted(b.offering for b in auto.bindings) == ["cloud-b-us", "cloud-b-us", "h100-us-east", "h100-us-east"]
    assert auto.bindings[0].explain.startswith("gang of 4 (Regional, us): all 4 ranks placed together")


# Groups that can each hold a gang of 2: cheap but slow to boot, or dearer and quick to boot.
SLOW = located("slow", region="us-east", rate="2.000000", boot="20m")  # $2.666667 a member over 1h
QUICK = located("quick", region="us-west", rate="2.800000", boot="30s")  # $2.823333: within 10 %
DEAR_QUICK = located("dear-quick", region="us-west", rate="3.000000", boot="30s")  # $3.025000: beyond 10 %


@pytest.mark.parametrize(
    ("profile", "offerings", "offering"),
    [
        pytest.param("Cost", [SLOW, DEAR_QUICK], "slow", id="cost-lowest-total"),
        pytest.param("Speed", [SLOW, DEAR_QUICK], "dear-quick", id="speed-earliest-gang-start"),
        pytest.param("Balanced", [SLOW, QUICK], "quick", id="balanced-quick-within-band"),
        pytest.param("Balanced", [SLOW, DEAR_QUICK], "slow", id="balanced-quick-too-dear"),
    ],
)
def test_profile_chooses_among_groups(profile: str, offerings: list[Offering], offering: str) -> None:
    result = run_cycle(make_snapshot(make_gang(size=2, profile=profile), offerings))
    assert {b.offering for b in result.bindings} == {offering}
    assert "over 1 other group that could hold it" in result.bindings[0].explain.splitlines()[0]


def test_a_gang_speed_waits_for_its_slowest_member() -> None:
    # One warm host in slow's region does not make that group start sooner: its second member still boots 20m.
    hosts = [make_host("warm-1", "slow")]
    result = run_cycle(make_snapshot(make_gang(size=2, profile="Speed"), [SLOW, DEAR_QUICK], hosts))
    assert {b.offering for b in result.bindings} == {"dear-quick"}


def test_a_gang_takes_warm_hosts_of_its_group_once_each() -> None:
    offering = located("h100-us-east", capacity=4)
    hosts = [make_host("n-a", "h100-us-east"), make_host("n-b", "h100-us-east")]
    result = run_cycle(make_snapshot(make_gang(profile="Cost"), [offering], hosts))
    assert [b.node for b in result.bindings] == ["n-a", "n-b", None, None]
    assert "warm node n-a reused" in result.bindings[0].explain


def test_two_gangs_never_each_hold_half() -> None:
    offering = located("h100-us-east", capacity=6)
    older, younger = make_gang("older"), make_gang("younger")
    first = run_cycle(make_snapshot([*older, *younger], [offering]))
    assert placed(first) == [(f"older-0-1-r{rank}", "h100-us-east", None) for rank in range(4)]
    assert waiting(first) == [f"younger-0-1-r{rank}" for rank in range(4)]
    assert all("It waits whole: no member is placed until all 4 fit." in u.message for u in first.unschedulable)
    assert all(u.waiting_for_capacity for u in first.unschedulable)

    older_hosts = [make_host(f"older-{rank}", "h100-us-east", busy=True) for rank in range(4)]
    still = run_cycle(make_snapshot(younger, [offering], older_hosts))
    assert not still.bindings
    assert "the most free in one provider region is 2" in still.unschedulable[0].message

    released = run_cycle(make_snapshot(younger, [offering]))
    assert placed(released) == [(f"younger-0-1-r{rank}", "h100-us-east", None) for rank in range(4)]


def test_a_partly_placed_gang_joins_its_siblings() -> None:
    # Ranks 0 and 1 are on us-east already; 2 and 3 go there too, though us-west is cheaper now.
    east = located("h100-us-east", rate="2.000000", capacity=4)
    west = located("h100-us-west", region="us-west", rate="1.000000", capacity=4)
    rest = [
        dataclasses.replace(w, gang_placed=("h100-us-east", "h100-us-east"))
        for w in make_gang(ranks=range(2, 4), profile="Cost")
    ]
    hosts = [make_host(f"n{rank}", "h100-us-east", busy=True) for rank in range(2)]
    result = run_cycle(make_snapshot(rest, [east, west], hosts))
    assert placed(result) == [("train-0-1-r2", "h100-us-east", None), ("train-0-1-r3", "h100-us-east", None)]
    assert result.bindings[0].explain.startswith(
        "gang of 4 (Colocated, sim/us-east): 2 ranks placed beside the 2 already placed"
    )

    full = [*hosts, make_host("n-other", "h100-us-east", busy=True)]
    result = run_cycle(make_snapshot(rest, [east, west], full))
    assert not result.bindings
    assert result.unschedulable[0].message.startswith(
        "The gang needs 2 more hosts with its 2 placed, together under network Colocated; "
        "the most free in one provider region is 1 (sim/us-east; offering h100-us-east: 3 of 4 in use)."
    )


def test_a_gang_seen_only_in_part_is_not_decided() -> None:
    # Ranks 2 and 3 are not created yet (or not yet seen): placing 0 and 1 now could strand them.
    result = run_cycle(make_snapshot([*make_gang(ranks=range(2)), make_work("plain-0-1")], [US_EAST]))
    assert placed(result) == [("plain-0-1", "h100-us-east", None)]
    assert not result.unschedulable


def test_gangs_and_plain_work_keep_queue_order() -> None:
    offering = located("h100-us-east", capacity=3)
    work = [make_work("first-0-1"), *make_gang(size=2), make_work("last-0-1")]
    result = run_cycle(make_snapshot(work, [offering]))
    assert [b.work.name for b in result.bindings] == ["first-0-1", "train-0-1-r0", "train-0-1-r1"]
    assert waiting(result) == ["last-0-1"]


def test_a_gang_result_does_not_depend_on_listing_order() -> None:
    offerings = [located(f"h100-{region}", region=region, capacity=3) for region in ("a", "b", "c", "d")]
    hosts = [make_host(f"n{i}", f"h100-{'abcd'[i % 4]}") for i in range(6)]
    work = [*make_gang("one", network="Regional", profile="Speed"), *make_gang("two", size=3), make_work("plain-0-1")]
    expected = run_cycle(make_snapshot(work, offerings, hosts))
    assert len(expected.bindings) == 8
    shuffler = random.Random(3)
    for _ in range(5):
        shuffler.shuffle(offerings)
        shuffler.shuffle(hosts)
        assert run_cycle(make_snapshot(work, offerings, hosts)) == expected
