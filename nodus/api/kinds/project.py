"""Project: the tenant. It plays the role of a namespace: ``/namespaces/<project>/jobs``.

Members and their roles decide who may do what in the project (see ``nodus.api.auth``). Deleting a
project deletes everything it holds: the server puts the ``nodus.dev/project-contents`` finalizer
on every project, and the garbage collector removes the project's objects before lifting it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.api.kinds.modeling import Model, validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path


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


PROJECT_FINALIZER = "nodus.dev/project-contents"


class ProjectStrategy(Strategy):
    def prepare_for_create(self, obj: Object) -> None:
        super().prepare_for_create(obj)
        obj.setdefault("spec", {})
        finalizers = obj["metadata"].setdefault("finalizers", [])
        if PROJECT_FINALIZER not in finalizers:
            finalizers.append(PROJECT_FINALIZER)

    def prepare_for_update(self, new: Object, old: Object) -> None:
        super().prepare_for_update(new, old)
        # The contents finalizer may only go once the project is being deleted (the garbage
        # collector lifts it when the project is empty); otherwise deleting would strand its objects.
        had = PROJECT_FINALIZER in (old["metadata"].get("finalizers") or [])
        finalizers = new["metadata"].setdefault("finalizers", [])
        if had and not old["metadata"].get("deletionTimestamp") and PROJECT_FINALIZER not in finalizers:
            finalizers.append(PROJECT_FINALIZER)

    def validate(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(ProjectSpec, obj.get("spec", {}), Path("spec"))
        members = (obj.get("spec") or {}).get("members")
        if isinstance(members, list):
            seen: set[str] = set()
            for index, member in enumerate(members):
                name = member.get("name") if isinstance(member, dict) else None
                if isinstance(name, str):
                    if name in seen:
                        errors.append(fieldpath.duplicate(Path("spec", "members").index(index).child("name"), name))
                    seen.add(name)
        return errors

    def validate_status(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(ProjectStatus, obj.get("status", {}), Path("status"))
        return errors


def _member_count(obj: Object) -> int:
    return len((obj.get("spec") or {}).get("members") or [])


def _phase(obj: Object) -> str:
    if obj.get("metadata", {}).get("deletionTimestamp"):
        return "Terminating"
    return str((obj.get("status") or {}).get("phase") or "Active")


PROJECT = KindInfo(
    kind="Project",
    plural="projects",
    singular="project",
    namespaced=False,
    description="Project is a tenant of Nodus: it holds Jobs and the other namespaced kinds, and its members' roles "
    "decide who may read and write them. Deleting a project deletes everything it holds.",
    spec_model=ProjectSpec,
    status_model=ProjectStatus,
    strategy=ProjectStrategy(),
    printer_columns=(
        PrinterColumn("Display Name", "string", ".spec.displayName", "DisplayName is a human-readable name."),
        PrinterColumn("Members", "integer", ".spec.members", "How many members the project has.", value=_member_count),
        PrinterColumn("Phase", "string", ".status.phase", "Active or Terminating.", value=_phase),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the project was created."),
    ),
    short_names=("proj",),
    categories=("nodus",),
    dns_label_names=True,
    list_map_keys={"spec.members": ("name",)},
)
