"""The built-in accelerator catalog that ``spec.resources.gpu.type`` is checked against.

An entry of ``gpu.type`` is either a **family** (``H100``) or a **variant id** (``h100-sxm-80g``).

* A family selects every variant of that family and never another family's (the reference: "A
  family (H100) matches any of its variants and never another family").
* Families match case-insensitively: ``H100``, ``h100`` and ``H100`` name the same family, because
  people write product names in either case. Variant ids are identifiers, like offering ids, and
  match exactly as written (lower case).
* With ``exact: true`` only variant ids are accepted: "exact" pins the variant, so a family would
  defeat it.

The per-GPU memory of a variant is the number in its id, in GiB; ``gpu.minMemory`` is compared with
it. This catalog stands in until the price book (a later issue) owns accelerators; that swap
changes what this module looks up, not its functions (ADR 0022).
"""

from __future__ import annotations

from dataclasses import dataclass

_GIB = 2**30


@dataclass(frozen=True)
class Accelerator:
    """One accelerator variant: its id, its family and its memory per GPU in bytes."""

    id: str
    family: str
    memory_bytes: int


CATALOG: tuple[Accelerator, ...] = (
    Accelerator("b200-sxm-192g", "B200", 192 * _GIB),
    Accelerator("h200-sxm-141g", "H200", 141 * _GIB),
    Accelerator("h100-sxm-80g", "H100", 80 * _GIB),
    Accelerator("h100-pcie-80g", "H100", 80 * _GIB),
    Accelerator("a100-sxm-80g", "A100", 80 * _GIB),
    Accelerator("a100-pcie-40g", "A100", 40 * _GIB),
    Accelerator("l40s-48g", "L40S", 48 * _GIB),
    Accelerator("l4-24g", "L4", 24 * _GIB),
    Accelerator("a10g-24g", "A10G", 24 * _GIB),
    Accelerator("rtx4090-24g", "RTX4090", 24 * _GIB),
)

FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(accelerator.family for accelerator in CATALOG))
VARIANT_IDS: tuple[str, ...] = tuple(accelerator.id for accelerator in CATALOG)

_BY_FAMILY = {family.lower(): family for family in FAMILIES}


def family_named(name: str) -> str | None:
    """The catalog family that ``name`` spells in any case (``h100`` -> ``H100``), or None."""
    return _BY_FAMILY.get(name.lower())


def variants_selected(name: str) -> tuple[Accelerator, ...]:
    """The variants a ``gpu.type`` entry selects: all of a family, one variant, or none if unknown."""
    family = family_named(name)
    if family is not None:
        return tuple(accelerator for accelerator in CATALOG if accelerator.family == family)
    return tuple(accelerator for accelerator in CATALOG if accelerator.id == name)
