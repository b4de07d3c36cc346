"""How a gang's size is resolved from ``spec.distributed`` (ADR 0046 §12), and the beta cap.

A gang is ``nodes x gpusPerNode``. ``distributed.nodes`` gives the node count directly (2-16 in the
API, capped at :data:`BETA_MAX_NODES` while multi-node is in beta). ``distributed.totalGPUs`` is split
with the GPUs per node taken from ``distributed.gpusPerNode`` or ``resources.gpu.count`` when either
is set, else the largest of 8, 4, 2, 1 that divides the total and leaves at least two nodes. A total
that does not split into 2..BETA_MAX_NODES nodes is refused, and :func:`nearest_totals` gives the
closest totals that would split, so the error can say what to write instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BETA_MAX_NODES = 8
MIN_NODES = 2
MIN_TOTAL_GPUS = 2
MAX_TOTAL_GPUS = 64
GPUS_PER_NODE_CHOICES = (8, 4, 2, 1)


@dataclass(frozen=True)
class GangShape:
    """A resolved gang: ``nodes`` nodes of ``gpus_per_node`` GPUs each."""

    nodes: int
    gpus_per_node: int

    def __str__(self) -> str:
        return f"{self.nodes} nodes x {gpus(self.gpus_per_node)}"


def gpus(count: int) -> str:
    """``1 GPU``, ``8 GPUs``."""
    return f"{count} GPU" if count == 1 else f"{count} GPUs"


def split_total(total_gpus: int, gpus_per_node: int | None) -> GangShape | None:
    """The gang ``total_gpus`` resolves to, or None when it cannot be split within the beta cap."""
    if gpus_per_node is None:
        candidates = [g for g in GPUS_PER_NODE_CHOICES if total_gpus % g == 0 and total_gpus // g >= MIN_NODES]
        if not candidates:
            return None
        gpus_per_node = candidates[0]
    if gpus_per_node <= 0 or total_gpus % gpus_per_node:
        return None
    nodes = total_gpus // gpus_per_node
    if not MIN_NODES <= nodes <= BETA_MAX_NODES:
        return None
    return GangShape(nodes, gpus_per_node)


def nearest_totals(total_gpus: int, gpus_per_node: int | None) -> list[tuple[int, GangShape]]:
    """The closest valid totals below and above ``total_gpus`` (each at most one), with their shapes."""
    found: list[tuple[int, GangShape]] = []
    for candidates in (
        range(total_gpus - 1, MIN_TOTAL_GPUS - 1, -1),
        range(total_gpus + 1, MAX_TOTAL_GPUS + 1),
    ):
        for candidate in candidates:
            shape = split_total(candidate, gpus_per_node)
            if shape is not None:
                found.append((candidate, shape))
                break
    return found


def shape_of(spec: Mapping[str, Any]) -> tuple[GangShape, str] | None:
    """The gang a valid Job's ``spec.distributed`` asks for, and whether it was given as ``Nodes`` or
    ``TotalGPUs``; None for a Job that is not distributed. ``gpus_per_node`` is 0 for a gang that asks for
    no GPUs (CPU hosts)."""
    distributed = spec.get("distributed")
    if not isinstance(distributed, Mapping):
        return None
    gpu = (spec.get("resources") or {}).get("gpu") or {}
    per_node = distributed.get("gpusPerNode") or gpu.get("count")
    if distributed.get("nodes") is not None:
        return GangShape(int(distributed["nodes"]), int(per_node or 0)), "Nodes"
    shape = split_total(int(distributed.get("totalGPUs") or 0), int(per_node) if per_node else None)
    return (shape, "TotalGPUs") if shape is not None else None


def resolve(spec: Mapping[str, Any], accelerator: str | None) -> dict[str, Any] | None:
    """``status.topology`` of a distributed Job: its resolved shape (ADR 0046 §12) on ``accelerator`` (the
    variant the admission estimate placed it on, when known). None for a Job that is not distributed."""
    resolved = shape_of(spec)
    if resolved is None:
        return None
    shape, source = resolved
    distributed = spec["distributed"]
    out: dict[str, Any] = {"nodes": shape.nodes, "resolvedFrom": source}
    out["network"] = distributed.get("network") or "Colocated"
    if shape.gpus_per_node:
        out.update(gpusPerNode=shape.gpus_per_node, totalGPUs=shape.nodes * shape.gpus_per_node)
    if accelerator and shape.gpus_per_node:
        out["accelerator"] = accelerator
    return out


def member_resources(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The resources each member of a gang asks for: the Job's, with ``gpu.count`` set to the resolved GPUs
    per node (``totalGPUs: 16`` asks each of 2 members for 8 GPUs)."""
    resources = dict(spec.get("resources") or {})
    resolved = shape_of(spec)
    if resolved is None or not resolved[0].gpus_per_node:
        return resources or None
    resources["gpu"] = {**(resources.get("gpu") or {}), "count": resolved[0].gpus_per_node}
    return resources
