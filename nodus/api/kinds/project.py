"""Project: the tenant. It plays the role of a namespace: ``/namespaces/<project>/jobs``.

Members and their roles decide who may do what in the project (see ``nodus.api.auth``). Deleting a
project deletes everything it holds: the server puts the ``nodus.dev/project-contents`` finalizer
on every project, and the garbage collector removes the project's objects before lifting it.
"""

from __future__ import annotations

from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1 import labels
from nodus.apis.v1.project import ProjectSpec, ProjectStatus


class ProjectStrategy(Strategy):
    def prepare_for_create(self, obj: Object) -> None:
        super().prepare_for_create(obj)
        obj.setdefault("spec", {})
        finalizers = obj["metadata"].setdefault("finalizers", [])
        if labels.PROJECT_CONTENTS not in finalizers:
            finalizers.append(labels.PROJECT_CONTENTS)

    def prepare_for_update(self, new: Object, old: Object) -> None:
        super().prepare_for_update(new, old)
        # The contents finalizer may only go once the project is being deleted (the garbage
        # collector lifts it when the project is empty); otherwise deleting would strand its objects.
        had = labels.PROJECT_CONTENTS in (old["metadata"].get("finalizers") or [])
        finalizers = new["metadata"].setdefault("finalizers", [])
        if had and not old["metadata"].get("deletionTimestamp") and labels.PROJECT_CONTENTS not in finalizers:
            finalizers.append(labels.PROJECT_CONTENTS)

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
