"""Builders for scheduler tests: Offering, Node and Attempt objects as served, parsed by ``from_object``.

Each builder writes the camelCase JSON of ``docs/running-jobs.md`` with sensible defaults (a 1 x H100
on-demand host in ``us`` at $2.50/h booting in 90s; a Work asking for one H100), so a test states
only what it is about. Going through ``from_object`` keeps the parsing path under test as well.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nodus.scheduler import Host, Offering, Snapshot, Work
from nodus.scheduler.capacity import Use

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def offering_object(
    name: str = "h100-x1-us",
    *,
    family: str | None = "H100",
    accelerator: str | None = "h100-sxm-80g",
    gpus: int = 1,
    gpu_memory: str = "80Gi",
    interconnect: str = "NVLink",
    vcpu: int = 26,
    memory: str = "225Gi",
    disk: str = "2Ti",
    region_class: str = "us",
    interruptible: bool = False,
    mtbi: str | None = None,
    rate: str = "2.500000",
    boot: str = "90s",
    capacity: int | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "gpus": gpus,
        "vcpu": vcpu,
        "memory": memory,
        "disk": disk,
        "provider": "sim",
        "region": f"{region_class}-east",
        "regionClass": region_class,
        "interruptible": interruptible,
        "rateUSDPerHour": rate,
        "boot": {"p50": boot, "p90": "4m"},
        "pricebookVersion": "2026-11",
    }
    if gpus:
        spec.update(accelerator=accelerator, family=family, gpuMemory=gpu_memory, interconnect=interconnect)
    if mtbi is not None:
        spec["meanTimeBetweenInterruptions"] = mtbi
    obj: dict[str, Any] = {"apiVersion": "nodus.dev/v1", "kind": "Offering", "metadata": {"name": name}, "spec": spec}
    if capacity is not None:
        obj["status"] = {"capacity": capacity}
    return obj


def make_offering(name: str = "h100-x1-us", **fields: Any) -> Offering:
    """An Offering; ``fields`` are :func:`offering_object`'s keywords."""
    return Offering.from_object(offering_object(name, **fields))


def make_cpu_offering(name: str = "cpu-16-us", **fields: Any) -> Offering:
    """A CPU-only Offering (16 vCPU, 64Gi, $0.50/h unless overridden)."""
    defaults: dict[str, Any] = {"family": None, "accelerator": None, "gpus": 0, "vcpu": 16, "memory": "64Gi"}
    return Offering.from_object(offering_object(name, **{**defaults, "rate": "0.500000", **fields}))


def make_host(
    name: str,
    offering: str = "h100-x1-us",
    *,
    phase: str | None = "Ready",
    busy: bool = False,
    unschedulable: bool = False,
    warm_until: str | None = None,
) -> Host:
    status: dict[str, Any] = {} if phase is None else {"phase": phase}
    if warm_until is not None:
        status["warmUntil"] = warm_until
    obj = {
        "metadata": {"name": name, "labels": {"nodus.dev/offering": offering}},
        "spec": {"offering": offering, "provider": "sim", "unschedulable": unschedulable},
        "status": status,
    }
    return Host.from_object(obj, busy=busy)


def attempt_object(
    name: str = "train-0-1",
    *,
    gpu: dict[str, Any] | None = None,
    cpu_only: bool = False,
    resources: dict[str, Any] | None = None,
    expected: str | None = None,
    **placement: Any,
) -> dict[str, Any]:
    """A pending Attempt; ``gpu`` defaults to one H100 (``cpu_only`` drops it), ``placement`` is camelCase."""
    spec_resources: dict[str, Any] = dict(resources or {})
    if not cpu_only:
        spec_resources["gpu"] = gpu if gpu is not None else {"type": ["H100"]}
    spec: dict[str, Any] = {
        "job": name.rsplit("-", 2)[0],
        "index": 0,
        "number": 1,
        "image": "python:3.12",
        "command": ["python", "train.py"],
        "resources": spec_resources,
        "placement": {"interruptible": "Never", "profile": "Balanced", "queueTimeout": "24h", **placement},
    }
    if expected is not None:
        spec["expectedDuration"] = expected
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Attempt",
        "metadata": {"namespace": "demo", "name": name},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def make_work(name: str = "train-0-1", **fields: Any) -> Work:
    """A Work; ``fields`` are :func:`attempt_object`'s keywords."""
    return Work.from_object(attempt_object(name, **fields))


def make_snapshot(
    work: list[Work], offerings: list[Offering], hosts: list[Host] | None = None, cycle: int = 7
) -> Snapshot:
    return Snapshot(cycle=cycle, now=NOW, work=work, offerings=offerings, hosts=hosts or [])


def pool_node_object(
    name: str,
    pool: str = "lab",
    *,
    project: str = "demo",
    gpus: int = 4,
    accelerator: str | None = "h100-sxm-80g",
    family: str | None = "H100",
    interconnect: str | None = "nvlink",
    cpu: str = "64",
    memory: str = "512Gi",
    phase: str | None = "Ready",
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A Node that joined Pool ``pool`` of ``project``, with the shape its agent discovered."""
    capacity: dict[str, Any] = {"gpus": gpus, "cpu": cpu, "memory": memory, "disk": "2Ti"}
    if gpus:
        capacity.update(accelerator=accelerator, gpuFamily=family, gpuModel="NVIDIA H100 80GB HBM3")
        capacity.update(gpuMemory="80Gi", interconnect=interconnect)
    status: dict[str, Any] = {"capacity": capacity, "gpuIndexes": list(range(gpus))}
    if phase is not None:
        status["phase"] = phase
    return {
        "metadata": {"name": name, "labels": {"nodus.dev/pool": pool, "nodus.dev/pool-project": project}},
        "spec": {"pool": {"project": project, "name": pool}, "provider": "pool", "unschedulable": unschedulable},
        "status": status,
    }


def use(
    gpu_indexes: list[int] | None, *, cpu: str | None = None, memory: str | None = None, dedicated: bool = False
) -> Use:
    """What an unfinished attempt placed with ``gpu_indexes`` (None: the whole host) holds of its host."""
    resources: dict[str, Any] = {}
    if cpu is not None:
        resources["cpu"] = cpu
    if memory is not None:
        resources["memory"] = memory
    placement: dict[str, Any] = {"node": "n"}
    if gpu_indexes is not None:
        placement["gpuIndexes"] = gpu_indexes
    spec: dict[str, Any] = {"resources": resources, "placement": {"dedicated": True} if dedicated else {}}
    return Use.from_object({"spec": spec, "status": {"placement": placement}})


def make_pool_host(name: str, pool: str = "lab", *, uses: tuple[Use, ...] = (), **fields: Any) -> Host:
    """A pool host; ``fields`` are :func:`pool_node_object`'s keywords."""
    return Host.from_object(pool_node_object(name, pool, **fields), busy=False, uses=uses)


def make_shared_host(name: str, offering: str, *, uses: tuple[Use, ...] = (), phase: str = "Ready") -> Host:
    """A host of a (shareable) offering with ``uses`` on it."""
    obj = {
        "metadata": {"name": name, "labels": {"nodus.dev/offering": offering}},
        "spec": {"offering": offering, "provider": "sim"},
        "status": {"phase": phase},
    }
    return Host.from_object(obj, busy=False, uses=uses)
