"""The Pipeline's admission estimate: every stage's Job estimated as it would be created, and the graph's sum.

On every create of a Pipeline (dry run or not) :meth:`PipelineEstimates.admit` builds each stage's Job as the
Pipeline controller will create it (name ``<pipeline>-<stage>``, the template's labels with
``nodus.dev/pipeline`` and ``nodus.dev/stage``, ``fromStage`` rewritten, ``maxCostUSD`` at most the
Pipeline's), estimates it with the Job's own estimate (:meth:`JobEstimates.preview`: the same placement
preview, history, credit and Budgets), and stores the graph's estimate
(:func:`nodus.billing.pipelineestimating.graph_estimate`) in ``status.estimate``.

A real create with a blocking reason (a stage Job that would be refused when its turn comes: its first hold
above its ``maxCostUSD``, the project's credit or a Budget) is refused with the first, as a Job's is; a dry
run reports them instead. The dry run's response carries an ETag sealing the estimate and the spec, as a
Job's does (``nodus.api.estimates``); a create with it in ``If-Match`` is bound: it stores that estimate
(blocking reasons re-read now) and is refused with a 412 if the spec differs. Each stage Job still gets its
own estimate when it is created.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.api.estimates import JobEstimates
from nodus.apis.v1 import labels, objects, stagegraph
from nodus.billing import pipelineestimating

Object = dict[str, Any]
_REFUSALS = ("MaxCostBelowHold", "InsufficientCredits", "BudgetExceeded")


class PipelineEstimates:
    """The estimate step of Pipeline creation, over one API server's Job estimates."""

    def __init__(self, jobs: JobEstimates) -> None:
        self._jobs = jobs

    async def admit(self, pipeline: Object, ctx: RequestContext) -> None:
        """Put the graph's estimate into ``pipeline["status"]``; refuse a real create a stage Job would be refused
        for (see the module docstring)."""
        namespace = str(pipeline["metadata"]["namespace"])
        bound = self._jobs.unseal(ctx.if_match, namespace, pipeline) if ctx.if_match else None
        view = objects.read(objects.Pipeline, pipeline)
        cap = Decimal(view.spec.max_cost_usd) if view.spec.max_cost_usd is not None else None
        stage_estimates: list[tuple[str, Object]] = []
        available = Decimal(0)
        for stage in pipeline["spec"]["stages"]:
            estimate, available = await self._jobs.preview(_stage_job(pipeline, stage, cap))
            stage_estimates.append((str(stage["name"]), estimate))
        estimate = pipelineestimating.graph_estimate(
            stage_estimates, stagegraph.graph(view.spec.stages), available, cap
        )
        if bound is not None:
            # The bound figures are the ones stored; whether a stage Job could be funded is a question of now.
            bound.pop("blockingReasons", None)
            if estimate.get("blockingReasons"):
                bound["blockingReasons"] = estimate["blockingReasons"]
            estimate = bound
        pipeline.setdefault("status", {})["estimate"] = estimate
        if ctx.dry_run:
            if self._jobs.can_seal:
                ctx.response_headers["ETag"] = f'"{self._jobs.seal(namespace, pipeline, estimate)}"'
            return
        for code in _REFUSALS:
            for reason in estimate.get("blockingReasons") or []:
                if reason["code"] == code:
                    raise APIError(
                        code,
                        f'pipelines.nodus.dev "{pipeline["metadata"].get("name", "")}" cannot be created: '
                        f"{reason['message']}",
                        fix=reason["fix"],
                        details={
                            "name": pipeline["metadata"].get("name", ""),
                            "group": "nodus.dev",
                            "kind": "pipelines",
                        },
                    )


def _stage_job(pipeline: Object, stage: Object, cap: Decimal | None) -> Object:
    """Stage ``stage``'s Job as the Pipeline controller will create it (its first stage, with the whole cap left)."""
    name = str(pipeline["metadata"]["name"])
    template = stage.get("template") or {}
    spec = stagegraph.stage_job_spec(name, template.get("spec") or {})
    own = spec.get("maxCostUSD")
    if cap is not None and (own is None or Decimal(str(own)) > cap):
        spec["maxCostUSD"] = str(cap)
    job_labels = {
        **((template.get("metadata") or {}).get("labels") or {}),
        labels.PIPELINE: name,
        labels.STAGE: str(stage["name"]),
    }
    metadata = {
        "name": stagegraph.job_name(name, str(stage["name"])),
        "namespace": pipeline["metadata"]["namespace"],
        "labels": job_labels,
    }
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": metadata, "spec": spec}
