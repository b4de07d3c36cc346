"""Pipeline (``pipelines.nodus.dev/v1``): a graph of stages, each a Job template, run in dependency order.

``spec.stages[]`` names each stage, its Job template (``metadata.labels/annotations`` and a whole Job
``spec``), the stages it waits for (``dependsOn``) and whether a failure stops the Pipeline
(``continueOnFailure``). An input ``fromStage: {stage, output}`` reads an output of an earlier stage
and adds that edge. The Pipeline controller (``nodus.controllers.pipelines``) creates the stages' Jobs
and writes ``status``; ``spec.state`` (Running, Suspended, Cancelled) cascades to them; deleting the
Pipeline deletes its Jobs (they name it as their controlling owner, ADR 0005).

Validation at create returns every problem at once, as field errors: stage names are unique DNS
labels, ``dependsOn`` and ``fromStage`` name stages that exist, ``fromStage.output`` is an output the
producing stage's template declares (or ``outputs``, the implicit one), the graph is acyclic (the
cycle is named), and each template's spec is a valid Job spec: the Job kind's own rules run on the
spec the stage's Job will have (``fromStage`` rewritten, :func:`nodus.apis.v1.stagegraph.stage_job_spec`),
with every error's path under ``spec.stages[i].template.spec``. The stages are fixed at create; an
update may change ``state`` (not out of Cancelled) and ``maxCostUSD``, and ask for a re-run of a finished
run: a new ``nodus.dev/rerun-requested-at`` with ``nodus.dev/rerun-from`` naming a stage
(``nodus.controllers.pipelineruns``).
"""

from __future__ import annotations

from typing import Any

from nodus.api import objectmeta
from nodus.api.kinds import destinationrules
from nodus.api.kinds.job import aliases, defaults, validation, validation_runnable
from nodus.api.kinds.job.jsonview import JSONObject, as_object, as_str, objects
from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath, money, units
from nodus.apimachinery.destinations import Policy
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1 import labels, stagegraph
from nodus.apis.v1.pipeline import PipelineSpec, PipelineStatus

SPEC = Path("spec")
ANNOTATIONS = Path("metadata", "annotations")
STAGES = SPEC.child("stages")
IMPLICIT_OUTPUT = "outputs"
MAX_JOB_NAME = 253


class PipelineStrategy(Strategy):
    """A Pipeline's templates are canonicalised and defaulted as a Job's spec is; status is the controller's."""

    def __init__(self, destinations: Policy | None = None) -> None:
        self.destinations = destinations or Policy()

    def prepare_for_create(self, obj: Object) -> None:
        super().prepare_for_create(obj)
        _canonicalize(obj)
        obj["status"] = {"phase": "Pending"}

    def prepare_for_update(self, new: Object, old: Object) -> None:
        super().prepare_for_update(new, old)
        _canonicalize(new)

    def validate(self, obj: Object) -> list[FieldError]:
        problems = _validate_spec(obj)
        if labels.RERUN_REQUESTED_AT in _annotations(obj):
            problems.append(
                fieldpath.forbidden(
                    ANNOTATIONS.key(labels.RERUN_REQUESTED_AT),
                    "asks to re-run a finished run; set it once this one ends",
                )
            )
        name = str((obj.get("metadata") or {}).get("name") or "")
        raw = as_object(obj.get("spec")) or {}
        for index, stage in objects(raw.get("stages")):
            template_spec = as_object((as_object(stage.get("template")) or {}).get("spec"))
            stage_name = as_str(stage.get("name"))
            at = STAGES.index(index)
            if stage_name is not None and len(stagegraph.job_name(name, stage_name)) > MAX_JOB_NAME:
                problems.append(
                    fieldpath.invalid(
                        at.child("name"),
                        stage_name,
                        f"the stage's Job {name}-{stage_name} would be longer than {MAX_JOB_NAME} characters; "
                        "shorten the Pipeline's or the stage's name",
                    )
                )
            if template_spec is not None:
                job_spec = stagegraph.stage_job_spec(name, template_spec)
                spec_path = at.child("template", "spec")
                for rule in validation.SPEC_RULES:
                    problems.extend(rule(job_spec, spec_path))
                problems.extend(validation_runnable.runnable_rules(job_spec, spec_path))
                problems.extend(destinationrules.job_rules({"spec": job_spec}, self.destinations, spec_path))
            metadata = as_object((as_object(stage.get("template")) or {}).get("metadata")) or {}
            if metadata.get("labels") is not None:
                problems.extend(
                    objectmeta.validate_labels(metadata["labels"], at.child("template", "metadata", "labels"))
                )
        return problems

    def validate_update(self, new: Object, old: Object) -> list[FieldError]:
        problems = _validate_spec(new)
        new_spec, old_spec = as_object(new.get("spec")) or {}, as_object(old.get("spec")) or {}
        if new_spec.get("stages") != old_spec.get("stages"):
            problems.append(
                fieldpath.forbidden(
                    STAGES,
                    "is fixed once the Pipeline is created (its stage Jobs are made from it); create a new Pipeline "
                    "to run other stages",
                )
            )
        problems.extend(_rerun_rules(new, old))
        if old_spec.get("state") == "Cancelled" and new_spec.get("state") != "Cancelled":
            problems.append(
                fieldpath.invalid(
                    SPEC.child("state"),
                    new_spec.get("state"),
                    "a Cancelled Pipeline stays Cancelled (its stage Jobs were cancelled); create a new Pipeline",
                )
            )
        return problems

    def validate_status(self, obj: Object) -> list[FieldError]:
        _, problems = validate_model(PipelineStatus, obj.get("status") or {}, Path("status"))
        return problems


def _annotations(obj: Object) -> dict[str, Any]:
    return as_object((as_object(obj.get("metadata")) or {}).get("annotations")) or {}


def _rerun_rules(new: Object, old: Object) -> list[FieldError]:
    """A new ``nodus.dev/rerun-requested-at`` needs ``nodus.dev/rerun-from`` naming a stage, and a finished run."""
    requested = _annotations(new).get(labels.RERUN_REQUESTED_AT)
    if requested is None or requested == _annotations(old).get(labels.RERUN_REQUESTED_AT):
        return []
    problems: list[FieldError] = []
    stages = [as_str(s.get("name")) for _, s in objects((as_object(new.get("spec")) or {}).get("stages"))]
    wanted = _annotations(new).get(labels.RERUN_FROM)
    if wanted not in stages:
        problems.append(
            fieldpath.invalid(
                ANNOTATIONS.key(labels.RERUN_FROM),
                wanted,
                f"must name the stage to re-run from (it and the stages after it run again); the stages are "
                f"{', '.join(s for s in stages if s)}",
            )
        )
    phase = (as_object(old.get("status")) or {}).get("phase")
    if phase not in ("Succeeded", "Failed"):
        problems.append(
            fieldpath.forbidden(
                ANNOTATIONS.key(labels.RERUN_REQUESTED_AT),
                f"the Pipeline is {phase}: a re-run starts from a finished run (Succeeded or Failed); wait for it "
                "to finish",
            )
        )
    return problems


def _canonicalize(obj: Object) -> None:
    """Fold each template's aliases and write its defaults, as the Job kind does on create, so the stored
    template shows what its Job will run and validation sees a canonical spec."""
    spec = as_object(obj.get("spec"))
    if spec is None:
        return
    spec.setdefault("state", "Running")
    for _, stage in objects(spec.get("stages")):
        template_spec = as_object((as_object(stage.get("template")) or {}).get("spec"))
        if template_spec is not None:
            aliases.canonicalize(template_spec)
            defaults.apply_defaults(template_spec)


def _validate_spec(obj: Object) -> list[FieldError]:
    _, problems = validate_model(PipelineSpec, obj.get("spec"), SPEC)
    raw = as_object(obj.get("spec"))
    if raw is not None:
        problems.extend(graph_rules(raw))
    return problems


def graph_rules(spec: JSONObject) -> list[FieldError]:
    """Names unique DNS labels, edges to stages that exist, ``fromStage`` outputs declared, no cycle."""
    stages = list(objects(spec.get("stages")))
    declared, problems = _stage_names(stages)
    edges: dict[str, list[str]] = {}
    for index, stage in stages:
        name = as_str(stage.get("name"))
        at = STAGES.index(index)
        waits_for, depends_problems = _depends_on_edges(stage, name, at, declared)
        reads_from, input_problems = _from_stage_edges(stage, name, at, declared)
        problems.extend(depends_problems)
        problems.extend(input_problems)
        if name is not None and name not in edges:
            edges[name] = list(dict.fromkeys(waits_for + reads_from))
    cycle = stagegraph.find_cycle(edges)
    if cycle is not None:
        problems.append(
            fieldpath.invalid(
                STAGES,
                " -> ".join(cycle),
                "the stages wait for each other in a cycle, so none of them could start; remove one of these "
                "dependsOn or fromStage edges",
            )
        )
    return problems


def _stage_names(stages: list[tuple[int, JSONObject]]) -> tuple[dict[str, set[str]], list[FieldError]]:
    """The outputs each stage name declares (its template's ``spec.outputs`` and ``outputs``, the implicit
    one), and the problems with the names: not a DNS label, or a duplicate (only the first stage of a name
    declares). Stages without a name are skipped."""
    problems: list[FieldError] = []
    declared: dict[str, set[str]] = {}
    for index, stage in stages:
        name = as_str(stage.get("name"))
        if name is None:
            continue
        at = STAGES.index(index).child("name")
        if name in declared:
            problems.append(fieldpath.duplicate(at, name))
            continue
        problems.extend(objectmeta.validate_name(name, at, dns_label=True))
        outputs = (as_object((as_object(stage.get("template")) or {}).get("spec")) or {}).get("outputs")
        declared[name] = {IMPLICIT_OUTPUT} | {str(o.get("name")) for _, o in objects(outputs)}
    return declared, problems


def _depends_on_edges(
    stage: JSONObject, name: str | None, at: Path, declared: dict[str, set[str]]
) -> tuple[list[str], list[FieldError]]:
    """The stages that ``stage`` (named ``name``, at ``at``) waits for by ``dependsOn``, in order, and the
    problems with them: a stage that does not exist, or itself. Each is an edge even when it is a problem."""
    problems: list[FieldError] = []
    ups: list[str] = []
    depends = stage.get("dependsOn")
    for j, up in enumerate(depends if isinstance(depends, list) else []):
        if not isinstance(up, str):
            continue
        if up not in declared:
            problems.append(_no_stage(at.child("dependsOn").index(j), up, declared))
        elif up == name:
            problems.append(fieldpath.invalid(at.child("dependsOn").index(j), up, "a stage cannot wait for itself"))
        ups.append(up)
    return ups, problems


def _from_stage_edges(
    stage: JSONObject, name: str | None, at: Path, declared: dict[str, set[str]]
) -> tuple[list[str], list[FieldError]]:
    """The stages whose outputs ``stage`` (named ``name``, at ``at``) reads by its inputs' ``fromStage``, in
    order, and the problems with them: a stage that does not exist, itself, or an output the producer does not
    declare. Each is an edge even when it is a problem."""
    problems: list[FieldError] = []
    producers: list[str] = []
    template_spec = as_object((as_object(stage.get("template")) or {}).get("spec")) or {}
    for j, item in objects(template_spec.get("inputs")):
        source = as_object(item.get("fromStage"))
        if source is None:
            continue
        source_path = at.child("template", "spec", "inputs").index(j).child("fromStage")
        producer, output = as_str(source.get("stage")), as_str(source.get("output"))
        if producer is None:
            continue
        if producer not in declared:
            problems.append(_no_stage(source_path.child("stage"), producer, declared))
        elif producer == name:
            problems.append(
                fieldpath.invalid(source_path.child("stage"), producer, "a stage cannot read its own output")
            )
        elif output is not None and output not in declared[producer]:
            known = ", ".join(sorted(declared[producer]))
            problems.append(
                fieldpath.invalid(
                    source_path.child("output"),
                    output,
                    f"stage {producer} declares no such output; its outputs are {known} (declare it in "
                    f"its template's spec.outputs, or write it under /nodus/outputs and read outputs)",
                )
            )
        producers.append(producer)
    return producers, problems


def _no_stage(path: Path, name: str, declared: dict[str, set[str]]) -> FieldError:
    known = ", ".join(declared) or "none"
    return fieldpath.invalid(path, name, f"names no stage of this Pipeline; its stages are {known}")


def _stages_done(obj: dict[str, Any]) -> str:
    """``succeeded/total`` stages, such as ``2/3``."""
    total = len(list(objects((as_object(obj.get("spec")) or {}).get("stages"))))
    done = (as_object(obj.get("status")) or {}).get("succeeded")
    return f"{done if isinstance(done, int) else 0}/{total}"


def _cost(obj: dict[str, Any]) -> str:
    """``status.costUSD`` as dollars to the cent, as every table shows an amount; ``$0.00`` before any charge."""
    total = as_str((as_object(obj.get("status")) or {}).get("costUSD"))
    if total is None:
        return "$0.00"
    try:
        return money.amount_cell(units.parse_usd(total), "$")
    except ValueError:
        return total


PIPELINE = KindInfo(
    kind="Pipeline",
    plural="pipelines",
    singular="pipeline",
    namespaced=True,
    description="Pipeline runs a graph of stages, each a Job template, in dependency order: a stage's Job "
    "(<pipeline>-<stage>) is created once the stages it depends on succeeded, reading their committed outputs "
    "(fromStage) pinned by SHA-256.",
    spec_model=PipelineSpec,
    status_model=PipelineStatus,
    strategy=PipelineStrategy(),
    printer_columns=(
        PrinterColumn("Stages", "string", ".status.succeeded", "Stages succeeded out of all.", value=_stages_done),
        PrinterColumn("Phase", "string", ".status.phase", "Phase of the Pipeline."),
        PrinterColumn("Cost", "string", ".status.costUSD", "CostUSD is what the stage Jobs cost so far.", value=_cost),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the Pipeline was created."),
        PrinterColumn("Message", "string", ".status.message", "Why the Pipeline is in its phase.", priority=1),
    ),
    short_names=("pipe",),
    categories=("nodus",),
    list_map_keys={
        "spec.stages": ("name",),
        "status.stages": ("name",),
        "status.conditions": ("type",),
    },
)
