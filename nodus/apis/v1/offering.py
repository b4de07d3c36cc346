"""Offering (``offerings.nodus.dev``): one priced shape of GPU capacity from the price book.

The wire models of the kind: what the API server validates and what clients read, defined once.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from nodus.apis.v1 import accelerators
from nodus.apis.v1.base import WireModel
from nodus.apis.v1.scalars import Duration, PositiveDuration, PositiveUsd, Quantity


def _variant(value: str) -> str:
    if value not in accelerators.VARIANT_IDS:
        raise ValueError(f"must be an accelerator variant id: {', '.join(accelerators.VARIANT_IDS)}")
    return value


VariantId = Annotated[str, AfterValidator(_variant)]


class BootBand(WireModel):
    """BootBand is how long a cold host takes from the request to a registered agent."""

    p50: Duration = Field(description="P50 is the median cold boot time, such as 90s.")
    p90: Duration = Field(description="P90 is the 90th percentile cold boot time, such as 4m.")


class OfferingSpec(WireModel):
    """OfferingSpec describes one host shape in one region, on one market, and what an hour of it costs."""

    accelerator: VariantId | None = Field(
        None,
        description="Accelerator is the GPU variant id, such as h100-sxm-80g; absent for CPU-only hosts.",
        json_schema_extra={"enum": list(accelerators.VARIANT_IDS)},
    )
    family: str | None = Field(
        None,
        description="Family is the accelerator's family, such as H100; absent for CPU-only hosts.",
        json_schema_extra={"enum": list(accelerators.FAMILIES)},
    )
    gpus: Literal[0, 1, 2, 4, 8] = Field(description="GPUs is the GPUs per host: 0 for CPU-only, else 1, 2, 4 or 8.")
    gpu_memory: Quantity | None = Field(None, description="GPUMemory is the memory of each GPU, such as 80Gi.")
    interconnect: Literal["NVLink", "PCIe", "None"] = Field(
        description="Interconnect joins the host's GPUs: NVLink, PCIe, or None for CPU-only hosts."
    )
    vcpu: int = Field(ge=1, description="VCPU is the host's vCPU count.")
    memory: Quantity = Field(description="Memory is the host's memory, such as 1800Gi.")
    disk: Quantity = Field(description="Disk is the host's ephemeral disk, such as 20Ti.")
    provider: str = Field(min_length=1, description="Provider is the provider that supplies the host, such as sim.")
    region: str = Field(min_length=1, description="Region is the provider region, such as us-east.")
    instance_type: str | None = Field(
        None,
        min_length=1,
        description="InstanceType is the provider's machine type for the host, such as p5.48xlarge on aws; absent "
        "where the provider needs none (sim).",
    )
    region_class: Literal["us", "eu", "asia"] = Field(description="RegionClass is us, eu or asia.")
    interruptible: bool = Field(
        description="Interruptible hosts (spot) cost less and may be taken back; Jobs resume from checkpoints."
    )
    mean_time_between_interruptions: PositiveDuration | None = Field(
        None, description="MeanTimeBetweenInterruptions is how long an interruptible host typically lasts, such as 6h."
    )
    rate_usd_per_hour: PositiveUsd = Field(
        alias="rateUSDPerHour",
        description='RateUSDPerHour is the customer rate per host-hour, a decimal string such as "23.920000".',
    )
    boot: BootBand = Field(description="Boot is the cold boot-time band.")
    shareable: bool | None = Field(
        None,
        description="Shareable hosts run several attempts at once, each with its own GPUs, at the rate for the GPUs "
        "it takes; absent or false: a host runs one attempt.",
    )
    pricebook_version: str = Field(
        min_length=1, description='PricebookVersion is the version of the price book it came from, such as "2026-11".'
    )


class OfferingStatus(WireModel):
    """OfferingStatus is what the provider reports about an offering."""

    capacity: int | None = Field(
        None,
        ge=0,
        description="Capacity is how many hosts the provider can run at once; absent means unknown or unlimited.",
    )
