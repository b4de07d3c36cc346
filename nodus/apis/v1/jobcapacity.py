# ruff: noqa: RUF001, RUF002
# (Descriptions quote the API reference verbatim, typographic characters included.)
"""The capacity a Job asks for and how it survives losing it: resources, gang, placement, recovery.

Descriptions are the API reference's sentences (what ``kubectl explain`` shows), completed where
ADR 0046 settles what a sentence leaves open, chiefly the defaults of its §5. A default is
declared once, on its field: it is what OpenAPI shows and what ``defaults.py`` writes into the stored
spec. Single-field constraints live here; rules that span fields are in ``validation_capacity``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from nodus.apis.v1.base import WireModel
from nodus.apis.v1.scalars import (
    AbsolutePath,
    AutoOrDuration,
    Duration,
    DurationFormat,
    PositiveUsd,
    Quantity,
    QuantityFormat,
)

GpuCount = Literal[1, 2, 4, 8]


class GPURequest(WireModel):
    """GPURequest asks for accelerators. A family (H100) matches any of its variants and never another family."""

    count: GpuCount | None = Field(None, description="Count is the GPUs per node: 1, 2, 4 or 8.")
    exact: bool | None = Field(None, description="Exact pins the exact variant instead of matching the family.")
    interconnect: Literal["Any", "NVLink"] | None = Field(None, description="Interconnect is Any or NVLink.")
    min_memory: Quantity | None = Field(None, description="MinMemory is the per-GPU memory floor.")
    type: list[str] = Field(
        min_length=1, max_length=8, description="Type lists 1–8 accelerator ids or families from the catalog."
    )


class Resources(WireModel):
    """Resources are capacity floors. For GPU work the offering’s host shape applies if larger."""

    cpu: Quantity | None = Field(None, description="CPU is the vCPU floor.")
    disk: Quantity | None = Field(None, description="Disk is the ephemeral disk floor.")
    gpu: GPURequest | None = Field(
        None,
        description="GPURequest asks for accelerators. "
        "A family (H100) matches any of its variants and never another family.",
    )
    memory: Quantity | None = Field(None, description="Memory is the host memory floor.")
    nodes: int | None = Field(
        None,
        ge=0,
        description="Nodes above 1 is shorthand for spec.distributed.nodes and is stored in that form. "
        "0 or 1 means one node; the field is never returned on read.",
    )


class Distributed(WireModel):
    """Distributed runs the Job as a gang of nodes that start together and restart together (Beta)."""

    gpus_per_node: GpuCount | None = Field(
        None, description="GPUsPerNode is 1, 2, 4 or 8 and equals resources.gpu.count when both are set."
    )
    launcher: Literal["Plain", "Torchrun", "Ray", "Verl", "Accelerate", "Deepspeed"] = Field(
        "Plain",
        description="Launcher is Plain (env contract only), Torchrun, Ray, Verl, Accelerate or Deepspeed "
        "(default Plain).",
    )
    max_assembly_retries: int = Field(
        2,
        ge=0,
        le=5,
        description="MaxAssemblyRetries is how many times a timed-out assembly is re-placed (0–5, default 2).",
    )
    network: Literal["Colocated", "Regional", "Global"] = Field(
        "Colocated",
        description="Network is Colocated (one provider and region), Regional (one region class) or Global "
        "(default Colocated).",
    )
    nodes: int | None = Field(
        None,
        ge=2,
        le=16,
        description="Nodes is the gang size (2–16; the beta caps it at 8). Exactly one of nodes and totalGPUs.",
    )
    startup_timeout: Annotated[str, DurationFormat(minimum="5m", maximum="60m")] = Field(
        "15m", description="StartupTimeout is the gang assembly budget (5m–60m, default 15m)."
    )
    total_gpus: int | None = Field(
        None,
        alias="totalGPUs",
        ge=2,
        le=64,
        description="TotalGPUs is resolved into status.topology at admission (2–64). It is split into nodes × "
        "gpusPerNode, with gpusPerNode taken from gpusPerNode or resources.gpu.count, else the largest of 8, 4, 2 "
        "and 1 that divides it and leaves at least 2 nodes.",
    )
    transport: Literal["Direct", "Auto"] = Field(
        "Direct",
        description="Transport is Direct (private or direct paths only) or Auto (relayed paths allowed); "
        "default Direct.",
    )


class Placement(WireModel):
    """Placement constrains where work may run."""

    dedicated: bool | None = Field(None, description="Dedicated is reserved; only true (or unset) is accepted.")
    interruptible: Literal["Never", "Allow", "Prefer"] = Field(
        "Never",
        description="Interruptible is Never, Allow (the scheduler decides by expected cost) or Prefer (default Never).",
    )
    max_rate_usd_per_hour: PositiveUsd | None = Field(
        None,
        alias="maxRateUSDPerHour",
        description="MaxRateUSDPerHour filters out offerings above this customer rate.",
    )
    offerings: list[str] | None = Field(None, description="Offerings restricts placement to these Offerings.")
    pool: str | None = Field(None, description="Pool is a BYOC Pool in the project.")
    profile: Literal["Balanced", "Cost", "Speed"] = Field(
        "Balanced", description="Profile is Balanced, Cost or Speed (default Balanced)."
    )
    queue_timeout: Duration = Field(
        "24h",
        description="QueueTimeout is how long the Job may wait for capacity before failing with CapacityUnavailable "
        "(default 24h; 0s waits forever).",
    )
    regions: list[str] | None = Field(None, description="Regions are region classes (us, eu, …); empty means any.")


class CheckpointPolicy(WireModel):
    """CheckpointPolicy configures checkpoints."""

    format: Literal["Snapshot", "Dcp"] | None = Field(
        None,
        description="Format is Snapshot, or Dcp for torch.distributed.checkpoint (the default for distributed "
        "Jobs). Snapshot is the default otherwise.",
    )
    integration: Literal["Auto", "None", "HFTrainer"] = Field(
        "Auto", description="Integration is Auto (the default), None or HFTrainer."
    )
    interval: Annotated[str, AutoOrDuration(minimum="1m", maximum="6h")] = Field(
        "auto", description="Interval is auto or a duration from 1m to 6h (default auto)."
    )
    max_size: Annotated[str, QuantityFormat(maximum="2Ti")] = Field(
        "1Ti", description="MaxSize is checked before upload (default 1Ti, at most 2Ti)."
    )
    paths: list[AbsolutePath] = Field(
        ["/nodus/state"],
        max_length=64,
        description="Paths are saved together in one checkpoint (at most 64; default /nodus/state).",
    )
    retain_after_finish: Duration = Field(
        "168h",
        description="RetainAfterFinish keeps checkpoints this long after the Job finishes (default 168h).",
    )


class Recovery(WireModel):
    """Recovery says how progress survives lost capacity."""

    checkpoint: CheckpointPolicy = Field(
        default_factory=CheckpointPolicy, description="CheckpointPolicy configures checkpoints."
    )
    continuity: Literal["Checkpointed", "Restartable", "Ephemeral"] = Field(
        "Checkpointed",
        description="Continuity is Checkpointed (restore the latest checkpoint), Restartable (progress cursor) or "
        "Ephemeral (default Checkpointed).",
    )
    max_attempts: int = Field(
        3,
        ge=1,
        le=32,
        description="MaxAttempts is how many infrastructure replacements each index may use (1–32, default 3; "
        "gangs count restarts).",
    )
    min_progress_duration: Duration = Field(
        "2m", description="MinProgressDuration is the run time that counts as progress (default 2m)."
    )
    on_interruption: Literal["Resume", "Fail"] = Field(
        "Resume",
        description="OnInterruption is Resume (the default), or Fail to fail instead of recovering or suspending.",
    )
