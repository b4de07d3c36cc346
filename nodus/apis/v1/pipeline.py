"""Pipeline (``pipelines.nodus.dev``): a graph of stages, each a Job template, run in dependency order.

The wire models of the kind: what the API server validates and what clients (the Pipeline
controller, kubectl) read, defined once. The graph's rules (names, edges, cycles) are in
:mod:`nodus.apis.v1.stagegraph`, shared by the server's validation and the controller.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.apis.v1.base import WireModel, list_map
from nodus.apis.v1.jobcost import BlockingReason, EstimateWarning, PlacementPreview, USDBand
from nodus.apis.v1.jobspec import JobSpec
from nodus.apis.v1.scalars import PositiveUsd, Time, Usd

PipelineState = Literal["Running", "Suspended", "Cancelled"]
PipelinePhase = Literal["Pending", "Running", "Succeeded", "Failed", "Suspended", "Cancelled"]
StagePhase = Literal["Waiting", "Running", "Succeeded", "Failed", "Suspended", "Cancelled", "Skipped"]

MAX_STAGES = 64


class StageTemplateMetadata(WireModel):
    """StageTemplateMetadata is copied onto the stage's Job (the Pipeline adds nodus.dev/pipeline and
    nodus.dev/stage)."""

    annotations: dict[str, str] | None = Field(None, description="Annotations are copied onto the stage's Job.")
    labels: dict[str, str] | None = Field(None, description="Labels are copied onto the stage's Job.")


class StageTemplate(WireModel):
    """StageTemplate is the Job a stage runs: its metadata and a whole Job spec."""

    metadata: StageTemplateMetadata | None = Field(
        None, description="StageTemplateMetadata is copied onto the stage's Job."
    )
    spec: JobSpec = Field(
        description="Spec is the stage Job's spec. Its inputs may name another stage's output with fromStage "
        "({stage, output}); the Pipeline rewrites that to the producing Job's committed output."
    )


class PipelineStage(WireModel):
    """PipelineStage is one node of the graph: a named Job template and the stages it waits for."""

    continue_on_failure: bool = Field(
        False,
        description="ContinueOnFailure lets the Pipeline go on when this stage fails: the stages that depend on it "
        "are skipped, the others run (default false: a failure fails the Pipeline and cancels what runs).",
    )
    depends_on: list[str] | None = Field(
        None,
        max_length=MAX_STAGES,
        description="DependsOn names the stages that must succeed before this one starts; a fromStage input adds "
        "its producing stage as well.",
    )
    name: str = Field(
        min_length=1,
        max_length=63,
        description="Name is a DNS label unique among the stages; the stage's Job is <pipeline>-<name>.",
    )
    template: StageTemplate = Field(description="StageTemplate is the Job this stage runs.")


class PipelineSpec(WireModel):
    """PipelineSpec is the stage graph, its desired state and its spending cap."""

    max_cost_usd: PositiveUsd | None = Field(
        None,
        alias="maxCostUSD",
        description="MaxCostUSD caps what the Pipeline's stages may spend together: a stage starts only while the "
        "stages' costs so far are below it, and each stage Job's maxCostUSD is at most what remains.",
    )
    stages: list[PipelineStage] = Field(
        min_length=1,
        max_length=MAX_STAGES,
        description="Stages are the graph's nodes (at most 64); the graph must be acyclic.",
        json_schema_extra=list_map("name"),
    )
    state: PipelineState = Field(
        "Running",
        description="State is the desired state: Running (the default), Suspended (every running stage Job is "
        "suspended and no new stage starts) or Cancelled (every stage Job is cancelled; final).",
    )


class StageStatus(WireModel):
    """StageStatus is what one stage did."""

    completion_time: Time | None = Field(None, description="CompletionTime is when the stage's Job finished.")
    cost_usd: Usd | None = Field(None, alias="costUSD", description="CostUSD is what the stage's Job was charged.")
    job: str | None = Field(None, description="Job is the stage's Job, once created.")
    message: str | None = Field(None, description="Message says why the stage waits, was skipped or failed.")
    name: str = Field(min_length=1, description="Name is the stage.")
    phase: StagePhase = Field(
        description="Phase is Waiting (for the stages it depends on, or to be created), Running (its Job exists and "
        "has not finished), Succeeded, Failed, Suspended, Cancelled or Skipped (a stage it depends on failed or was "
        "cancelled)."
    )
    reused: bool | None = Field(
        None,
        description="Reused is true when a Succeeded Job of an earlier run with the same template and input digests "
        "was reused instead of running the stage again.",
    )
    run: int | None = Field(None, ge=1, description="Run is the Pipeline run this stage belongs to (default 1).")
    start_time: Time | None = Field(None, description="StartTime is when the stage's Job started running.")


class PipelineCondition(WireModel):
    """PipelineCondition is one observation of the Pipeline (metav1.Condition): Complete, Failed or Suspended."""

    last_transition_time: Time | None = Field(
        None, description="LastTransitionTime is when the condition last changed from one status to another."
    )
    message: str | None = Field(None, description="Message is a human-readable explanation of the transition.")
    observed_generation: int | None = Field(
        None, ge=0, description="ObservedGeneration is the metadata.generation the condition was set from."
    )
    reason: str | None = Field(None, description="Reason is a CamelCase code for the last transition.")
    status: Literal["True", "False", "Unknown"] = Field(description="Status is True, False or Unknown.")
    type: str = Field(min_length=1, description="Type is the CamelCase condition type, such as Complete.")


class StageEstimate(WireModel):
    """StageEstimate is one stage Job's estimate, as that Job's status.estimate would show it."""

    concurrent_hold_usd: Usd | None = Field(
        None, alias="concurrentHoldUSD", description="ConcurrentHoldUSD is what the stage holds for its slots at once."
    )
    cost_usd: USDBand | None = Field(None, alias="costUSD", description="USDBand is the stage's P50/P90 cost.")
    hold_usd: Usd | None = Field(None, alias="holdUSD", description="HoldUSD is the stage Job's first hold.")
    name: str = Field(min_length=1, description="Name is the stage.")
    placement_preview: PlacementPreview | None = Field(
        None, description="PlacementPreview is where the stage's Job would be placed now."
    )
    rate_usd_per_hour: Usd | None = Field(
        None, alias="rateUSDPerHour", description="RateUSDPerHour is the hourly rate of the chosen capacity."
    )


class PipelineEstimate(WireModel):
    """PipelineEstimate is the estimate of the whole graph, returned in status.estimate by a dry run
    (?dryRun=All) and on create; the ETag of the dry-run response binds a later create to it."""

    blocking_reasons: list[BlockingReason] | None = Field(
        None, description="BlockingReasons are the stages' reasons a stage Job would be refused, each naming its stage."
    )
    cost_usd: USDBand | None = Field(
        None, alias="costUSD", description="USDBand is the P50/P90 of the sum of the stages' costs."
    )
    largest_concurrent_hold_usd: Usd | None = Field(
        None,
        alias="largestConcurrentHoldUSD",
        description="LargestConcurrentHoldUSD bounds what the stages that may run at the same time hold together.",
    )
    pricebook_version: str | None = Field(None, description="PricebookVersion is the price book the estimate used.")
    stages: list[StageEstimate] | None = Field(
        None, description="Stages are the stage Jobs' estimates, in spec order.", json_schema_extra=list_map("name")
    )
    valid_until: Time | None = Field(None, description="ValidUntil is when the earliest stage estimate expires.")
    warnings: list[EstimateWarning] | None = Field(
        None, description="Warnings are non-blocking notes: the graph's and each stage's, naming the stage."
    )


class PipelineStatus(WireModel):
    """PipelineStatus is the Pipeline controller's observation of the stages' Jobs."""

    completion_time: Time | None = Field(None, description="CompletionTime is when the Pipeline finished.")
    conditions: list[PipelineCondition] | None = Field(
        None,
        description="Conditions: Complete (every stage succeeded), Failed (a stage failed) and Suspended.",
        json_schema_extra=list_map("type"),
    )
    cost_usd: Usd | None = Field(
        None, alias="costUSD", description="CostUSD is the sum of the stage Jobs' charges so far."
    )
    estimate: PipelineEstimate | None = Field(
        None, description="PipelineEstimate is the estimate of the whole graph, made at create (or a dry run)."
    )
    message: str | None = Field(None, description="Message explains the phase.")
    observed_generation: int | None = Field(
        None, ge=0, description="ObservedGeneration is the metadata.generation this status was computed for."
    )
    phase: PipelinePhase | None = Field(
        None,
        description="Phase is Pending (no stage Job started yet), Running, Succeeded, Failed, Suspended or Cancelled.",
    )
    rerun_from: str | None = Field(None, description="RerunFrom is the stage the current run was started from.")
    rerun_requested_at: str | None = Field(
        None, description="RerunRequestedAt is the nodus.dev/rerun-requested-at value that started the current run."
    )
    run: int | None = Field(None, ge=1, description="Run counts the runs: 1, then one more for each re-run.")
    stages: list[StageStatus] | None = Field(
        None, description="Stages is each stage's status, in spec order.", json_schema_extra=list_map("name")
    )
    start_time: Time | None = Field(None, description="StartTime is when the first stage Job was created.")
    succeeded: int | None = Field(None, ge=0, description="Succeeded is how many stages succeeded (or were reused).")
