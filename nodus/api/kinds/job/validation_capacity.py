"""Cross-field rules of the capacity a Job asks for: accelerators, gang shape and placement.

* ``resources.gpu.type`` entries must be in the accelerator catalog; with ``exact: true`` they must
  be variant ids. ``minMemory`` must be met by at least one selected variant.
* ``distributed`` has exactly one of ``nodes`` and ``totalGPUs``; ``nodes`` above the beta cap is
  refused with a message naming the cap; ``gpusPerNode`` equals ``resources.gpu.count`` when both
  are set; ``totalGPUs`` must split into a valid gang (ADR 0046 §12), else the error names the
  nearest totals that would; a distributed Job has ``completions: 1`` (ADR 0046 §13).
* A ``resources.nodes`` still present after aliases were folded disagreed with ``distributed``.
* ``placement.dedicated: false`` is refused (ADR 0046 §14).
"""

from __future__ import annotations

from decimal import Decimal

from nodus.api.kinds.job.jsonview import JSONObject, as_int, as_object, as_str, child
from nodus.api.kinds.job.rules import exactly_one_of
from nodus.apimachinery import fieldpath, topology, units
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1 import accelerators

GPU_COUNTS = (1, 2, 4, 8)
MAX_DISTRIBUTED_NODES = 16
MAX_COMPLETIONS = 10000


def accelerator_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    gpu = child(spec, "resources", "gpu")
    types = gpu.get("type") if gpu is not None else None
    if gpu is None or not isinstance(types, list):
        return []
    gpu_path = path.child("resources", "gpu")
    exact = gpu.get("exact") is True
    errors: list[FieldError] = []
    selected: list[accelerators.Accelerator] = []
    for index, entry in enumerate(types):
        if not isinstance(entry, str):
            continue
        entry_path = gpu_path.child("type").index(index)
        family = accelerators.family_named(entry)
        if exact and family is not None:
            variants = ", ".join(a.id for a in accelerators.variants_selected(entry))
            errors.append(
                fieldpath.invalid(
                    entry_path,
                    entry,
                    f"exact: true pins a variant and {family} is a family; list its variants instead "
                    f"({variants}) or remove exact",
                )
            )
            continue
        matched = accelerators.variants_selected(entry)
        if not matched:
            allowed = accelerators.VARIANT_IDS if exact else accelerators.FAMILIES + accelerators.VARIANT_IDS
            errors.append(fieldpath.not_supported(entry_path, entry, allowed))
        selected.extend(matched)
    if selected and not errors:
        errors.extend(_memory_rule(gpu, gpu_path, selected))
    return errors


def _memory_rule(gpu: JSONObject, gpu_path: Path, selected: list[accelerators.Accelerator]) -> list[FieldError]:
    wanted = as_str(gpu.get("minMemory"))
    if wanted is None:
        return []
    try:
        floor = units.parse_quantity(wanted)
    except ValueError:
        return []  # reported by the model
    largest = max(selected, key=lambda accelerator: accelerator.memory_bytes)
    if Decimal(largest.memory_bytes) >= floor:
        return []
    return [
        fieldpath.invalid(
            gpu_path.child("minMemory"),
            wanted,
            f"no accelerator in type has that much memory per GPU (the most is {largest.memory_bytes // 2**30}Gi, "
            f"on {largest.id}); lower minMemory or add a larger accelerator to type",
        )
    ]


def distributed_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    distributed = as_object(spec.get("distributed"))
    if distributed is None:
        return []
    gang_path = path.child("distributed")
    errors = exactly_one_of(distributed, gang_path, ("nodes", "totalGPUs"), missing_at=gang_path.child("nodes"))
    nodes = as_int(distributed.get("nodes"))
    if nodes is not None and topology.BETA_MAX_NODES < nodes <= MAX_DISTRIBUTED_NODES:
        errors.append(
            fieldpath.invalid(
                gang_path.child("nodes"),
                nodes,
                f"the beta caps gangs at {topology.BETA_MAX_NODES} nodes; use at most {topology.BETA_MAX_NODES} "
                "nodes, with more GPUs per node if you need more GPUs",
            )
        )
    per_node = _gpu_count(distributed.get("gpusPerNode"))
    count = _gpu_count((child(spec, "resources", "gpu") or {}).get("count"))
    if per_node is not None and count is not None and per_node != count:
        errors.append(
            fieldpath.invalid(
                gang_path.child("gpusPerNode"),
                per_node,
                f"must equal {path.child('resources', 'gpu', 'count')} ({count}) when both are set; "
                "make them equal or set only one",
            )
        )
    if distributed.get("nodes") is None:
        errors.extend(_total_gpus_rule(distributed, gang_path, per_node or count))
    completions = as_int(spec.get("completions"))
    if completions is not None and 1 < completions <= MAX_COMPLETIONS:
        errors.append(
            fieldpath.invalid(
                path.child("completions"),
                completions,
                "a distributed Job runs one gang, so completions must be 1 in the beta; "
                "create one Job per gang to run several",
            )
        )
    return errors


def _gpu_count(value: object) -> int | None:
    count = as_int(value)
    return count if count in GPU_COUNTS else None


def _total_gpus_rule(distributed: JSONObject, gang_path: Path, gpus_per_node: int | None) -> list[FieldError]:
    total = as_int(distributed.get("totalGPUs"))
    if total is None or not topology.MIN_TOTAL_GPUS <= total <= topology.MAX_TOTAL_GPUS:
        return []
    if topology.split_total(total, gpus_per_node) is not None:
        return []
    per_node = topology.gpus(gpus_per_node) if gpus_per_node else "1, 2, 4 or 8 GPUs"
    nearest = " or ".join(f"{value} ({shape})" for value, shape in topology.nearest_totals(total, gpus_per_node))
    advice = f"the nearest valid values are {nearest}" if nearest else "set nodes instead"
    return [
        fieldpath.invalid(
            gang_path.child("totalGPUs"),
            total,
            f"cannot be split into {topology.MIN_NODES}-{topology.BETA_MAX_NODES} nodes (the beta cap) of "
            f"{per_node} each; {advice}",
        )
    ]


def resource_nodes_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    nodes = as_int((as_object(spec.get("resources")) or {}).get("nodes"))
    distributed = as_object(spec.get("distributed"))
    if nodes is None or nodes < 2 or distributed is None:
        return []
    nodes_path = path.child("resources", "nodes")
    gang_nodes = as_int(distributed.get("nodes"))
    if gang_nodes is not None and gang_nodes != nodes:
        return [
            fieldpath.invalid(
                nodes_path,
                nodes,
                f"disagrees with {path.child('distributed', 'nodes')} ({gang_nodes}); resources.nodes is shorthand "
                "for it, so set only distributed.nodes",
            )
        ]
    if distributed.get("nodes") is None and distributed.get("totalGPUs") is not None:
        return [
            fieldpath.forbidden(
                nodes_path,
                f"is shorthand for {path.child('distributed', 'nodes')}, which may not be set together with "
                "distributed.totalGPUs; remove resources.nodes",
            )
        ]
    return []


def placement_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    placement = as_object(spec.get("placement"))
    if placement is None or placement.get("dedicated") is not False:
        return []
    return [
        fieldpath.invalid(
            path.child("placement", "dedicated"),
            False,
            "is reserved and only true is accepted; remove the field or set it to true",
        )
    ]
