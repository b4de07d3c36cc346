"""Attempt (``attempts.nodus.dev``): one run of one Job index on one node, as the API server validates it and
clients read it. The spec pins what the agent needs; the status is the agent's and the controllers' report.

The wire models of the kind: what the API server validates and what clients read, defined once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.apis.v1.attemptgang import AttemptGangSpec, AttemptGangStatus
from nodus.apis.v1.base import WireModel
from nodus.apis.v1.jobcapacity import Placement, Recovery, Resources
from nodus.apis.v1.jobcost import Cost
from nodus.apis.v1.jobdata import JobOutput
from nodus.apis.v1.jobspec import EnvVar, InitCommand, Network, Sidecar
from nodus.apis.v1.jobstatus import (
    ImageStatus,
    InputStatus,
    OutputStatus,
    Progress,
    SourceStatus,
    UnitMetrics,
    VolumeStatus,
)
from nodus.apis.v1.phases import AttemptPhase
from nodus.apis.v1.scalars import Duration, Time


class StopRequest(WireModel):
    """StopRequest asks the agent to stop the attempt: SIGTERM, then SIGKILL after the grace period."""

    grace_period_seconds: int = Field(30, ge=0, le=3600, description="GracePeriodSeconds is the wait before SIGKILL.")
    reason: str = Field(min_length=1, description="Reason is why it stops: Suspended, Cancelled, Deleted, Restart, ...")
    requested_time: str | None = Field(None, description="RequestedTime is when the stop was asked for.")
    checkpoint: bool | None = Field(
        None,
        description="Checkpoint asks for a checkpoint before the stop (a suspend of a Checkpointed Job); a failed "
        "one is retried twice, then the attempt keeps running and says so (status.checkpoint.stopFailures).",
    )
    deadline: Time | None = Field(
        None,
        description="Deadline is when the attempt stops even without its checkpoint (a suspend, a money-driven stop).",
    )


class CheckpointRef(WireModel):
    """CheckpointRef names a committed checkpoint: its sequence number and its manifest blob."""

    attempt: str | None = Field(None, description="Attempt is the attempt that committed it.")
    manifest: str = Field(
        pattern=r"^sha256:[0-9a-f]{64}$", description="Manifest is the sha256:<hex> blob listing every part."
    )
    seq: int = Field(ge=1, description="Seq is its sequence number within the index.")
    size: int | None = Field(None, ge=0, description="Size is its size in bytes.")
    time: Time | None = Field(None, description="Time is when it committed.")


class PinnedSecret(WireModel):
    """PinnedSecret is one Secret at the version the Job pinned; uid tells a recreated Secret apart."""

    name: str = Field(min_length=1, description="Name is the Secret.")
    uid: str = Field(min_length=1, description="UID is the Secret's uid when it was pinned.")
    version: int = Field(ge=1, description="Version is the pinned version.")


class BucketObject(WireModel):
    """BucketObject names an object behind an S3 Connection."""

    connection: str = Field(min_length=1, description="Connection is the S3 Connection.")
    uri: str = Field(min_length=1, description="URI is s3://bucket/key.")


class PinnedWorkspace(WireModel):
    """PinnedWorkspace is the Workspace revision a fromWorkspace input mounts, and the subdirectory of it."""

    name: str = Field(min_length=1, description="Name is the Workspace.")
    path: str | None = Field(None, description="Path is the subdirectory mounted (none: the whole home).")
    revision: int = Field(ge=1, description="Revision is the pinned revision.")


class PinnedInput(WireModel):
    """PinnedInput is one input as the agent fetches it: exactly one of url, bucket and blob."""

    blob: str | None = Field(None, description="Blob is the sha256:<hex> blob of an output or Volume revision.")
    bucket: BucketObject | None = Field(None, description="Bucket is an object behind an S3 Connection.")
    name: str = Field(min_length=1, description="Name is the input, materialised at /nodus/inputs/<name>.")
    sha256: str | None = Field(None, description="SHA256 is the digest the content must have, when pinned.")
    url: str | None = Field(None, description="URL is an https:// file.")
    workspace: PinnedWorkspace | None = Field(
        None, description="Workspace says the blob is a Workspace revision, of which one subdirectory is mounted."
    )


class PinnedVolume(WireModel):
    """PinnedVolume is one Volume mount: read-only at a pinned revision, or writable from the latest."""

    blob: str | None = Field(None, description="Blob is the revision's sha256:<hex> blob (none: empty).")
    mount_path: str = Field(min_length=1, description="MountPath is where it is mounted.")
    read_only: bool = Field(False, description="ReadOnly mounts it read-only.")
    revision: int | None = Field(None, ge=1, description="Revision is the revision mounted (or written from).")
    volume: str = Field(min_length=1, description="Volume is the Volume's name.")


class ConnectionSecret(WireModel):
    """ConnectionSecret names the Secret (and key) holding a Connection's credentials."""

    key: str | None = Field(None, description="Key is the Secret key holding the DSN (Postgres).")
    name: str = Field(description="Name is the Secret.")


class PinnedConnection(WireModel):
    """PinnedConnection is a Connection as the Job uses it; its Secret is pinned with the others."""

    exposed: bool | None = Field(
        None, description="Exposed gives its credentials to the program (it is in the Job's spec.connections)."
    )
    name: str = Field(min_length=1, description="Name is the Connection.")
    s3: dict[str, str] | None = Field(None, description="S3 holds endpoint, region and bucket.")
    secret: ConnectionSecret | None = Field(None, description="Secret holds the credentials.")
    type: str = Field(min_length=1, description="Type is S3, Postgres, Neon or Supabase.")


class AttemptSourceGit(WireModel):
    """AttemptSourceGit is the repository and the ref (the pinned commit once resolved)."""

    ref: str = Field("", description="Ref is a branch, tag or commit; the pinned commit once resolved.")
    repo: str = Field(min_length=1, description="Repo is owner/name or an https:// URL.")


class AttemptSource(WireModel):
    """AttemptSource is the code to check out before initCommand: git or blob, at path."""

    blob: str | None = Field(None, description="Blob is the sha256:<hex> blob to unpack.")
    git: AttemptSourceGit | None = Field(None, description="Git is the repository to check out.")
    path: str = Field(min_length=1, description="Path is where the code goes (default workingDir).")


class AttemptSpec(WireModel):
    """AttemptSpec pins one run of one index: what to run, under which constraints, and where."""

    args: list[str] | None = Field(None, description="Args are the arguments to the command.")
    avoid_offerings: list[str] | None = Field(
        None,
        description="AvoidOfferings are taken only when no other offering fits: the one that just preempted the "
        "index's previous attempt, so that its replacement moves to other capacity when the placement allows.",
    )
    command: list[str] | None = Field(None, description="Command is the argv (the Job's command).")
    checkpoint_request: str | None = Field(
        None,
        description="CheckpointRequest is the Job's nodus.dev/checkpoint-requested-at value the agent honours: a "
        "new value takes a checkpoint now.",
    )
    connections: list[PinnedConnection] | None = Field(None, description="Connections are the Job's, resolved.")
    complete_by_time: Time | None = Field(
        None, description="CompleteByTime is the Job's; the auto checkpoint interval shortens as it nears."
    )
    env: list[EnvVar] | None = Field(None, description="Env is the Job's environment (Secret references, not values).")
    expected_duration: str | None = Field(None, description="ExpectedDuration is the Job's, for placement.")
    gang: AttemptGangSpec | None = Field(None, description="Gang is the epoch this rank belongs to (distributed Jobs).")
    image: str | None = Field(
        None,
        description="Image is the Job's image reference, at the digest the Job pinned once an agent resolved it "
        "(name:tag@sha256:...): every attempt after the first runs that digest.",
    )
    image_pull_secrets: list[str] | None = Field(
        None, description="ImagePullSecrets name the Secrets whose registry credentials pull the image."
    )
    index: int = Field(ge=0, description="Index is the completion index this attempt runs.")
    init_command: InitCommand | None = Field(None, description="InitCommand runs before the command.")
    inputs: list[PinnedInput] | None = Field(None, description="Inputs are the pinned inputs.")
    job: str = Field(min_length=1, description="Job is the owning Job's name.")
    job_uid: str = Field(alias="jobUID", min_length=1, description="JobUID is the owning Job's uid.")
    network: Network | None = Field(None, description="Network is the Job's egress policy.")
    node: str | None = Field(None, description="Node is the host that runs it, set once capacity is assigned.")
    number: int = Field(ge=1, description="Number is the attempt's number within its index, from 1 (all causes).")
    offering: str | None = Field(None, description="Offering is the offering its host provides.")
    outputs: list[JobOutput] | None = Field(None, description="Outputs are the Job's declared outputs.")
    placement: Placement | None = Field(None, description="Placement is the Job's placement, copied.")
    rank: int | None = Field(None, ge=0, description="Rank is the node rank within the gang (distributed Jobs).")
    recovery: Recovery | None = Field(
        None, description="Recovery is the Job's recovery policy (interval follows edits of the Job)."
    )
    resources: Resources | None = Field(None, description="Resources are the Job's resources, copied.")
    restore: CheckpointRef | None = Field(
        None, description="Restore is the checkpoint the agent restores before the program starts (Checkpointed)."
    )
    resume_cursor: str | None = Field(
        None,
        max_length=4096,
        description="ResumeCursor is the last progress cursor of the index's earlier attempts (Restartable), given "
        "to the program as NODUS_RESUME_CURSOR.",
    )
    scaledown_window: str | None = Field(None, description="ScaledownWindow keeps the host warm after the Job ends.")
    secrets: list[PinnedSecret] | None = Field(None, description="Secrets are the pinned Secrets (never values).")
    sidecars: list[Sidecar] | None = Field(None, description="Sidecars are the Job's sidecars.")
    source: AttemptSource | None = Field(None, description="Source is the code to check out.")
    stop: StopRequest | None = Field(None, description="Stop asks the agent to stop the attempt.")
    volumes: list[PinnedVolume] | None = Field(None, description="Volumes are the pinned Volume mounts.")
    working_dir: str | None = Field(None, description="WorkingDir is the directory the command starts in.")


class AttemptPlacement(WireModel):
    """AttemptPlacement is the scheduler's decision, with its explanation: an offering (on a new or a warm host),
    or a host of the Job's Pool (``pool`` and ``node``, provider ``pool``, no offering)."""

    cycle: int | None = Field(None, ge=0, description="Cycle is the scheduler cycle that decided.")
    explain: str | None = Field(None, description="Explain says why this offering and why the others were rejected.")
    gpu_indexes: list[int] | None = Field(
        None,
        alias="gpuIndexes",
        description="GPUIndexes are the GPU ordinals of the host given to this attempt when it shares the host; "
        "absent: the whole host.",
    )
    interruptible: bool | None = Field(None, description="Interruptible is true on reclaimable capacity.")
    node: str | None = Field(None, description="Node is a warm host chosen for reuse, or the pool host, if any.")
    offering: str | None = Field(None, description="Offering is the chosen offering id (absent on a pool host).")
    pool: str | None = Field(None, description="Pool is the Pool of the Job's project whose host runs it.")
    provider: str | None = Field(None, description="Provider is the offering's provider, or pool on a pool host.")
    region: str | None = Field(None, description="Region is the offering's provider region.")
    rate_usd_per_hour: str | None = Field(None, alias="rateUSDPerHour", description="RateUSDPerHour is the rate.")
    region_class: str | None = Field(None, description="RegionClass is the offering's region class.")
    warm_reuse: bool | None = Field(None, description="WarmReuse is true when a warm host was reused.")


class AttemptRuntime(WireModel):
    """AttemptRuntime says how the agent ran the command."""

    image: str | None = Field(
        None,
        description="Image says what became of the image: pulled (and how long it took), cached on this host, or "
        "recorded, not pulled (the bubblewrap runtime runs on the host's filesystem).",
    )
    sandbox: str | None = Field(None, description="Sandbox is the runtime: podman, bubblewrap or unsandboxed.")


class CheckpointFailure(WireModel):
    """CheckpointFailure is the latest checkpoint that did not commit."""

    message: str = Field(description="Message says what failed.")
    reason: str = Field(description="Reason is a CamelCase code: CheckpointTooLarge, CheckpointUploadFailed, ...")
    time: Time = Field(description="Time is when it failed.")


class AttemptCheckpoint(WireModel):
    """AttemptCheckpoint is the agent's account of this attempt's checkpoints: the latest committed one and how
    the cadence runs. A checkpoint is committed when this status names its manifest."""

    consistency: Literal["Application", "Crash"] | None = Field(
        None,
        description="Consistency is Application when the program acknowledged the request and Crash for a "
        "snapshot taken with the program paused.",
    )
    failures: int | None = Field(None, ge=0, description="Failures counts checkpoints that failed in a row.")
    handled_request: str | None = Field(
        None, description="HandledRequest is the last spec.checkpointRequest a checkpoint was taken for."
    )
    interval: Duration | None = Field(None, description="Interval is the cadence in use.")
    last_failure: CheckpointFailure | None = Field(None, description="LastFailure is the latest failed checkpoint.")
    manifest: str | None = Field(
        None, pattern=r"^sha256:[0-9a-f]{64}$", description="Manifest is the committed checkpoint's manifest blob."
    )
    pause_seconds: str | None = Field(
        None, description="PauseSeconds is how long the program waited for the latest checkpoint (decimal)."
    )
    restored_from_seq: int | None = Field(
        None, ge=1, description="RestoredFromSeq is the checkpoint this attempt restored before it started."
    )
    seq: int | None = Field(None, ge=1, description="Seq is the latest committed checkpoint's sequence number.")
    size: int | None = Field(None, ge=0, description="Size is its size in bytes.")
    stop_failures: int | None = Field(
        None, ge=0, description="StopFailures counts failed checkpoints of the current stop request (at most 3)."
    )
    time: Time | None = Field(None, description="Time is when it committed.")
    uploaded_bytes: int | None = Field(
        None, ge=0, description="UploadedBytes is what the latest checkpoint sent (unchanged parts are not re-sent)."
    )


class AttemptStatus(WireModel):
    """AttemptStatus is what Nodus observed about one run."""

    checkpoint: AttemptCheckpoint | None = Field(None, description="Checkpoint is the latest committed checkpoint.")
    cost: Cost | None = Field(None, description="Cost is a display copy of the ledger for this allocation.")
    exit_code: int | None = Field(None, description="ExitCode is the program's exit status.")
    finish_time: str | None = Field(None, description="FinishTime is when it reached a terminal phase.")
    gang: AttemptGangStatus | None = Field(None, description="Gang is this rank's part of its gang's assembly.")
    gpu_indexes: list[int] | None = Field(None, alias="gpuIndexes", description="GPUIndexes are the visible GPUs.")
    image: ImageStatus | None = Field(
        None, description="Image is the image this attempt ran: reference, the registry's digest and the user."
    )
    inputs: list[InputStatus] | None = Field(None, description="Inputs are the inputs with their verified digests.")
    inputs_ready_time: str | None = Field(None, description="InputsReadyTime is when the inputs were in place.")
    message: str | None = Field(None, description="Message explains the phase (at most three log lines on failure).")
    phase: AttemptPhase | None = Field(
        None, description="Phase is Pending, Provisioning, Starting, Running, Succeeded, Failed, Lost or Stopped."
    )
    outputs: list[OutputStatus] | None = Field(None, description="Outputs are the outputs it committed.")
    placement: AttemptPlacement | None = Field(None, description="Placement is the scheduler's decision.")
    progress: Progress | None = Field(None, description="Progress is what the program reported.")
    provisioning_time: str | None = Field(None, description="ProvisioningTime is when capacity was assigned.")
    reason: str | None = Field(None, description="Reason is a CamelCase code for the phase.")
    resume_cursor: str | None = Field(
        None, max_length=4096, description="ResumeCursor is the program's last reported progress cursor."
    )
    runtime: AttemptRuntime | None = Field(None, description="Runtime says how the command ran.")
    scheduled_time: str | None = Field(None, description="ScheduledTime is when the scheduler placed it.")
    signal: int | None = Field(None, description="Signal is the signal that ended the program, if any.")
    source: SourceStatus | None = Field(None, description="Source is the code it checked out.")
    start_time: str | None = Field(None, description="StartTime is when the program started running.")
    stop_by_time: str | None = Field(
        None,
        description="StopByTime is when a running attempt whose hold could not be extended stops for lack of "
        "funds (its funded edge); absent while it is funded.",
    )
    unit_metrics: UnitMetrics | None = Field(None, description="UnitMetrics summarize its per-unit timings.")
    volumes: list[VolumeStatus] | None = Field(None, description="Volumes are the revisions writable mounts wrote.")
