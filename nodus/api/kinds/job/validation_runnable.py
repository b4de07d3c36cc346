"""What the runtime cannot run, refused at create: failures known before any capacity is bought.

A Job whose every attempt is bound to fail the same way would otherwise be placed, billed, and retried
``backoffLimit`` times before it fails (issue 16). These rules refuse it up front, each naming the field and
the fix. They follow what the local runtime does today (``nodus.agent.runtime`` and ``nodus.agent.contract``;
``tests/api/kinds/test_job_runnable.py`` checks the names against the agent's own environment):

* **An empty first word** of ``command`` (or a sidecar's) cannot be executed. A Job without ``command`` runs its
  image's ENTRYPOINT (and CMD, or ``args``), as a Kubernetes container does (ADR 0040); the bubblewrap runtime,
  which runs on the host's filesystem, refuses such an attempt with that reason.
* **A sidecar name the runtime cannot use**: it becomes a file name and part of a log stream's name.
* **An environment variable the program cannot receive**: Nodus sets ``NODUS_*``, ``JOB_COMPLETION_INDEX``
  and the visible GPUs itself, and a distributed Job's launcher sets the rendezvous variables; Nodus's
  value wins, so the Job's would be lost without a word.
* **A working directory the runtime cannot make**: it is mounted into the sandbox as a Volume is, so it may
  not be at or below a system path (``validation_data.SYSTEM_PATHS``, ``/`` included): the sandbox cannot
  create a directory below a read-only system directory, and would hide that directory if mounted over it.
  A Volume may not be mounted at the working directory itself.

They run on create only (``validation.validate_create``), never on update: a Job stored before a rule
existed can still be cancelled, suspended or given a higher cap.
"""

from __future__ import annotations

import re

from nodus.api.kinds.job.jsonview import JSONObject, as_str, is_set, objects
from nodus.api.kinds.job.validation_data import SYSTEM_PATHS
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1.scalars import path_problem

# The runtime's working directory when spec.workingDir is unset (nodus.agent.contract.DEFAULT_WORKING_DIR).
DEFAULT_WORKING_DIR = "/workspace"
# Variables Nodus sets for every program (nodus.agent.contract.environment, the checkpoint and progress
# protocols): its value wins over the Job's.
RESERVED_PREFIX = "NODUS_"
RESERVED_NAMES = frozenset({"JOB_COMPLETION_INDEX", "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"})
# What a distributed Job's launcher sets for each member (nodus.agent.launchers.environment and launch).
LAUNCHER_NAMES = frozenset({"MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "NNODES", "WORLD_SIZE", "RANK", "LOCAL_RANK"})
# A sidecar's name becomes its ready file's name and part of its log stream's (nodus.agent.runtime).
SIDECAR_NAME = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")


def runnable_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    """Every failure of the runtime that ``spec`` would meet on every attempt, each with its fix."""
    return [
        *_command_rules(spec, path),
        *_sidecar_rules(spec, path),
        *_env_rules(spec, path),
        *_working_dir_rules(spec, path),
    ]


def _command_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    return _empty_first_word(spec.get("command"), path.child("command"))


def _empty_first_word(command: object, path: Path) -> list[FieldError]:
    if isinstance(command, list) and command and command[0] == "":
        return [fieldpath.invalid(path.index(0), "", "is the program to run and may not be empty; name the program")]
    return []


def _sidecar_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, sidecar in objects(spec.get("sidecars")):
        item = path.child("sidecars").index(index)
        name = as_str(sidecar.get("name"))
        if name and not SIDECAR_NAME.fullmatch(name):
            errors.append(
                fieldpath.invalid(
                    item.child("name"),
                    name,
                    "must be lower-case letters, digits, '.', '_' or '-', start and end with a letter or digit, at "
                    "most 63 characters (it names the sidecar's ready file and log stream)",
                )
            )
        errors.extend(_empty_first_word(sidecar.get("command"), item.child("command")))
    return errors


def _env_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    distributed = is_set(spec, "distributed")
    errors: list[FieldError] = []
    for index, variable in objects(spec.get("env")):
        name = as_str(variable.get("name"))
        if name is None:
            continue
        if name.startswith(RESERVED_PREFIX) or name in RESERVED_NAMES:
            why = "Nodus sets it for every program and its value wins"
        elif distributed and name in LAUNCHER_NAMES:
            why = "the launcher of a distributed Job sets it for each member and its value wins"
        else:
            continue
        errors.append(
            fieldpath.invalid(
                path.child("env").index(index).child("name"),
                name,
                f"the program cannot receive this variable: {why}; choose another name (names starting with "
                f"{RESERVED_PREFIX} are Nodus's)",
            )
        )
    return errors


def _working_dir_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    written = as_str(spec.get("workingDir"))
    if written is not None and path_problem(written) is not None:
        return []  # the model reports it
    working_dir = written or DEFAULT_WORKING_DIR
    errors: list[FieldError] = []
    refused = _system_path(working_dir)
    if refused is not None:
        errors.append(
            fieldpath.invalid(
                path.child("workingDir"),
                working_dir,
                f"is {'/' if refused == '/' else f'at or below the system path {refused}'}: the runtime mounts the "
                "working directory into the sandbox and cannot make it there without hiding or writing system files; "
                "use a path such as /workspace or /app",
            )
        )
    for index, mount in objects(spec.get("volumes")):
        if as_str(mount.get("mountPath")) == working_dir:
            errors.append(
                fieldpath.invalid(
                    path.child("volumes").index(index).child("mountPath"),
                    working_dir,
                    f"is the working directory{'' if written else ' (the default, ' + DEFAULT_WORKING_DIR + ')'}, "
                    "which the runtime mounts itself; mount the Volume elsewhere, or set spec.workingDir to another "
                    "path",
                )
            )
    return errors


def _system_path(working_dir: str) -> str | None:
    for refused in SYSTEM_PATHS:
        if working_dir == refused or (refused != "/" and working_dir.startswith(refused + "/")):
            return refused
    return None
