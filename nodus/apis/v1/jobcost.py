# ruff: noqa: RUF001
# (Descriptions quote the API reference verbatim, typographic characters included.)
"""Money in a Job's status: ``status.cost`` (what was charged) and ``status.estimate`` (what will be).

Both are display copies: amounts are decimal USD strings with at most six fractional digits
(ADR 0046 §22), and nothing is charged from these fields. The reference says ``Cost`` is the same
type on every kind that spends money, and ``Estimate`` on every compute kind, so these models depend
on nothing Job-specific.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.apis.v1.base import WireModel
from nodus.apis.v1.scalars import Duration, Time, Usd

USD_BAND = "USDBand is a median and a 90th-percentile amount in USD."
DURATION_BAND = "DurationBand is a median and a 90th-percentile duration, as Go duration strings."


class CostSegments(WireModel):
    """CostSegments splits a charge by billing segment."""

    boot_usd: Usd | None = Field(
        None,
        alias="bootUSD",
        description="BootUSD is the charge from the start of billing until the program started.",
    )
    covered_by_nodus: list[Literal["Boot", "Running", "Restore", "Teardown"]] | None = Field(
        None,
        description="CoveredByNodus lists the segments (Boot, Running, Restore, Teardown: the rounding to the billing "
        "increment) with time Nodus paid for instead of charging it, such as the start of a run that failed because "
        "of Nodus.",
    )
    restore_usd: Usd | None = Field(
        None,
        alias="restoreUSD",
        description="RestoreUSD is the charge for bringing a replacement up after capacity was lost.",
    )
    running_usd: Usd | None = Field(
        None, alias="runningUSD", description="RunningUSD is the charge while the program ran."
    )
    storage_usd: Usd | None = Field(
        None,
        alias="storageUSD",
        description="StorageUSD is the charge for storing the Job's bytes above the free inclusion, by the hour "
        "while the Job exists (status.storage.billedBytes).",
    )
    teardown_usd: Usd | None = Field(
        None,
        alias="teardownUSD",
        description="TeardownUSD is the rounding charge, not time spent tearing down: the billed time (boot or "
        "restore plus running) rounded up to the billing increment (60 s, at least one increment), at the same "
        "rate. The CLI shows it as Rounding.",
    )


class Cost(WireModel):
    """Cost is status.cost on every kind that spends money. It is a display copy of the ledger: amounts are decimal
    USD strings, and nothing is charged from these fields."""

    by_segment: CostSegments | None = Field(None, description="CostSegments splits a charge by billing segment.")
    final: bool | None = Field(None, description="Final is true once the final charge has posted.")
    funded_until_time: Time | None = Field(
        None, description="FundedUntilTime is when the current holds stop paying for the object."
    )
    held_usd: Usd | None = Field(None, alias="heldUSD", description="HeldUSD is what is currently held for it.")
    limit_usd: Usd | None = Field(
        None, alias="limitUSD", description="LimitUSD is the object’s maxCostUSD, if it has one."
    )
    rate_usd_per_hour: Usd | None = Field(
        None,
        alias="rateUSDPerHour",
        description="RateUSDPerHour is the sum of the hourly rates of its capacity that is still billing.",
    )
    total_usd: Usd | None = Field(
        None, alias="totalUSD", description="TotalUSD is what has been charged for this object so far."
    )


class BlockingReason(WireModel):
    """BlockingReason says why a create would fail now."""

    code: str | None = Field(
        None, description="Code is the error code the create would return, for example InsufficientCredits."
    )
    fix: str | None = Field(None, description="Fix says what to do.")
    message: str | None = Field(None, description="Message states the reason with the amounts involved.")


class USDBand(WireModel):
    """USDBand is a median and a 90th-percentile amount in USD."""

    p50: Usd | None = Field(None, description="P50 is the median amount.")
    p90: Usd | None = Field(None, description="P90 is the 90th-percentile amount.")


class PlacementPreview(WireModel):
    """PlacementPreview is the customer-safe description of the capacity a create would use."""

    explain: str | None = Field(
        None, description="Explain is the scheduler’s explanation, the same shape as Attempt status.placement.explain."
    )
    interruptible: bool | None = Field(None, description="Interruptible reports whether the capacity can be reclaimed.")
    node: str | None = Field(None, description="Node is the pool host that would run it, when one can now.")
    offering: str | None = Field(None, description="Offering is the offering id, for example h100-sxm-80g-x8-us.")
    platform_fee: PlatformFeePreview | None = Field(
        None, description="PlatformFee is what an hour on the pool costs (a Job with placement.pool)."
    )
    pool: str | None = Field(None, description="Pool is the Job's Pool, when it places on one (no offering then).")
    region_class: str | None = Field(None, description="RegionClass is the region class of the offering.")
    warm_reuse: bool | None = Field(None, description="WarmReuse reports whether warm capacity would be reused.")


class PlatformFeePreview(WireModel):
    """PlatformFeePreview is the price book's platform fee: what a Pool host's hour costs, in USD."""

    per_gpu_hour: str = Field(alias="perGPUHour", description="PerGPUHour is charged for each GPU an attempt takes.")
    per_host_hour: str = Field(description="PerHostHour is charged for an attempt that takes no GPU.")


class DurationBand(WireModel):
    """DurationBand is a median and a 90th-percentile duration, as Go duration strings."""

    p50: Duration | None = Field(None, description="P50 is the median duration.")
    p90: Duration | None = Field(None, description="P90 is the 90th-percentile duration.")


class StartupEstimate(WireModel):
    """StartupEstimate is the expected time to start."""

    cold: DurationBand | None = Field(None, description=DURATION_BAND)
    warm: DurationBand | None = Field(None, description=DURATION_BAND)


class EstimateWarning(WireModel):
    """EstimateWarning is a non-blocking note on an estimate."""

    code: str | None = Field(None, description="Code is the CamelCase warning code.")
    message: str | None = Field(None, description="Message explains the warning.")


class Estimate(WireModel):
    """Estimate is returned in status.estimate by a dry-run (?dryRun=All) and on create for every compute kind
    (ADR-031). Amounts are decimal USD strings; the ETag of the dry-run response binds a later create to it."""

    assembly_bound_usd: Usd | None = Field(
        None,
        alias="assemblyBoundUSD",
        description="AssemblyBoundUSD is the most a multi-node Job can cost if its members never assemble.",
    )
    blocking_reasons: list[BlockingReason] | None = Field(
        None, description="BlockingReasons say why a real create would fail now, with the amounts and a fix."
    )
    concurrent_hold_usd: Usd | None = Field(
        None,
        alias="concurrentHoldUSD",
        description="ConcurrentHoldUSD is the total of the holds for every slot that starts at once.",
    )
    cost_usd: USDBand | None = Field(None, alias="costUSD", description=USD_BAND)
    gang_hold_usd: Usd | None = Field(
        None, alias="gangHoldUSD", description="GangHoldUSD is the total of the member holds of a multi-node Job."
    )
    hold_usd: Usd | None = Field(
        None,
        alias="holdUSD",
        description="HoldUSD is the first hold that must fit your balance, every matching Budget and the object’s "
        "own cap.",
    )
    minimum_charge_usd: Usd | None = Field(
        None,
        alias="minimumChargeUSD",
        description="MinimumChargeUSD is one billing increment (60 s) at the rate: the least an allocation costs, "
        "since its billed time is rounded up to whole increments.",
    )
    overhead_usd: USDBand | None = Field(None, alias="overheadUSD", description=USD_BAND)
    placement_preview: PlacementPreview | None = Field(
        None,
        description="PlacementPreview is the customer-safe description of the capacity a create would use.",
    )
    pricebook_version: str | None = Field(None, description="PricebookVersion is the price book the estimate used.")
    rate_usd_per_hour: Usd | None = Field(
        None, alias="rateUSDPerHour", description="RateUSDPerHour is the hourly rate of the chosen capacity."
    )
    startup: StartupEstimate | None = Field(None, description="StartupEstimate is the expected time to start.")
    topology: str | None = Field(
        None,
        description="Topology is the resolved multi-node topology of a gang Job, as a one-line summary such as "
        "2x8xH100.",
    )
    valid_until: Time | None = Field(
        None,
        description="ValidUntil is when the prices this estimate used stop being current. A create bound by If-Match "
        "is admitted after it too, and never placed above rateUSDPerHour plus 10 %.",
    )
    warnings: list[EstimateWarning] | None = Field(
        None, description="Warnings are non-blocking notes, for example ColdStart or InterruptibleSelected."
    )
