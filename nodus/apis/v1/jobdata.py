"""What a Job reads and writes: inputs, declared outputs and Volume mounts.

Descriptions are the API reference's sentences, with the truncated ones completed as ADR 0046 §7
settles (``/nodus/inputs/<name>``, ``rank-<n>/``) and the input one-of widened to six choices
(ADR 0046 §6). Single-field constraints live here; uniqueness, the one-of and reserved names are
cross-field rules in ``validation_data``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from nodus.apis.v1.base import WireModel
from nodus.apis.v1.scalars import AbsolutePath, Matches, Sha256Hex

INPUT_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"
OUTPUT_NAME_PATTERN = r"^[a-z0-9._-]{1,64}$"


class BucketInput(WireModel):
    """BucketInput is an object in customer storage."""

    connection: str = Field(min_length=1, description="Connection is an S3 Connection that can read it.")
    sha256: Sha256Hex | None = Field(None, description="SHA256 is checked at end of stream when set.")
    uri: Annotated[
        str,
        Matches(
            r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/\S+$",
            "must be s3://bucket/key: a bucket of 3-63 lower-case letters, digits, dots or hyphens and a key",
        ),
    ] = Field(description="URI is s3://bucket/key.")


class StageInput(WireModel):
    """StageInput names an output of a Pipeline stage."""

    output: str = Field(min_length=1, description="Output is the output name.")
    stage: str = Field(min_length=1, description="Stage is the producing stage.")


class WorkspaceInput(WireModel):
    """WorkspaceInput mounts a Workspace home."""

    name: str = Field(min_length=1, description="Name is the Workspace.")
    path: (
        Annotated[
            str,
            Matches(r"^(?!/)(?!(.*/)?\.\.(/|$)).+$", "must be a relative path inside the home, without .."),
        ]
        | None
    ) = Field(None, description="Path is a subdirectory of the home.")


class OutputInput(WireModel):
    """OutputInput names a committed output of another Job."""

    index: int = Field(0, ge=0, description="Index selects an index of an Indexed Job (default 0).")
    job: str = Field(min_length=1, description="Job is the producing Job.")
    name: str = Field(min_length=1, description="Name is the output.")


class URLInput(WireModel):
    """URLInput is a file downloaded over HTTPS."""

    sha256: Sha256Hex | None = Field(None, description="SHA256 is the expected digest.")
    url: Annotated[
        str, Matches(r"^https://[^\s/?#]+[^\s]*$", "must be an https:// URL; plain http and other schemes are refused")
    ] = Field(description="URL is https:// only.")


class VolumeInput(WireModel):
    """VolumeInput names a Volume revision."""

    name: str = Field(min_length=1, description="Name is the Volume.")
    revision: int | None = Field(None, ge=1, description="Revision pins a revision.")


class JobInput(WireModel):
    """JobInput is one input: exactly one of volume, output, bucket, url, fromWorkspace and fromStage (fromStage only
    on Jobs created by a Pipeline). It is mounted at /nodus/inputs/<name>."""

    bucket: BucketInput | None = Field(None, description="BucketInput is an object in customer storage.")
    from_stage: StageInput | None = Field(
        None,
        description="StageInput names an output of a Pipeline stage. It is valid only on Jobs created by a Pipeline.",
    )
    from_workspace: WorkspaceInput | None = Field(None, description="WorkspaceInput mounts a Workspace home.")
    name: Annotated[
        str,
        Matches(INPUT_NAME_PATTERN, "must start with a letter and have at most 64 letters, digits and _"),
    ] = Field(description="Name matches ^[A-Za-z][A-Za-z0-9_]{0,63}$ and is unique among inputs.")
    output: OutputInput | None = Field(None, description="OutputInput names a committed output of another Job.")
    url: URLInput | None = Field(None, description="URLInput is a file downloaded over HTTPS.")
    volume: VolumeInput | None = Field(None, description="VolumeInput names a Volume revision.")


class OutputSink(WireModel):
    """OutputSink loads an output into a customer database table."""

    connection: str = Field(min_length=1, description="Connection is a Postgres, Neon or Supabase Connection.")
    mode: Literal["Append", "Replace"] = Field("Append", description="Mode is Append (default) or Replace.")
    table: str = Field(min_length=1, description="Table is the destination table.")


class JobOutput(WireModel):
    """JobOutput is a declared output."""

    from_ranks: Literal["Zero", "All"] = Field(
        "Zero", description="FromRanks is Zero (rank 0 only) or All (every rank under rank-<n>/); default Zero."
    )
    name: Annotated[
        str,
        Matches(OUTPUT_NAME_PATTERN, "must be 1-64 lower-case letters, digits, dots, underscores or hyphens"),
    ] = Field(
        description="Name matches ^[a-z0-9._-]{1,64}$; the nodus. prefix is reserved, outputs is the name of the "
        "implicit output, and names are unique."
    )
    path: AbsolutePath = Field(
        description="Path is an absolute file or directory path; directories are archived as tar.zst."
    )
    sink: OutputSink | None = Field(None, description="OutputSink loads an output into a customer database table.")


class VolumeMount(WireModel):
    """VolumeMount mounts a Volume."""

    mount_path: AbsolutePath = Field(description="MountPath is the absolute mount point; system paths are refused.")
    read_only: bool = Field(False, description="ReadOnly mounts it read-only (default false).")
    revision: int | None = Field(None, ge=1, description="Revision pins a revision; only with readOnly.")
    volume: str = Field(min_length=1, description="Volume names the Volume.")
