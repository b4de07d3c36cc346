"""Validation of a Job: every problem of one request, structural and semantic, returned together.

:func:`validate_spec` runs the pydantic model over ``spec`` (types, enums, ranges, patterns, list
caps, required fields, unknown fields) and, on the same raw JSON, every cross-field rule of the
``validation_*`` modules. The two never wait for each other: a request with a wrong type in one
field and a conflict between two others gets both errors. The rules skip values of the wrong type,
so a mistake is reported once, by the model. :func:`validate_create` adds what the runtime cannot run
(``validation_runnable``: refused at create only), :func:`validate_spec_update` the update rules;
:func:`validate_status` checks a status written through ``/status``.
"""

from __future__ import annotations

from collections.abc import Callable

from nodus.api.kinds.job import validation_capacity, validation_data, validation_runnable, validation_workload
from nodus.api.kinds.job.jsonview import JSONObject, as_object, as_str
from nodus.api.kinds.job.rules import duplicates
from nodus.api.kinds.job.validation_update import update_rules
from nodus.api.kinds.modeling import validate_model
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1.jobspec import JobSpec
from nodus.apis.v1.jobstatus import JobStatus

SPEC = Path("spec")
STATUS = Path("status")

Rule = Callable[[JSONObject, Path], list[FieldError]]

SPEC_RULES: tuple[Rule, ...] = (
    validation_workload.image_rules,
    validation_workload.deadline_alias_rules,
    validation_workload.size_rules,
    validation_workload.env_rules,
    validation_workload.sidecar_rules,
    validation_workload.secret_rules,
    validation_workload.source_rules,
    validation_workload.egress_rules,
    validation_data.input_rules,
    validation_data.output_rules,
    validation_data.volume_rules,
    validation_capacity.accelerator_rules,
    validation_capacity.resource_nodes_rules,
    validation_capacity.distributed_rules,
    validation_capacity.placement_rules,
)


def validate_spec(obj: JSONObject) -> list[FieldError]:
    """Every problem with the ``spec`` of Job ``obj``, each naming its field."""
    spec = obj.get("spec")
    if spec is None:
        return [fieldpath.required(SPEC, "a Job needs a spec; set at least spec.image")]
    _, errors = validate_model(JobSpec, spec, SPEC)
    raw = as_object(spec)
    if raw is not None:
        for rule in SPEC_RULES:
            errors.extend(rule(raw, SPEC))
    return errors


def validate_create(obj: JSONObject) -> list[FieldError]:
    """Every problem with creating Job ``obj``: the spec's own rules, then what the runtime cannot run (a Job
    every attempt of which would fail the same way is refused rather than billed ``backoffLimit`` times)."""
    errors = validate_spec(obj)
    raw = as_object(obj.get("spec"))
    if raw is not None:
        errors.extend(validation_runnable.runnable_rules(raw, SPEC))
    return errors


def validate_spec_update(new: JSONObject, old: JSONObject) -> list[FieldError]:
    """Every problem with updating Job ``old`` to ``new``: the spec's own rules, then what may not change
    (given what the Job has become: a finished Job's state stays)."""
    errors = validate_spec(new)
    new_spec, old_spec = as_object(new.get("spec")), as_object(old.get("spec"))
    if new_spec is not None and old_spec is not None:
        phase = as_str((as_object(old.get("status")) or {}).get("phase"))
        errors.extend(update_rules(new_spec, old_spec, SPEC, phase=phase))
    return errors


def validate_status(obj: JSONObject) -> list[FieldError]:
    """Every problem with the ``status`` of Job ``obj``; an absent status is valid."""
    status = obj.get("status")
    if status is None:
        return []
    _, errors = validate_model(JobStatus, status, STATUS)
    raw = as_object(status)
    if raw is not None:
        errors.extend(duplicates(raw.get("conditions"), STATUS.child("conditions"), "type"))
    return errors
