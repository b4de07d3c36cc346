"""Attempt (``attempts.nodus.dev/v1``): one run of one index of a Job (ADR 0046 §3).

Attempts are written only by Nodus: the Job controller creates them (name ``<job>-<index>-<n>``,
owned by the Job with ``controller: true``), the scheduler binds them (``status.placement``), the
provisioner assigns a node (``spec.node`` and the ``nodus.dev/node`` label agents select on), the
agent reports the run, and the node lifecycle controller marks them ``Lost``. Users may get, list
and watch them, and read their logs (``.../attempts/NAME/log``).

The spec pins everything the agent needs, copied from the Job when the Attempt is created, so that
a later edit of the Job (parallelism, timeout) never changes a run already under way.
"""

from __future__ import annotations

from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1 import phases
from nodus.apis.v1.attempt import (
    AttemptSpec,
    AttemptStatus,
)


class AttemptStrategy(Strategy):
    """Attempts are written by Nodus only; a new one starts ``Pending``."""

    def prepare_for_create(self, obj: Object) -> None:
        super().prepare_for_create(obj)
        obj["status"] = {"phase": "Pending"}

    def validate(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(AttemptSpec, obj.get("spec"), Path("spec"))
        return errors

    def validate_update(self, new: Object, old: Object) -> list[FieldError]:
        errors = self.validate(new)
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        for field in ("job", "jobUID", "index", "number"):
            if old_spec.get(field) != new_spec.get(field):
                errors.append(fieldpath.invalid(Path("spec", field), new_spec.get(field), "field is immutable"))
        return errors

    def validate_status(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(AttemptStatus, obj.get("status") or {}, Path("status"))
        return errors

    def validate_status_update(self, new: Object, old: Object) -> list[FieldError]:
        """An ended attempt's checkpoint is final: an agent cut off from the API server (its attempt already
        marked Lost and replaced) must not commit a checkpoint the replacement never restored."""
        errors = self.validate_status(new)
        old_status, new_status = old.get("status") or {}, new.get("status") or {}
        ended = old_status.get("phase") in phases.ATTEMPT_FINISHED
        if ended and _committed(new_status) != _committed(old_status):
            errors.append(
                fieldpath.invalid(
                    Path("status", "checkpoint", "manifest"),
                    _committed(new_status),
                    f"the attempt has ended ({old_status.get('phase')}); a checkpoint can no longer be committed",
                )
            )
        return errors


def _committed(status: Object) -> object:
    """What an ended attempt may not change: its checkpoint and, for a gang rank, the shards it committed."""
    checkpoint = status.get("checkpoint") or {}
    return checkpoint.get("manifest"), checkpoint.get("seq"), (status.get("gang") or {}).get("shards")


def _node(obj: Object) -> str:
    return str((obj.get("spec") or {}).get("node") or "")


ATTEMPT = KindInfo(
    kind="Attempt",
    plural="attempts",
    singular="attempt",
    namespaced=True,
    description="Attempt is one run of one index of a Job, created by the Job controller and owned by its Job. "
    "Users may get, list and watch attempts and read their logs; only Nodus writes them.",
    spec_model=AttemptSpec,
    status_model=AttemptStatus,
    strategy=AttemptStrategy(),
    printer_columns=(
        PrinterColumn("Job", "string", ".spec.job", "Job is the owning Job."),
        PrinterColumn("Index", "integer", ".spec.index", "Index is the completion index."),
        PrinterColumn("Number", "integer", ".spec.number", "Number is the attempt's number within its index."),
        PrinterColumn("Phase", "string", ".status.phase", "Phase is the attempt's phase."),
        PrinterColumn("Offering", "string", ".status.placement.offering", "Offering is where it runs."),
        PrinterColumn("Node", "string", ".spec.node", "Node is the host that runs it.", value=_node),
        PrinterColumn("Exit", "integer", ".status.exitCode", "ExitCode is the program's exit status."),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the attempt was created."),
        PrinterColumn("Reason", "string", ".status.reason", "Reason explains the phase.", priority=1),
    ),
    short_names=("att",),
    categories=("nodus",),
    selectable_fields=("status.phase",),
    user_writable=False,
    has_log=True,
)
