# ruff: noqa: RUF001
# (Descriptions quote the API reference verbatim, typographic characters included.)
"""``JobSpec``: the desired state of a Job, and the container-level pieces it is made of.

Every property carries the API reference's sentence as its description (``kubectl explain``),
completed where ADR 0046 settles what the sentence leaves open: the cancel state is
``Cancelled`` (1), the defaults of 5 are named, ``sha256:<64 hex>`` is completed (7), image and
imageRef are exactly one of (9) and the aliases are never returned on read (10, 11). Fields the
reference leaves undescribed get a sentence in the same style, from ADR 0046 §9, §28.

The models declare types, enums, ranges, patterns, list caps and defaults. Everything that relates
two fields is a cross-field rule in the ``validation_*`` modules, which run on the same request.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from nodus.apis.v1.base import WireModel, list_map
from nodus.apis.v1.jobcapacity import Distributed, Placement, Recovery, Resources
from nodus.apis.v1.jobdata import JobInput, JobOutput, VolumeMount
from nodus.apis.v1.scalars import (
    AbsolutePath,
    DurationFormat,
    EnvName,
    Matches,
    PositiveDuration,
    PositiveUsd,
    Time,
)

MAX_OUTPUTS = 32
EgressPreset = Literal["apt", "conda", "docker-hub", "github", "huggingface", "npm", "python-packages", "pytorch"]
EgressHost = Annotated[
    str,
    Matches(
        r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        "must be a lower-case DNS name such as pypi.org, or *.suffix such as *.example.com",
    ),
]

PinnedImage = Annotated[
    str, Matches(r"^[^@\s]+@sha256:[0-9a-f]{64}$", "must be digest-pinned: name@sha256:<64 lower-case hex>")
]
BlobDigest = Annotated[
    str, Matches(r"^sha256:[0-9a-f]{64}$", "must be sha256: followed by 64 lower-case hexadecimal characters")
]
GitRepo = Annotated[
    str, Matches(r"^([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+|https://[^\s/?#]+/\S+)$", "must be owner/name or an https:// URL")
]


class SecretKeySelector(WireModel):
    """SecretKeySelector selects one key of a Secret."""

    key: str = Field(min_length=1, description="Key is the key within it.")
    name: str = Field(min_length=1, description="Name is the Secret.")


class EnvVarSource(WireModel):
    """EnvVarSource names where an env value comes from."""

    secret_key_ref: SecretKeySelector = Field(description="SecretKeySelector selects one key of a Secret.")


class EnvVar(WireModel):
    """EnvVar is one environment variable: a literal value or a Secret key."""

    name: EnvName = Field(description="Name matches ^[A-Za-z_][A-Za-z0-9_]*$.")
    value: str | None = Field(None, description="Value is the literal value.")
    value_from: EnvVarSource | None = Field(None, description="EnvVarSource names where an env value comes from.")


class InitCommand(WireModel):
    """InitCommand is a preflight run before the command."""

    command: list[str] = Field(min_length=1, description="Command is the argv.")
    timeout: Annotated[str, DurationFormat(maximum="30m", positive=True)] | None = Field(
        None, description="Timeout is at most 30m."
    )


class Sidecar(WireModel):
    """Sidecar is a helper container with native-sidecar semantics."""

    command: list[str] | None = Field(None, description="Command is the sidecar’s argv.")
    env: list[EnvVar] | None = Field(
        None, description="Env adds environment variables.", json_schema_extra=list_map("name")
    )
    image: str | None = Field(None, description="Image defaults to the Job’s image.")
    name: str = Field(min_length=1, description="Name is unique within the Job.")
    startup_timeout: PositiveDuration = Field(
        "5m", description="StartupTimeout bounds how long the sidecar may take to become ready (default 5m)."
    )


class GitSource(WireModel):
    """GitSource is a repository checkout."""

    path: AbsolutePath | None = Field(None, description="Path is the checkout path (default workingDir).")
    ref: str | None = Field(None, description="Ref is a branch, tag or commit.")
    repo: GitRepo = Field(description="Repo is owner/name or an https:// URL.")


class Source(WireModel):
    """Source is the code for the container: exactly one of git and blob."""

    blob: BlobDigest | None = Field(None, description="Blob is sha256:<64 hex> naming an uploaded blob.")
    git: GitSource | None = Field(None, description="GitSource is a repository checkout.")


class Egress(WireModel):
    """Egress is the outbound network policy."""

    allow: list[EgressHost] | None = Field(
        None,
        max_length=128,
        description="Allow lists DNS names or *.suffix patterns (AllowList only; at most 128).",
    )
    policy: Literal["Deny", "AllowList", "Open"] = Field(
        "Open", description="Policy is Deny, AllowList or Open (default Open)."
    )
    presets: list[EgressPreset] | None = Field(
        None, description="Presets add curated host lists such as python-packages or huggingface."
    )


class Network(WireModel):
    """Network sets egress for the container."""

    egress: Egress = Field(default_factory=Egress, description="Egress is the outbound network policy.")


class SecretMount(WireModel):
    """SecretMount mounts one Secret, optionally pinned to a version. The bare name is accepted on write."""

    name: str = Field(min_length=1, description="Name is the Secret.")
    version: int | None = Field(None, ge=1, description="Version pins a version; unset pins the latest at admission.")


class JobSpec(WireModel):
    """JobSpec describes a Job. Everything is immutable after create except parallelism, backoffLimit, timeout,
    maxCostUSD (raise only), recovery.maxAttempts, recovery.checkpoint.interval and retainAfterFinish,
    ttlSecondsAfterFinished and state."""

    active_deadline_seconds: int | None = Field(
        None,
        ge=1,
        description="ActiveDeadlineSeconds is accepted as an alias of timeout on write and folded into it. It is "
        "never returned on read, and a request whose activeDeadlineSeconds and timeout disagree is refused.",
    )
    args: list[str] | None = Field(None, description="Args are the arguments to the command.")
    backoff_limit: int = Field(
        6,
        ge=0,
        le=100,
        description="BackoffLimit is how many customer failures (non-zero exits, OOM) across all indexes are retried "
        "before the Job fails (0–100, default 6).",
    )
    command: list[str] | None = Field(
        None, description="Command is the argv of the container; unset runs the image’s entrypoint."
    )
    complete_by_time: Time | None = Field(
        None,
        description="CompleteByTime is a finish-by hint for placement and checkpoint cadence. It never stops the Job.",
    )
    completions: int = Field(
        1,
        ge=1,
        le=10000,
        description="Completions is how many indexes must succeed (1–10000, default 1; a distributed Job has 1). "
        "Each index gets NODUS_INDEX and JOB_COMPLETION_INDEX.",
    )
    connections: list[str] | None = Field(
        None,
        description="Connections names Connection objects whose credentials the Job may use, as files under "
        "/nodus/connections/<name>/ and as environment variables.",
    )
    distributed: Distributed | None = Field(
        None,
        description="Distributed runs the Job as a gang of nodes that start together and restart together (Beta).",
    )
    env: list[EnvVar] | None = Field(
        None, description="Env adds environment variables.", json_schema_extra=list_map("name")
    )
    expected_duration: PositiveDuration | None = Field(
        None, description="ExpectedDuration is the declared runtime the estimate uses first."
    )
    image: str | None = Field(
        None,
        min_length=1,
        description="Image is the container image reference as written. Exactly one of image and imageRef.",
    )
    image_pull_secrets: list[str] | None = Field(
        None, description="ImagePullSecrets names Secrets that hold registry credentials for the image."
    )
    image_ref: PinnedImage | None = Field(
        None,
        description="ImageRef is a digest-pinned image reference, name@sha256:<64 hex>. Exactly one of image and "
        "imageRef.",
    )
    init_command: InitCommand | None = Field(None, description="InitCommand is a preflight run before the command.")
    inputs: list[JobInput] | None = Field(
        None,
        description="Inputs are materialized read-only under /nodus/inputs/<name>.",
        json_schema_extra=list_map("name"),
    )
    max_cost_usd: PositiveUsd | None = Field(
        None,
        alias="maxCostUSD",
        description="MaxCostUSD caps what the Job may spend. Reaching it suspends the Job; it can only be raised.",
    )
    network: Network = Field(default_factory=Network, description="Network sets egress for the container.")
    outputs: list[JobOutput] | None = Field(
        None,
        max_length=MAX_OUTPUTS,
        description="Outputs are files or directories collected when an index succeeds (at most 32). Everything "
        "under /nodus/outputs is also collected as the output named “outputs”, which does not count toward the 32.",
        json_schema_extra=list_map("name"),
    )
    parallelism: int = Field(
        1,
        ge=1,
        le=256,
        description="Parallelism is how many indexes run at once (1 to min(completions, 256), default 1).",
    )
    placement: Placement = Field(default_factory=Placement, description="Placement constrains where work may run.")
    recovery: Recovery = Field(
        default_factory=Recovery, description="Recovery says how progress survives lost capacity."
    )
    resources: Resources | None = Field(
        None,
        description="Resources are capacity floors. For GPU work the offering’s host shape applies if larger.",
    )
    scaledown_window: Annotated[str, DurationFormat(minimum="0s", maximum="20m")] | None = Field(
        None,
        description="ScaledownWindow keeps the capacity warm for reuse this long after the Job ends (0s–20m).",
    )
    secrets: list[SecretMount] | None = Field(
        None,
        description="Secrets mounts Secrets, each optionally pinned to a version. The bare name is accepted on write.",
        json_schema_extra=list_map("name"),
    )
    service_account_name: str | None = Field(
        None,
        description="ServiceAccountName names a project identity whose token is mounted for calling the Nodus API "
        "from inside the Job.",
    )
    sidecars: list[Sidecar] | None = Field(
        None,
        description="Sidecars are helper containers with native-sidecar semantics.",
        json_schema_extra=list_map("name"),
    )
    source: Source | None = Field(
        None, description="Source is the code for the container: exactly one of git and blob."
    )
    state: Literal["Running", "Suspended", "Cancelled"] = Field(
        "Running",
        description="State is the desired state: Running (the default), Suspended, or Cancelled, which stops the Job "
        "for good and cannot be left.",
    )
    timeout: PositiveDuration | None = Field(
        None,
        description="Timeout is the wall-clock limit counted from the first Provisioning, excluding time spent "
        "Suspended. The Job then fails with DeadlineExceeded. Unset means no limit.",
    )
    ttl_seconds_after_finished: int | None = Field(
        None,
        ge=0,
        description="TTLSecondsAfterFinished deletes the Job, its outputs and checkpoints this long after it "
        "finishes. Unset keeps them.",
    )
    volumes: list[VolumeMount] | None = Field(
        None, description="Volumes mounts Volumes into the container.", json_schema_extra=list_map("mountPath")
    )
    working_dir: AbsolutePath | None = Field(
        None,
        description="WorkingDir is the directory the command runs in and where source is checked out "
        "(default /workspace).",
    )
