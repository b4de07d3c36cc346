"""Offering (``offerings.nodus.dev/v1``, cluster-scoped): one host shape a provider can supply, and its price.

Offerings are read-only through the API: the API server writes them at start from the price book
(``nodus.catalog.pricebook``; see ``nodus.api.offerings``), and only the provider writes their
``status.capacity``. Every authenticated user may get, list and watch them, to see what a Job can
run on and what an hour of it costs. The name is the offering id (``h100-sxm-80g-x8-us``, with
``-spot`` for interruptible hosts), and the label ``nodus.dev/pricebook-version`` names the price
book it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath, money, units
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1 import accelerators
from nodus.apis.v1.offering import OfferingSpec, OfferingStatus
from nodus.catalog.pricebook import VERSION_LABEL


def _consistency(spec: dict[str, Any]) -> list[FieldError]:
    """The rules between fields of a spec that passed the model."""
    errors: list[FieldError] = []
    root = Path("spec")
    variant = spec.get("accelerator")
    if spec["gpus"] == 0:
        for name in ("accelerator", "family", "gpuMemory"):
            if spec.get(name) is not None:
                errors.append(fieldpath.forbidden(root.child(name), "must be absent for a CPU-only host (gpus: 0)"))
        if spec["interconnect"] != "None":
            errors.append(
                fieldpath.invalid(root.child("interconnect"), spec["interconnect"], "must be None for gpus: 0")
            )
    else:
        for name in ("accelerator", "family", "gpuMemory"):
            if spec.get(name) is None:
                errors.append(fieldpath.required(root.child(name), "a GPU host names its accelerator"))
        if spec["interconnect"] == "None":
            errors.append(
                fieldpath.invalid(root.child("interconnect"), "None", "must be NVLink or PCIe for a GPU host")
            )
    known = next((a for a in accelerators.CATALOG if a.id == variant), None)
    if known is not None:
        if spec.get("family") is not None and spec["family"] != known.family:
            errors.append(fieldpath.invalid(root.child("family"), spec["family"], f"{variant} is a {known.family}"))
        memory = spec.get("gpuMemory")
        if memory is not None and units.parse_quantity(memory) != known.memory_bytes:
            detail = f"{variant} has {known.memory_bytes // 2**30}Gi per GPU"
            errors.append(fieldpath.invalid(root.child("gpuMemory"), memory, detail))
    mtbi = spec.get("meanTimeBetweenInterruptions")
    if spec["interruptible"] and mtbi is None:
        errors.append(fieldpath.required(root.child("meanTimeBetweenInterruptions"), "an interruptible host has one"))
    if not spec["interruptible"] and mtbi is not None:
        errors.append(
            fieldpath.forbidden(root.child("meanTimeBetweenInterruptions"), "only an interruptible host has one")
        )
    boot = spec["boot"]
    if units.parse_duration(boot["p90"]) < units.parse_duration(boot["p50"]):
        errors.append(fieldpath.invalid(root.child("boot", "p90"), boot["p90"], "must not be shorter than p50"))
    return errors


class OfferingStrategy(Strategy):
    """Offerings are written by the API server from the price book; status by the provider.

    The strategy the API serves with keeps the spec as the price book wrote it: an update through
    the API may change labels, annotations and (through ``/status``) the status, never the spec. The
    price book's own writer (``nodus.api.offerings``) uses ``from_price_book=True``.
    """

    def __init__(self, from_price_book: bool = False) -> None:
        self.from_price_book = from_price_book

    def validate(self, obj: Object) -> list[FieldError]:
        spec = obj.get("spec")
        _, errors = validate_model(OfferingSpec, spec, Path("spec"))
        if not errors and isinstance(spec, dict):
            errors = _consistency(spec)
        return errors

    def validate_update(self, new: Object, old: Object) -> list[FieldError]:
        if not self.from_price_book and new.get("spec") != old.get("spec"):
            return [
                fieldpath.forbidden(
                    Path("spec"),
                    "an Offering's spec comes from the price book: change the price book (--price-book) and "
                    "restart the API server",
                )
            ]
        return self.validate(new)

    def validate_status(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(OfferingStatus, obj.get("status") or {}, Path("status"))
        return errors


def _spec(obj: Object) -> dict[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def rate(obj: Object) -> str | None:
    """``spec.rateUSDPerHour`` as every table shows a rate: four decimals (``23.9200``, ``0.4516``); the exact
    rate is in ``-o yaml``."""
    text = _spec(obj).get("rateUSDPerHour")
    if not isinstance(text, str):
        return None
    try:
        amount = units.parse_usd(text)
    except ValueError:
        return text
    return money.rate_cell(amount)


def _or_none(path: str) -> Callable[[Object], Any]:
    """A cell that shows ``<none>`` for an absent field, as kubectl does, so that columns stay aligned."""
    column = PrinterColumn("", "string", path, "")

    def value(obj: Object) -> Any:
        found = column.extract(obj)
        return "<none>" if found is None else found

    return value


PRINTER_COLUMNS: tuple[PrinterColumn, ...] = (
    PrinterColumn(
        "Accelerator",
        "string",
        ".spec.accelerator",
        "The GPU variant; <none> for CPU-only hosts.",
        value=_or_none(".spec.accelerator"),
    ),
    PrinterColumn("GPUs", "integer", ".spec.gpus", "GPUs per host."),
    PrinterColumn("GPU-Mem", "string", ".spec.gpuMemory", "Memory of each GPU.", value=_or_none(".spec.gpuMemory")),
    PrinterColumn("vCPU", "integer", ".spec.vcpu", "The host's vCPUs."),
    PrinterColumn("Memory", "string", ".spec.memory", "The host's memory."),
    PrinterColumn("Region", "string", ".spec.region", "The provider region."),
    PrinterColumn("Spot", "boolean", ".spec.interruptible", "Whether the host is interruptible (spot)."),
    PrinterColumn("$/Hour", "string", ".spec.rateUSDPerHour", "The customer rate per host-hour, in USD.", value=rate),
    PrinterColumn("Boot-P50", "string", ".spec.boot.p50", "Median cold boot time."),
    PrinterColumn(
        "Capacity",
        "string",
        ".status.capacity",
        "Hosts the provider can run at once; <none> while unknown.",
        value=_or_none(".status.capacity"),
    ),
    PrinterColumn(
        "Family", "string", ".spec.family", "The accelerator family.", value=_or_none(".spec.family"), priority=1
    ),
    PrinterColumn("Interconnect", "string", ".spec.interconnect", "NVLink, PCIe or None.", priority=1),
    PrinterColumn("Disk", "string", ".spec.disk", "The host's ephemeral disk.", priority=1),
    PrinterColumn("Region-Class", "string", ".spec.regionClass", "us, eu or asia.", priority=1),
    PrinterColumn(
        "MTBI",
        "string",
        ".spec.meanTimeBetweenInterruptions",
        "Mean time between interruptions of an interruptible host.",
        value=_or_none(".spec.meanTimeBetweenInterruptions"),
        priority=1,
    ),
    PrinterColumn("Boot-P90", "string", ".spec.boot.p90", "90th percentile cold boot time.", priority=1),
    PrinterColumn("Provider", "string", ".spec.provider", "The provider that supplies it.", priority=1),
    PrinterColumn("Price-Book", "string", ".spec.pricebookVersion", "The price book version.", priority=1),
)


OFFERING = KindInfo(
    kind="Offering",
    plural="offerings",
    singular="offering",
    namespaced=False,
    description="Offering is one host shape a provider can supply (accelerator, GPUs per host, vCPU, memory, "
    "disk), in one region, on demand or interruptible, with its rate per host-hour and boot-time band. The API "
    f"server writes offerings from the price book (label {VERSION_LABEL}); users may get, list and watch them.",
    spec_model=OfferingSpec,
    status_model=OfferingStatus,
    strategy=OfferingStrategy(),
    printer_columns=PRINTER_COLUMNS,
    short_names=("off",),
    categories=("nodus",),
    # update and patch serve the provider's status.capacity (administrators only); create and delete
    # belong to the price book.
    verbs=("get", "list", "patch", "update", "watch"),
    user_writable=False,
)
