"""Workspace (``workspaces.nodus.dev/v1``): a project's home directory tree, revisioned, mounted by Jobs.

Users create and describe a Workspace (``spec.description``); its content arrives as revisions through
``POST .../workspaces/{name}/revisions`` (an Editor; served by ``nodus.api.http.workspaces``), which names
either a manifest blob already uploaded (``nodus workspaces push``: the files travel as content-addressed
chunks first, only those the project lacks) or a Job's committed output (``--from-output``: nothing is
copied). As with Volumes, a revision is immutable and the server only ever appends one, numbered
``latestRevision + 1``, in the read-modify-write that records it; ``status`` is otherwise written only by
administrators through ``/status``.

``status.revisions`` keeps the :data:`~nodus.apis.v1.workspace.RECENT_REVISIONS` newest: what they name is
kept in the blob store and billed as the project's storage (the collector sees every digest a Workspace
names, and the chunks of the manifests among them); an older revision's blobs are collected once nothing
else names them. A Job that pinned a revision names its blob in its own status, so a running Job keeps its
revision even when it has left the Workspace's list.
"""

from __future__ import annotations

from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1.workspace import RECENT_REVISIONS, WorkspaceSpec, WorkspaceStatus


class WorkspaceStrategy(Strategy):
    """A new Workspace has no revisions; recorded revisions are numbered upwards, the newest last."""

    def prepare_for_create(self, obj: Object) -> None:
        super().prepare_for_create(obj)
        obj.setdefault("spec", {})
        obj["status"] = {"latestRevision": 0, "size": 0, "revisions": []}

    def validate(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(WorkspaceSpec, obj.get("spec") or {}, Path("spec"))
        return errors

    def validate_status(self, obj: Object) -> list[FieldError]:
        status, errors = validate_model(WorkspaceStatus, obj.get("status") or {}, Path("status"))
        if status is None:
            return errors
        revisions = status.revisions or []
        if len(revisions) > RECENT_REVISIONS:
            errors.append(fieldpath.too_many(Path("status", "revisions"), len(revisions), RECENT_REVISIONS))
        for position in range(1, len(revisions)):
            if revisions[position].revision != revisions[position - 1].revision + 1:
                path = Path("status", "revisions").index(position).child("revision")
                errors.append(
                    fieldpath.invalid(
                        path,
                        revisions[position].revision,
                        f"must be {revisions[position - 1].revision + 1}: revisions are consecutive, oldest first",
                    )
                )
        newest = revisions[-1].revision if revisions else 0
        if status.latest_revision != newest:
            errors.append(
                fieldpath.invalid(
                    Path("status", "latestRevision"), status.latest_revision, f"must be {newest}, the newest revision"
                )
            )
        return errors


WORKSPACE = KindInfo(
    kind="Workspace",
    plural="workspaces",
    singular="workspace",
    namespaced=True,
    description="Workspace is a project's home directory tree: each push (nodus workspaces push NAME DIR) or Job "
    "output (--from-output JOB/OUTPUT) adds an immutable revision; Jobs mount a subdirectory of the latest "
    "read-only (inputs[].fromWorkspace), pinned at admission.",
    spec_model=WorkspaceSpec,
    status_model=WorkspaceStatus,
    strategy=WorkspaceStrategy(),
    printer_columns=(
        PrinterColumn("Revision", "integer", ".status.latestRevision", "LatestRevision is the newest revision."),
        PrinterColumn("Size", "integer", ".status.size", "Size of the newest revision in bytes."),
        PrinterColumn("Files", "integer", ".status.files", "Regular files in the newest revision."),
        PrinterColumn("Last Change", "date", ".status.lastChangeTime", "Time since the newest revision."),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the workspace was created."),
        PrinterColumn("Description", "string", ".spec.description", "Description of the workspace.", priority=1),
    ),
    short_names=("ws",),
    categories=("nodus",),
)
