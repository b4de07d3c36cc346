"""Volume (``volumes.nodus.dev``): a project's data, as immutable numbered revisions of a tar in the blob store.

The wire models of the kind: what the API server validates and what clients read, defined once.
"""

from __future__ import annotations

from pydantic import Field

from nodus.apis.v1.base import WireModel

TAR = "application/x-tar"
TAR_ZSTD = "application/vnd.nodus.tar+zstd"


class VolumeSpec(WireModel):
    """VolumeSpec describes a volume; its content is in its revisions."""

    description: str | None = Field(None, max_length=1024, description="Description says what the volume holds.")


class VolumeRevision(WireModel):
    """VolumeRevision is one immutable version of the volume's content."""

    revision: int = Field(ge=1, description="Revision is the revision's number, from 1.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA256 is the content's digest (hex).")
    size: int = Field(ge=0, description="Size is the content's size in bytes.")
    media_type: str = Field(
        min_length=1,
        max_length=255,
        description="MediaType is application/x-tar, application/vnd.nodus.tar+zstd, or a single file's type.",
    )
    filename: str | None = Field(None, max_length=255, description="Filename names a single-file revision.")
    created_time: str = Field(description="CreatedTime is when the revision was recorded.")
    source: str = Field(
        min_length=1, max_length=512, description='Source is where it came from: "upload" or "job <name> index <i>".'
    )


class VolumeStatus(WireModel):
    """VolumeStatus lists the volume's revisions, oldest first."""

    latest_revision: int = Field(0, ge=0, description="LatestRevision is the newest revision's number; 0: none.")
    revisions: list[VolumeRevision] | None = Field(None, description="Revisions are every revision, oldest first.")
