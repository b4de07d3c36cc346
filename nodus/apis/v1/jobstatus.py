# ruff: noqa: RUF001
# (Descriptions quote the API reference verbatim, typographic characters included.)
"""``JobStatus``: what Nodus observed about a Job, written by controllers through ``/status``.

Descriptions are the API reference's sentences, completed where ADR 0046 settles what they leave
open: the Job phases (2), the secret maps keyed by Secret name (20) and the requested-action map
(19). ``status.conditions`` follows ``metav1.Condition``, which the reference shows without
sentences; its descriptions are the Kubernetes ones. Money fields are in ``status_cost``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.apis.v1.base import WireModel, list_map
from nodus.apis.v1.jobcost import Cost, Estimate
from nodus.apis.v1.phases import JobPhase
from nodus.apis.v1.scalars import DecimalString, Duration, Sha256Hex, Time, Usd

NetworkPath = Literal["Private", "Public", "Direct", "Relayed"]


class AttemptCounts(WireModel):
    """AttemptCounts counts attempts of one slot."""

    current: int | None = Field(None, ge=1, description="Current is the current attempt’s number, from 1.")
    max: int | None = Field(None, ge=1, description="Max is recovery.maxAttempts.")
    total: int | None = Field(None, ge=0, description="Total is how many attempts have run.")


class CheckpointStatus(WireModel):
    """CheckpointStatus is the latest committed checkpoint."""

    interval: Duration | None = Field(None, description="Interval is the cadence in use.")
    restored_from_seq: int | None = Field(
        None, ge=0, description="RestoredFromSeq is the checkpoint the current attempt restored."
    )
    seq: int | None = Field(None, ge=0, description="Seq is the checkpoint sequence number.")
    size: int | None = Field(None, ge=0, description="Size is its size in bytes.")
    time: Time | None = Field(None, description="Time is when it committed.")


class Condition(WireModel):
    """Condition is one observation of the Job (metav1.Condition), such as Admitted, Funded or Complete."""

    last_transition_time: Time | None = Field(
        None, description="LastTransitionTime is when the condition last changed from one status to another."
    )
    message: str | None = Field(None, description="Message is a human-readable explanation of the transition.")
    observed_generation: int | None = Field(
        None, ge=0, description="ObservedGeneration is the metadata.generation the condition was set from."
    )
    reason: str | None = Field(None, description="Reason is a CamelCase code for the last transition.")
    status: Literal["True", "False", "Unknown"] = Field(description="Status is True, False or Unknown.")
    type: str = Field(
        min_length=1, description="Type is the CamelCase condition type, unique in the list, for example Funded."
    )


class GangMember(WireModel):
    """GangMember is one rank of a gang epoch."""

    attempt: str | None = Field(None, description="Attempt is the rank’s attempt id.")
    offering: str | None = Field(None, description="Offering is the rank’s offering key.")
    path: NetworkPath | None = Field(None, description="Path is Private, Public, Direct or Relayed.")
    phase: str | None = Field(None, description="Phase is the rank attempt’s phase.")
    rank: int | None = Field(None, ge=0, description="Rank is 0..size-1.")
    region_class: str | None = Field(None, description="RegionClass is the rank’s region class.")


class GangProbe(WireModel):
    """GangProbe is a measured network path."""

    bus_gbps: DecimalString | None = Field(None, description="BusGbps is the measured all-reduce bus bandwidth.")
    measured_time: Time | None = Field(None, description="MeasuredTime is when it was measured.")
    path: NetworkPath | None = Field(None, description="Path is the measured path.")
    rtt_ms: DecimalString | None = Field(None, description="RTTMs is the measured round-trip time.")


class GangStatus(WireModel):
    """GangStatus is the current epoch of a gang Job, in offering keys only."""

    epoch: int | None = Field(None, ge=0, description="Epoch is the gang epoch.")
    members: list[GangMember] | None = Field(None, description="Members are the ranks of this epoch.")
    phase: (
        Literal["Queued", "Assembling", "Meshing", "Starting", "Running", "Recovering", "Stopping", "Releasing", "Done"]
        | None
    ) = Field(
        None,
        description="Phase is Queued, Assembling, Meshing, Starting, Running, Recovering, Stopping, Releasing or Done.",
    )
    probe: GangProbe | None = Field(None, description="GangProbe is a measured network path.")
    ready: int | None = Field(
        None, ge=0, description="Ready is how many ranks registered, meshed and passed the probe."
    )
    rendezvous: str | None = Field(None, description="Rendezvous is rank 0’s advertised address.")
    restarts: int | None = Field(None, ge=0, description="Restarts counts gang restarts.")
    size: int | None = Field(None, ge=0, description="Size is the number of ranks.")
    started: int | None = Field(None, ge=0, description="Started is how many ranks started the command.")
    transport: NetworkPath | None = Field(
        None, description="Transport is the weakest pair’s path: Private, Public, Direct or Relayed."
    )


class ImageStatus(WireModel):
    """ImageStatus is the pinned image."""

    digest: str | None = Field(None, description="Digest is the pinned digest.")
    reference: str | None = Field(None, description="Reference is the image as written.")
    user: str | None = Field(
        None,
        description="User is the user the image’s config runs its process as (root when it names none). Only an image "
        "that runs as root is placed on offerings that start the Nodus node agent inside the image itself.",
    )


class InputStatus(WireModel):
    """InputStatus is a pinned input."""

    name: str | None = Field(None, description="Name is the input.")
    sha256: Sha256Hex | None = Field(None, description="SHA256 is the verified digest.")
    volume_revision: int | None = Field(None, ge=1, description="VolumeRevision is the pinned Volume revision.")
    workspace_revision: int | None = Field(
        None, ge=1, description="WorkspaceRevision is the pinned Workspace revision (fromWorkspace)."
    )


class Link(WireModel):
    """Link is a related page."""

    kind: str | None = Field(None, description="Kind names the link, for example wandb.")
    url: str | None = Field(None, description="URL is the page.")


class SinkStatus(WireModel):
    """SinkStatus is the state of one sink load."""

    message: str | None = Field(None, description="Message explains a failure.")
    phase: Literal["Pending", "Loading", "Loaded", "Failed"] | None = Field(
        None, description="Phase is Pending, Loading, Loaded or Failed."
    )
    rows: int | None = Field(None, ge=0, description="Rows is how many rows were loaded.")


class OutputStatus(WireModel):
    """OutputStatus is a committed output."""

    committed_time: Time | None = Field(
        None,
        description="CommittedTime is when the output was committed (its attempt succeeded); its bytes are billed "
        "as storage from then.",
    )
    index: int | None = Field(None, ge=0, description="Index is the Job index that produced it.")
    name: str | None = Field(None, description="Name is the declared output.")
    path: str | None = Field(None, description="Path is where it was collected from.")
    rank: int | None = Field(None, ge=0, description="Rank is the gang rank that produced it (fromRanks All).")
    sha256: Sha256Hex | None = Field(None, description="SHA256 is the content digest.")
    sink: SinkStatus | None = Field(None, description="SinkStatus is the state of one sink load.")
    size: int | None = Field(None, ge=0, description="Size is the size in bytes.")


class JobPlacement(WireModel):
    """JobPlacement is where the current attempt runs, in customer terms."""

    interruptible: bool | None = Field(None, description="Interruptible is true on reclaimable capacity.")
    offering: str | None = Field(None, description="Offering is the offering key, for example h100-sxm-80g-x1-us.")
    rate_usd_per_hour: Usd | None = Field(
        None, alias="rateUSDPerHour", description="RateUSDPerHour is the frozen customer rate."
    )
    region_class: str | None = Field(None, description="RegionClass is the region class.")
    warm_reuse: bool | None = Field(None, description="WarmReuse is true when warm capacity was reused.")


class ProgressUnits(WireModel):
    """ProgressUnits counts work units."""

    completed: int | None = Field(None, ge=0, description="Completed is units done.")
    total: int | None = Field(None, ge=0, description="Total is units planned, when known.")


class Progress(WireModel):
    """Progress is what the program reported."""

    metrics: dict[str, DecimalString] | None = Field(
        None, description="Metrics are the latest scalar metrics, as decimal strings."
    )
    stage: str | None = Field(None, description="Stage is a domain stage name.")
    units: ProgressUnits | None = Field(None, description="ProgressUnits counts work units.")


class SourceStatus(WireModel):
    """SourceStatus is the resolved code."""

    blob: str | None = Field(None, description="Blob is the uploaded blob.")
    commit: str | None = Field(None, description="Commit is the resolved git commit.")


class StorageStatus(WireModel):
    """StorageStatus is the bytes a Job owns."""

    billed_bytes: int | None = Field(
        None,
        ge=0,
        description="BilledBytes is the share above the free inclusion, charged by the GiB-hour while the Job exists.",
    )
    bytes: int | None = Field(None, ge=0, description="Bytes is checkpoints plus outputs.")


class Topology(WireModel):
    """Topology is the resolved shape of a gang Job; it never changes across epochs."""

    accelerator: str | None = Field(None, description="Accelerator is the resolved accelerator id.")
    gpus_per_node: int | None = Field(None, ge=1, description="GPUsPerNode is the GPUs on each node.")
    network: Literal["Colocated", "Regional", "Global"] | None = Field(
        None, description="Network is the locality the gang was placed under."
    )
    nodes: int | None = Field(None, ge=1, description="Nodes is the gang size.")
    resolved_from: Literal["Nodes", "TotalGPUs"] | None = Field(None, description="ResolvedFrom is Nodes or TotalGPUs.")
    total_gpus: int | None = Field(None, alias="totalGPUs", ge=1, description="TotalGPUs is nodes × gpusPerNode.")


class VolumeStatus(WireModel):
    """VolumeStatus is a Volume revision a mount used: pinned (read-only) or written (writable, on success)."""

    mount_path: str | None = Field(None, description="MountPath is where it was mounted.")
    read_only: bool | None = Field(None, description="ReadOnly is true for a read-only mount.")
    revision: int | None = Field(None, ge=1, description="Revision is the pinned, or the newly written, revision.")
    volume: str | None = Field(None, description="Volume is the Volume's name.")


class UnitMetrics(WireModel):
    """UnitMetrics summarize per-unit timings."""

    completed: int | None = Field(None, ge=0, description="Completed is units done.")
    cost_per_unit_usd: Usd | None = Field(
        None, alias="costPerUnitUSD", description="CostPerUnitUSD is cost divided by units."
    )
    p50_ms: int | None = Field(None, ge=0, description="P50Ms is the median unit time.")
    p95_ms: int | None = Field(None, ge=0, description="P95Ms is the 95th percentile unit time.")


class JobStatus(WireModel):
    """JobStatus is what Nodus observed about a Job."""

    active: int | None = Field(None, ge=0, description="Active is the number of indexes with a live attempt.")
    attempts: AttemptCounts | None = Field(None, description="AttemptCounts counts attempts of one slot.")
    checkpoint: CheckpointStatus | None = Field(
        None, description="CheckpointStatus is the latest committed checkpoint."
    )
    completed_indexes: str | None = Field(
        None,
        pattern=r"^(\d+(-\d+)?(,\d+(-\d+)?)*)?$",
        description="CompletedIndexes lists the succeeded indexes as compressed ranges, for example 0-3,5.",
    )
    completion_time: Time | None = Field(None, description="CompletionTime is when the Job reached a terminal phase.")
    conditions: list[Condition] | None = Field(
        None, description="Conditions are the latest observations.", json_schema_extra=list_map("type")
    )
    cost: Cost | None = Field(
        None,
        description="Cost is status.cost on every kind that spends money. It is a display copy of the ledger: amounts "
        "are decimal USD strings, and nothing is charged from these fields.",
    )
    estimate: Estimate | None = Field(
        None,
        description="Estimate is returned in status.estimate by a dry-run (?dryRun=All) and on create for every "
        "compute kind (ADR-031). Amounts are decimal USD strings; the ETag of the dry-run response binds a later "
        "create to it.",
    )
    failed: int | None = Field(
        None, ge=0, description="Failed is the number of customer failures (non-zero exits, OOM) across all indexes."
    )
    fix: str | None = Field(None, description="Fix is the reason’s documented fix.")
    gang: GangStatus | None = Field(
        None, description="GangStatus is the current epoch of a gang Job, in offering keys only."
    )
    handled_requests: dict[str, Time] | None = Field(
        None,
        description="HandledRequests records the last handled *-requested-at annotation per action: the action "
        "(restart, checkpoint) maps to the RFC 3339 value last handled.",
    )
    image: ImageStatus | None = Field(None, description="ImageStatus is the pinned image.")
    inputs: list[InputStatus] | None = Field(None, description="Inputs are the pinned inputs.")
    inputs_ready_time: Time | None = Field(
        None, description="InputsReadyTime is when declared inputs finished materializing."
    )
    links: list[Link] | None = Field(None, description="Links are related pages, for example W&B runs.")
    message: str | None = Field(
        None, description="Message is a scrubbed explanation (at most three log lines for a customer exit)."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="ObservedGeneration is the spec generation the status reflects."
    )
    outputs: list[OutputStatus] | None = Field(None, description="Outputs are the committed outputs.")
    phase: JobPhase | None = Field(
        None,
        description="Phase is the run-to-completion phase: Pending, Queued, Provisioning, Running, Recovering, "
        "Suspending, Suspended, or the terminal Succeeded, Failed and Cancelled.",
    )
    placement: JobPlacement | None = Field(
        None, description="JobPlacement is where the current attempt runs, in customer terms."
    )
    progress: Progress | None = Field(None, description="Progress is what the program reported.")
    reason: str | None = Field(None, description="Reason says why the Job failed, stopped for good or is suspended.")
    secret_version_ids: dict[str, str] | None = Field(
        None,
        alias="secretVersionIDs",
        description="SecretVersionIDs identify the pinned versions, which every attempt receives: a Secret deleted and "
        "recreated under the same name is a different Secret. Keys are Secret names; values are the Secrets' uids.",
    )
    secret_versions: dict[str, int] | None = Field(
        None,
        description="SecretVersions are pinned at admission; replacements reuse them. Keys are Secret names; values "
        "are versions, from 1.",
    )
    source: SourceStatus | None = Field(None, description="SourceStatus is the resolved code.")
    start_time: Time | None = Field(None, description="StartTime is the first Running.")
    stop_by_time: Time | None = Field(
        None,
        description="StopByTime is the funded edge while Funded is False: a money-driven suspend checkpoints until "
        "then and stops without the checkpoint once it passes (ADR-086).",
    )
    storage: StorageStatus | None = Field(None, description="StorageStatus is the bytes a Job owns.")
    succeeded: int | None = Field(None, ge=0, description="Succeeded is the number of indexes that succeeded.")
    suspend_failures: int | None = Field(
        None,
        ge=0,
        description="SuspendFailures counts the failed checkpoints of the current customer suspend. After the first "
        "try and two retries the Job keeps running with SuspendFailed; the count resets when spec.state leaves "
        "Suspended.",
    )
    suspended_duration: Duration | None = Field(
        None,
        description="SuspendedDuration is the time spent Suspended since timeoutStartTime; spec.timeout does not "
        "count it.",
    )
    timeout_start_time: Time | None = Field(
        None, description="TimeoutStartTime is the first Provisioning, where the spec.timeout clock starts."
    )
    timeout_time: Time | None = Field(
        None,
        description="TimeoutTime is when spec.timeout fires: timeoutStartTime plus the current spec.timeout plus "
        "suspendedDuration, so an edit to spec.timeout moves it.",
    )
    topology: Topology | None = Field(
        None, description="Topology is the resolved shape of a gang Job; it never changes across epochs."
    )
    unit_metrics: UnitMetrics | None = Field(None, description="UnitMetrics summarize per-unit timings.")
    volumes: list[VolumeStatus] | None = Field(
        None,
        description="Volumes are the Volume revisions the Job's mounts used: the pinned revision of each read-only "
        "mount, and the revision each writable mount wrote when the Job succeeded (a Nodus extension).",
    )
