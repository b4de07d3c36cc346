"""Offering, Node and Attempt objects become typed inputs exactly: Decimal money, bytes, durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from nodus.scheduler import Host, Offering, Work, WorkKey
from nodus.scheduler.snapshot import GangKey, GangRequest, format_usd, gang_key
from tests.scheduler import (
    NOW,
    attempt_object,
    make_cpu_offering,
    make_host,
    make_offering,
    make_work,
    offering_object,
)


def test_offering_from_object() -> None:
    offering = make_offering(
        "h100-sxm-80g-x8-us", gpus=8, interruptible=True, mtbi="6h", rate="23.920000", boot="90s", capacity=4
    )
    assert offering.id == "h100-sxm-80g-x8-us"
    assert (offering.family, offering.accelerator, offering.gpus) == ("H100", "h100-sxm-80g", 8)
    assert offering.gpu_memory == 80 * 2**30
    assert offering.memory == 225 * 2**30
    assert offering.rate_usd_per_hour == Decimal("23.920000")
    assert isinstance(offering.rate_usd_per_hour, Decimal)
    assert offering.boot_p50 == timedelta(seconds=90)
    assert offering.mean_time_between_interruptions == timedelta(hours=6)
    assert offering.capacity == 4


def test_cpu_offering_has_no_accelerator_and_unknown_capacity() -> None:
    offering = make_cpu_offering()
    assert (offering.gpus, offering.family, offering.accelerator, offering.gpu_memory) == (0, None, None, None)
    assert offering.capacity is None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"rateUSDPerHour": 2.5}, "spec.rateUSDPerHour", id="float-rate"),
        pytest.param({"rateUSDPerHour": "2.1234567"}, "spec.rateUSDPerHour", id="rate-beyond-micro-usd"),
        pytest.param({"memory": "lots"}, "spec.memory", id="bad-quantity"),
        pytest.param({"gpus": "8"}, "spec.gpus", id="gpus-not-integer"),
        pytest.param({"boot": {"p50": "soon"}}, "spec.boot.p50", id="bad-boot"),
    ],
)
def test_malformed_offering_names_the_field(change: dict[str, Any], field: str) -> None:
    obj = offering_object()
    obj["spec"].update(change)
    with pytest.raises(ValueError, match=field):
        Offering.from_object(obj)


def test_work_from_object_with_defaults() -> None:
    work = make_work()
    assert work.key == WorkKey("demo", "train-0-1")
    assert work.gpu is not None
    assert (work.gpu.count, work.gpu.types, work.gpu.exact, work.gpu.nvlink) == (1, ("H100",), False, False)
    assert (work.interruptible, work.profile) == ("Never", "Balanced")
    assert work.expected_duration == timedelta(hours=1)
    assert work.max_rate_usd_per_hour is None
    assert (work.regions, work.offerings) == ((), ())


def test_work_from_object_with_everything() -> None:
    work = make_work(
        gpu={"count": 8, "type": ["h100-sxm-80g"], "exact": True, "minMemory": "80Gi", "interconnect": "NVLink"},
        resources={"cpu": "500m", "memory": "64Gi", "disk": "1Ti"},
        expected="2h30m",
        interruptible="Allow",
        profile="Cost",
        maxRateUSDPerHour="30",
        regions=["us", "eu"],
        offerings=["h100-x8-us"],
    )
    assert work.gpu is not None
    assert (work.gpu.count, work.gpu.exact, work.gpu.nvlink) == (8, True, True)
    assert work.gpu.min_memory == 80 * 2**30
    assert (work.cpu, work.memory, work.disk) == (Decimal("0.5"), Decimal(64 * 2**30), Decimal(2**40))
    assert work.expected_duration == timedelta(hours=2, minutes=30)
    assert work.max_rate_usd_per_hour == Decimal(30)
    assert (work.regions, work.offerings) == (("us", "eu"), ("h100-x8-us",))


def test_cpu_only_work_has_no_gpu_request() -> None:
    assert make_work(cpu_only=True, resources={"cpu": "4"}).gpu is None


@pytest.mark.parametrize(
    ("placement", "field"),
    [
        pytest.param({"profile": "Fastest"}, "profile", id="unknown-profile"),
        pytest.param({"interruptible": "Sometimes"}, "interruptible", id="unknown-interruptible"),
        pytest.param({"maxRateUSDPerHour": "cheap"}, "maxRateUSDPerHour", id="bad-max-rate"),
    ],
)
def test_malformed_attempt_names_the_field(placement: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Work.from_object(attempt_object(**placement))


def test_host_from_object() -> None:
    host = make_host("n1", "h100-x1-us", phase="Ready", warm_until="2026-11-29T12:10:00Z")
    assert (host.name, host.offering, host.phase, host.busy) == ("n1", "h100-x1-us", "Ready", False)
    assert host.warm_until == datetime(2026, 11, 29, 12, 10, tzinfo=UTC)


def test_new_node_without_status_is_booting() -> None:
    assert make_host("n1", phase=None).phase == "Booting"


def test_offering_from_label_when_spec_lacks_it() -> None:
    obj = {"metadata": {"name": "n1", "labels": {"nodus.dev/offering": "l4-x1-eu"}}, "spec": {}, "status": {}}
    assert Host.from_object(obj, busy=False).offering == "l4-x1-eu"


@pytest.mark.parametrize(
    ("host", "holds", "idle"),
    [
        pytest.param(make_host("n", phase="Ready"), True, True, id="ready-idle"),
        pytest.param(make_host("n", phase="Booting"), True, True, id="booting-idle"),
        pytest.param(make_host("n", phase="Ready", busy=True), True, False, id="busy"),
        pytest.param(make_host("n", phase="Ready", unschedulable=True), True, False, id="unschedulable"),
        pytest.param(make_host("n", warm_until="2026-11-29T12:00:01Z"), True, True, id="still-warm"),
        pytest.param(make_host("n", warm_until="2026-11-29T12:00:00Z"), True, False, id="warm-period-over"),
        pytest.param(make_host("n", phase="Terminating"), False, False, id="terminating"),
        pytest.param(make_host("n", phase="Lost"), False, False, id="lost"),
        pytest.param(make_host("n", phase="Failed"), False, False, id="failed"),
    ],
)
def test_host_capacity_and_idleness(host: Host, holds: bool, idle: bool) -> None:
    assert host.holds_capacity() is holds
    assert host.is_idle_at(NOW) is idle


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        pytest.param(Decimal(2), "2.000000", id="whole"),
        pytest.param(Decimal("2.5625"), "2.562500", id="padded"),
        pytest.param(Decimal("1.0000005"), "1.000001", id="half-up"),
    ],
)
def test_money_is_rendered_with_six_fraction_digits(amount: Decimal, text: str) -> None:
    assert format_usd(amount) == text


def gang_attempt(rank: int = 1, **gang: Any) -> dict[str, Any]:
    """Rank ``rank`` of a 4-node gang epoch (attempt number 2); ``gang`` overrides ``spec.gang`` fields."""
    obj = attempt_object(f"train-0-2-r{rank}")
    obj["spec"].update(
        jobUID="uid-1",
        number=2,
        rank=rank,
        gang={"size": 4, "epoch": 2, "gpusPerNode": 1, "members": [f"train-0-2-r{r}" for r in range(4)], **gang},
    )
    return obj


def test_work_from_object_reads_the_gang() -> None:
    work = Work.from_object(gang_attempt(network="Regional", transport="Auto"))
    assert work.gang == GangRequest(job_uid="uid-1", number=2, size=4, rank=1, network="Regional", transport="Auto")
    assert work.gang_key == GangKey("demo", "uid-1", 2)
    assert work.gang_placed == ()


def test_gang_network_and_transport_default_to_colocated_and_direct() -> None:
    work = Work.from_object(gang_attempt())
    assert work.gang is not None
    assert (work.gang.network, work.gang.transport) == ("Colocated", "Direct")


def test_plain_work_has_no_gang() -> None:
    work = make_work()
    assert (work.gang, work.gang_key) == (None, None)


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        pytest.param(gang_attempt(rank=4), "spec.rank", id="rank-beyond-size"),
        pytest.param(gang_attempt(network="Nearby"), "spec.gang.network", id="unknown-network"),
        pytest.param(gang_attempt(transport="Carrier pigeon"), "spec.gang.transport", id="unknown-transport"),
        pytest.param(gang_attempt(size="4"), "spec.gang.size", id="size-not-integer"),
    ],
)
def test_malformed_gang_names_the_field(obj: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Work.from_object(obj)


def test_gang_key_of_any_attempt_object() -> None:
    placed = gang_attempt(rank=0)
    placed["status"] = {"phase": "Running", "placement": {"offering": "h100-x1-us"}}
    assert gang_key(placed) == GangKey("demo", "uid-1", 2)
    assert gang_key(attempt_object()) is None
    del placed["spec"]["jobUID"]
    assert gang_key(placed) is None  # unreadable: not a sibling of anything, and no error
