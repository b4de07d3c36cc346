"""Volume (``volumes.nodus.dev/v1``): revisioned data in a project, mounted by Jobs.

Users create and describe a Volume (``spec.description``); its content arrives as revisions:
``POST .../volumes/{name}/revisions`` (an Editor; served by ``nodus.api.http.blobs``) stores the body
as a blob of the project and appends the next revision to ``status.revisions``. A revision
is immutable: the server only ever appends one, numbered ``latestRevision + 1`` in the same
read-modify-write (with the resourceVersion precondition) that records it. Like every status,
``status`` is otherwise written only by administrators through ``/status``.

A revision's content is a tar (``application/x-tar``), a zstd-compressed tar
(``application/vnd.nodus.tar+zstd``) or a single file (any other media type, with its ``filename``).
"""

from __future__ import annotations

from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1.volume import VolumeSpec, VolumeStatus


class VolumeStrategy(Strategy):
    """A new Volume has no revisions; revisions are numbered 1, 2, 3, ... in order."""

    def prepare_for_create(self, obj: Object) -> None:
        super().prepare_for_create(obj)
        obj.setdefault("spec", {})
        obj["status"] = {"latestRevision": 0, "revisions": []}

    def validate(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(VolumeSpec, obj.get("spec") or {}, Path("spec"))
        return errors

    def validate_status(self, obj: Object) -> list[FieldError]:
        status, errors = validate_model(VolumeStatus, obj.get("status") or {}, Path("status"))
        if status is None:
            return errors
        revisions = status.revisions or []
        for position, revision in enumerate(revisions):
            if revision.revision != position + 1:
                path = Path("status", "revisions").index(position).child("revision")
                errors.append(
                    fieldpath.invalid(path, revision.revision, f"must be {position + 1}: revisions count 1, 2, 3, ...")
                )
        if status.latest_revision != len(revisions):
            errors.append(
                fieldpath.invalid(
                    Path("status", "latestRevision"),
                    status.latest_revision,
                    f"must be {len(revisions)}, the newest revision",
                )
            )
        return errors


def _size(obj: Object) -> int | None:
    revisions = (obj.get("status") or {}).get("revisions") or []
    return revisions[-1].get("size") if revisions and isinstance(revisions[-1], dict) else None


VOLUME = KindInfo(
    kind="Volume",
    plural="volumes",
    singular="volume",
    namespaced=True,
    description="Volume is revisioned data in a project: each upload (POST .../volumes/NAME/revisions) adds an "
    "immutable revision; Jobs mount a revision read-only.",
    spec_model=VolumeSpec,
    status_model=VolumeStatus,
    strategy=VolumeStrategy(),
    printer_columns=(
        PrinterColumn("Latest", "integer", ".status.latestRevision", "LatestRevision is the newest revision."),
        PrinterColumn("Size", "integer", ".status.revisions[-1].size", "Size of the newest revision.", value=_size),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the volume was created."),
        PrinterColumn("Description", "string", ".spec.description", "Description of the volume.", priority=1),
    ),
    short_names=("vol",),
    categories=("nodus",),
)
