"""Project (``projects.nodus.dev``): members and roles; status shows credits and stored bytes.

The wire models of the kind: what the API server validates and what clients read, defined once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.apis.v1.base import Model


class ProjectMember(Model):
    """ProjectMember grants one user (or ``group:<name>``) a role in the project."""

    name: str = Field(
        min_length=1,
        max_length=256,
        description="Name is a user name, or group:<group> for every member of a group.",
    )
    role: Literal["Viewer", "Editor", "Owner"] = Field(
        description="Role is Viewer (get, list, watch), Editor (also create, update, patch, delete) or Owner "
        "(also manage the project's members)."
    )


class ProjectSpec(Model):
    """ProjectSpec describes a project."""

    display_name: str | None = Field(default=None, max_length=256, description="DisplayName is a human-readable name.")
    members: list[ProjectMember] | None = Field(
        default=None,
        max_length=1000,
        description="Members are the users and groups with a role in the project.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class ProjectCredits(Model):
    """ProjectCredits is a display copy of the project's prepaid credit in the ledger (decimal USD strings)."""

    available_usd: str | None = Field(
        default=None, alias="availableUSD", description="AvailableUSD is the credit that new holds may use."
    )
    balance_usd: str | None = Field(
        default=None, alias="balanceUSD", description="BalanceUSD is available plus held credit."
    )
    held_usd: str | None = Field(
        default=None, alias="heldUSD", description="HeldUSD is reserved for capacity that is billing."
    )


class ProjectStorage(Model):
    """ProjectStorage is a display copy of the bytes the project stores and what its storage was charged
    (ADR 0034); written by the API server's blob collector."""

    billed_bytes: int | None = Field(
        default=None,
        ge=0,
        description="BilledBytes is what the project is charged for by the GiB-hour now: the bytes no Job bills as "
        "its outputs (uploaded blobs, Volume revisions, checkpoints, outputs of deleted Jobs until collected).",
    )
    bytes: int | None = Field(
        default=None, ge=0, description="Bytes is what the project stores: its blobs, each digest once."
    )
    charged_usd: str | None = Field(
        default=None,
        alias="chargedUSD",
        description="ChargedUSD is what the project's own storage hours were charged so far (Jobs show theirs).",
    )
    owed_usd: str | None = Field(
        default=None,
        alias="owedUSD",
        description="OwedUSD is what storage hours the project's available credit could not pay add up to; they "
        "are charged as soon as it can.",
    )
    quota_bytes: int | None = Field(
        default=None, ge=0, description="QuotaBytes is the most the project may store (--project-storage-quota)."
    )


class ProjectStatus(Model):
    """ProjectStatus is what Nodus observed about a project."""

    credits: ProjectCredits | None = Field(
        default=None,
        description="Credits is a display copy of the project's prepaid credit; GET .../projects/NAME/credits reads "
        "the ledger itself.",
    )
    phase: Literal["Active", "Terminating"] | None = Field(
        default=None, description="Phase is Active, or Terminating while its contents are being deleted."
    )
    storage: ProjectStorage | None = Field(
        default=None,
        description="Storage is a display copy of what the project stores and what its storage was charged.",
    )
