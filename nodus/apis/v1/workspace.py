"""Workspace (``workspaces.nodus.dev``): a project's home directory tree, as immutable numbered revisions.

The wire models of the kind: what the API server validates and what clients read, defined once.

A revision's content is one blob of the project: a workspace manifest (:data:`MANIFEST`, the checkpoint
manifest format of ``nodus.agent.manifests`` with the single root :data:`ROOT`, whose files are
content-addressed chunks uploaded beside it), or a Job's committed output (a tar, or a single file) recorded
as it is, by digest, with no bytes copied.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.apis.v1.base import WireModel

MANIFEST = "application/vnd.nodus.checkpoint.manifest+json"
"""The media type of a pushed revision: a manifest naming the tree's chunks (the checkpoint manifest's)."""

ROOT = "/workspace"
"""The single root of a workspace manifest: every entry's path is ``/workspace`` or below it."""

RECENT_REVISIONS = 50
"""How many revisions ``status.revisions`` keeps (the newest); older ones are no longer pullable or billed."""

SourceType = Literal["Push", "Output"]


class WorkspaceSpec(WireModel):
    """WorkspaceSpec describes a workspace; its content is in its revisions."""

    description: str | None = Field(None, max_length=1024, description="Description says what the home holds.")


class WorkspaceRevision(WireModel):
    """WorkspaceRevision is one immutable version of the home."""

    revision: int = Field(ge=1, description="Revision is the revision's number, from 1.")
    digest: str = Field(
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="Digest is the revision's blob (sha256:<hex>): a manifest, or a Job's output.",
    )
    media_type: str = Field(
        min_length=1,
        max_length=255,
        description="MediaType is the blob's: the workspace manifest's for a push, the output's otherwise.",
    )
    size: int = Field(ge=0, description="Size is the bytes of the tree's files (an output's blob size).")
    files: int | None = Field(None, ge=0, description="Files is the count of regular files (unknown for outputs).")
    created_time: str = Field(description="CreatedTime is when the revision was recorded.")
    source: SourceType = Field(description="Source is Push (nodus workspaces push DIR) or Output (--from-output).")
    output: str | None = Field(
        None, max_length=512, description="Output names the Job output it came from, as JOB/OUTPUT."
    )


class WorkspaceStatus(WireModel):
    """WorkspaceStatus summarises the home and lists its recent revisions, oldest first."""

    latest_revision: int = Field(0, ge=0, description="LatestRevision is the newest revision's number; 0: none.")
    size: int = Field(0, ge=0, description="Size is the newest revision's bytes.")
    files: int | None = Field(None, ge=0, description="Files is the newest revision's regular files.")
    last_change_time: str | None = Field(None, description="LastChangeTime is when the newest revision was made.")
    revisions: list[WorkspaceRevision] | None = Field(
        None, description=f"Revisions are the {RECENT_REVISIONS} newest revisions, oldest first."
    )
