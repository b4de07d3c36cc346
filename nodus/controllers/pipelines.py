"""The Pipeline controller: creates each stage's Job in dependency order and shows the Pipeline's status.

Keyed by (project, Pipeline name); level-triggered and idempotent. Each reconcile reads the Pipeline
and the Jobs it controls (the Jobs informer, by owner uid), asks :func:`pipelineplanning.plan` what to
do, and does it:

* creates each ready stage's Job (``<pipeline>-<stage>``; ``.r<n>`` in re-run ``n``, ``pipelineruns``), or
  reuses a Succeeded Job of an earlier run with the same template and input digests: the template's metadata
  and spec, the stage's content key (annotation ``nodus.dev/stage-key``), labels
  ``nodus.dev/pipeline`` and ``nodus.dev/stage``, the Pipeline as its controlling owner (so deleting the
  Pipeline deletes its Jobs, ADR 0005), ``fromStage`` inputs rewritten to the producing Job's output
  (:func:`nodus.apis.v1.stagegraph.stage_job_spec`), which the Job pins by SHA-256 at admission, and
  under a ``maxCostUSD`` its own ``maxCostUSD`` at most what remains. The name is deterministic, so a
  retried create answers 409 rather than making a duplicate;
* sets the stage Jobs' ``spec.state`` (a suspend, resume, cancel or failure cascading);
* writes ``status`` through ``/status`` when it differs.

A create the server refuses (the project's credit or a Budget cannot fund the first hold, a Job of
that name that the Pipeline does not own) is shown in the stage's status and retried later.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects, stagegraph
from nodus.client import Client, errors
from nodus.client.informers import Informer
from nodus.controllers.manager import Result
from nodus.controllers.pipelineplanning import Create, plan

Object = dict[str, Any]
log = logging.getLogger("nodus.controllers.pipelines")

OWNER_INDEX = "pipeline-owner"
RETRY_REFUSED = 10.0


def owner_uid(obj: Object) -> list[str]:
    """Index of Jobs by the uid of the Pipeline that controls them."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [str(r["uid"]) for r in refs if r.get("controller") and r.get("kind") == "Pipeline" and r.get("uid")]


class PipelineReconciler:
    """Drives each Pipeline's stage Jobs and status (see the module docstring)."""

    def __init__(self, client: Client, pipelines: Informer, jobs: Informer) -> None:
        self._client = client
        self._pipelines = pipelines
        self._jobs = jobs

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        namespace, name = key
        obj = self._pipelines.get(namespace, name) if namespace is not None else None
        if obj is None or namespace is None:
            return None
        pipeline = objects.read(objects.Pipeline, obj)
        if pipeline.metadata.deletion_timestamp is not None:
            return None  # its Jobs go with it (garbage collection)
        owned = [objects.read(objects.Job, job) for job in self._jobs.by_index(OWNER_INDEX, pipeline.metadata.uid)]
        decision = plan(pipeline, owned, units.now())
        refused: dict[str, str] = {}
        for job_name, state in decision.states.items():
            try:
                await self._client.patch("jobs", job_name, {"spec": {"state": state}}, namespace)
            except errors.NotFound:
                continue
            except errors.Invalid as exc:  # a finished Job's state stays: nothing to cascade into
                log.info("pipeline %s/%s: %s not set %s: %s", namespace, name, job_name, state, exc.message)
        for create in decision.create:
            try:
                await self._client.create("jobs", self._stage_job(obj, create, decision.remaining_usd), namespace)
            except (errors.Conflict, errors.AlreadyExists):
                existing = self._jobs.get(namespace, create.job)
                if existing is not None and pipeline.metadata.uid not in owner_uid(existing):
                    refused[create.stage] = (
                        f"A Job named {create.job} exists that this Pipeline does not own; delete it and the stage "
                        "starts."
                    )
            except errors.APIError as exc:
                refused[create.stage] = f"The stage's Job was refused: {exc.message}"
        status = decision.status
        for entry in status.get("stages") or []:
            if entry["name"] in refused:
                entry.update(phase="Waiting", message=refused[entry["name"]])
                entry.pop("job", None)
        if status != pipeline.status.to_json():
            try:
                await self._client.update("pipelines", {**obj, "status": status}, namespace, subresource="status")
            except errors.NotFound:
                return None
            except errors.Conflict:
                return Result(requeue_after=0.5)  # the informer has not seen the newest Pipeline yet
        return Result(requeue_after=RETRY_REFUSED) if refused else None

    def _stage_job(self, obj: Object, create: Create, remaining: Decimal | None) -> Object:
        """The Job of ``create.stage``, made from the stored template (see the module docstring)."""
        metadata, name, stage = obj["metadata"], str(obj["metadata"]["name"]), create.stage
        template = next(s for s in obj["spec"]["stages"] if s.get("name") == stage)["template"]
        template_meta = template.get("metadata") or {}
        spec = stagegraph.stage_job_spec(name, template["spec"], create.producers)
        if remaining is not None:
            own = spec.get("maxCostUSD")
            if own is None or Decimal(str(own)) > remaining:
                spec["maxCostUSD"] = str(remaining)
        job_labels = {**(template_meta.get("labels") or {}), labels.PIPELINE: name, labels.STAGE: stage}
        job_metadata: Object = {
            "name": create.job,
            "labels": job_labels,
            "ownerReferences": [
                {
                    "apiVersion": "nodus.dev/v1",
                    "kind": "Pipeline",
                    "name": name,
                    "uid": metadata["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        annotations = dict(template_meta.get("annotations") or {})
        if create.key is not None:
            annotations[labels.STAGE_KEY] = create.key
        if annotations:
            job_metadata["annotations"] = annotations
        return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": job_metadata, "spec": spec}
