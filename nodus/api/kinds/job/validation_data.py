"""Cross-field rules of what a Job reads and writes: inputs, declared outputs and Volume mounts.

* An input has exactly one source among six (ADR 0046 §6). ``fromStage`` is refused: it is valid
  only in a Pipeline's stage templates, and the Pipeline rewrites it to ``output`` in the Jobs it
  creates (ADR 0052). ``fromWorkspace`` (a Workspace and a
  relative ``path`` without ``..``, checked by the model) is pinned at admission. Input names are unique.
* Output names are unique, may not be ``outputs`` (the implicit output, ADR 0046 §17), ``.`` or ``..``
  (they become file and directory names when downloaded) and may not start with the reserved ``nodus.``
  prefix.
* A Volume may not be mounted over a system path (:data:`SYSTEM_PATHS` or anything under one), a
  mount point is used once, and only a read-only mount may pin a revision.
* Every path (``outputs[].path``, ``volumes[].mountPath``, ``workingDir``, ``source.path``,
  ``recovery.checkpoint.paths``) is absolute and normalised: the model's ``AbsolutePath`` format
  (``scalars.path_problem``, ADR 0031); the rules here skip a path that format refuses.
"""

from __future__ import annotations

import posixpath

from nodus.api.kinds.job.jsonview import JSONObject, as_str, is_set, objects
from nodus.api.kinds.job.rules import duplicates, exactly_one_of
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1.scalars import path_problem

INPUT_SOURCES = ("volume", "output", "bucket", "url", "fromWorkspace", "fromStage")
IMPLICIT_OUTPUT = "outputs"
RESERVED_OUTPUT_PREFIX = "nodus."
# Mounting over these would hide the container's own system files, or (/nodus) the inputs,
# outputs, state and connections that Nodus places there.
SYSTEM_PATHS = ("/", "/proc", "/sys", "/dev", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/usr", "/boot", "/nodus")


def input_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    inputs_path = path.child("inputs")
    errors = duplicates(spec.get("inputs"), inputs_path, "name")
    for index, item in objects(spec.get("inputs")):
        item_path = inputs_path.index(index)
        errors.extend(exactly_one_of(item, item_path, INPUT_SOURCES))
        if is_set(item, "fromStage"):
            errors.append(
                fieldpath.forbidden(
                    item_path.child("fromStage"),
                    "is valid only in a Pipeline's stage templates (spec.stages[].template.spec), where it names "
                    "another stage's output (the Jobs created by a Pipeline read it as output); in a Job, name the "
                    "producing Job with output (job and name) instead",
                )
            )
    return errors


def output_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    outputs_path = path.child("outputs")
    errors = duplicates(spec.get("outputs"), outputs_path, "name")
    for index, item in objects(spec.get("outputs")):
        name = as_str(item.get("name"))
        name_path = outputs_path.index(index).child("name")
        if name == IMPLICIT_OUTPUT:
            errors.append(
                fieldpath.invalid(
                    name_path,
                    name,
                    "is reserved for the implicit output that collects everything under /nodus/outputs; "
                    "choose another name, or write the files under /nodus/outputs instead of declaring them",
                )
            )
        elif name in (".", ".."):
            errors.append(
                fieldpath.invalid(name_path, name, "names a directory when downloaded; choose a name with a letter")
            )
        elif name is not None and name.startswith(RESERVED_OUTPUT_PREFIX):
            errors.append(
                fieldpath.invalid(name_path, name, "the nodus. prefix is reserved for Nodus; choose another name")
            )
    return errors


def volume_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    volumes_path = path.child("volumes")
    errors: list[FieldError] = []
    seen: set[str] = set()
    for index, mount in objects(spec.get("volumes")):
        item_path = volumes_path.index(index)
        mount_path = as_str(mount.get("mountPath"))
        if mount_path is not None and path_problem(mount_path) is None:
            normal = _normalized(mount_path)
            refused = _system_path(normal)
            if refused is not None:
                errors.append(fieldpath.invalid(item_path.child("mountPath"), mount_path, _system_path_detail(refused)))
            elif normal in seen:
                errors.append(fieldpath.duplicate(item_path.child("mountPath"), mount_path))
            seen.add(normal)
        if is_set(mount, "revision") and mount.get("readOnly") is not True:
            errors.append(
                fieldpath.forbidden(
                    item_path.child("revision"),
                    "only a read-only mount may pin a revision (a writable mount writes a new one); "
                    "set readOnly: true or remove revision",
                )
            )
    return errors


def _normalized(mount_path: str) -> str:
    # normpath folds "a/../b" and "//"; POSIX keeps a leading "//", which names the same root here.
    return "/" + posixpath.normpath(mount_path).lstrip("/")


def _system_path(normal: str) -> str | None:
    for refused in SYSTEM_PATHS:
        if normal == refused or (refused != "/" and normal.startswith(refused + "/")):
            return refused
    return None


def _system_path_detail(refused: str) -> str:
    if refused == "/":
        why = "mounting over / would hide the whole container filesystem"
    elif refused == "/nodus":
        why = "/nodus and everything under it belong to Nodus (inputs, outputs, state and connections)"
    else:
        why = f"{refused} and everything under it hold system files that a mount would hide"
    refused_list = ", ".join(SYSTEM_PATHS)
    return f"is a system path: {why}; mount the Volume elsewhere, such as /data (refused: {refused_list})"
