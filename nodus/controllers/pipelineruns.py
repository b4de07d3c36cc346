"""Runs of a Pipeline: which Job is each stage's now, what a re-run resets, and content-addressed reuse (ADR 0052).

Pure functions over the Pipeline's typed view and the Jobs it owns; :mod:`pipelineplanning` calls them.

* **Runs.** A Pipeline's first run is run 1. Annotating it ``nodus.dev/rerun-requested-at`` (a new value each
  time) with ``nodus.dev/rerun-from: STAGE`` starts run ``n + 1``: that stage and every stage downstream of it
  are reset (``status.stages[].run`` becomes ``n + 1``, their phase Waiting); the others keep their Jobs.
  ``status.rerunRequestedAt`` records the request handled, so each value re-runs once.
* **Names.** A stage's Job in run 1 is ``<pipeline>-<stage>``; in run ``n`` it is ``<pipeline>-<stage>.r<n>``
  (a stage name is a DNS label, so the dot never collides with another stage's first-run Job). The stage's
  current Job is the one its status names (``status.stages[].job``: a reused Job keeps its own name), else
  the name of its run. Older runs' Jobs stay, owned by the Pipeline, until it is deleted.
* **Reuse.** When a stage is ready, its key is the SHA-256 of its template (canonical JSON) and the digests
  of its ``fromStage`` inputs (the producing Jobs' committed outputs). Every stage Job carries its key
  (annotation ``nodus.dev/stage-key``). A Succeeded Job of the same stage and key, from any run, is reused
  instead of running the stage again: the stage shows that Job, ``reused: true``, and no new Job is made. The
  stage a re-run names is always run again (that is what was asked); reuse applies downstream of it. A stage
  with an input whose content is not pinned by its spec (a Volume without ``revision``, a URL or bucket
  without ``sha256``, another Job's output, a Workspace) is never reused: its content may have changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from nodus.apis.v1 import labels, objects, stagegraph
from nodus.apis.v1.jobdata import JobInput
from nodus.apis.v1.pipeline import PipelineStage, StageStatus


def job_name(pipeline: str, stage: str, run: int) -> str:
    """The name of ``stage``'s Job in run ``run``."""
    base = stagegraph.job_name(pipeline, stage)
    return base if run <= 1 else f"{base}.r{run}"


@dataclass(frozen=True)
class Runs:
    """The runs as this reconcile sees them: the run, each stage's status entry (reset ones emptied), the request."""

    run: int
    entries: Mapping[str, StageStatus | None]
    stage_runs: Mapping[str, int]
    rerun_from: str | None
    requested_at: str | None
    message: str | None = None


def runs(pipeline: objects.Pipeline) -> Runs:
    """The current run, applying a new re-run request (see the module docstring)."""
    status = pipeline.status
    run = status.run or 1
    entries: dict[str, StageStatus | None] = {s.name: s for s in status.stages or ()}
    stage_runs = {s.name: (s.run or 1) for s in status.stages or ()}
    requested = pipeline.metadata.annotations.get(labels.RERUN_REQUESTED_AT)
    rerun_from = status.rerun_from
    if requested is None or requested == status.rerun_requested_at:
        return Runs(run, entries, stage_runs, rerun_from, status.rerun_requested_at)
    wanted = pipeline.metadata.annotations.get(labels.RERUN_FROM, "")
    edges = stagegraph.graph(pipeline.spec.stages)
    if wanted not in edges:
        message = f"The re-run requested at {requested} names stage {wanted!r}, which this Pipeline does not have."
        return Runs(run, entries, stage_runs, rerun_from, requested, message)
    run += 1
    for name in {wanted} | stagegraph.downstream(edges, wanted):
        entries[name] = None
        stage_runs[name] = run
    return Runs(run, entries, stage_runs, wanted, requested)


def current_jobs(pipeline: objects.Pipeline, seen: Runs, owned: Sequence[objects.Job]) -> dict[str, objects.Job]:
    """Stage name -> its current Job among ``owned`` (see the module docstring: names)."""
    by_name = {job.metadata.name: job for job in owned}
    out: dict[str, objects.Job] = {}
    for stage in pipeline.spec.stages:
        entry = seen.entries.get(stage.name)
        name = (entry.job if entry is not None else None) or job_name(
            pipeline.metadata.name, stage.name, seen.stage_runs.get(stage.name, 1)
        )
        if name in by_name:
            out[stage.name] = by_name[name]
    return out


def stage_key(stage: PipelineStage, current: Mapping[str, objects.Job]) -> str | None:
    """The stage's content key, or None when it may not be reused (an input not pinned by its spec, or an upstream
    output not committed)."""
    digests: dict[str, str] = {}
    for item in stage.template.spec.inputs or ():
        if item.from_stage is not None:
            producer = current.get(item.from_stage.stage)
            digest = _output_digest(producer, item.from_stage.output) if producer is not None else None
            if digest is None:
                return None
            digests[item.name] = digest
        elif not _pinned_by_spec(item):
            return None
    payload = orjson.dumps({"template": stage.template.to_json(), "inputs": digests}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(payload).hexdigest()


def reusable(stage: str, key: str, owned: Sequence[objects.Job]) -> objects.Job | None:
    """The newest Succeeded Job of ``stage`` whose key is ``key``, if any."""
    matches = [
        job
        for job in owned
        if job.metadata.labels.get(labels.STAGE) == stage
        and job.metadata.annotations.get(labels.STAGE_KEY) == key
        and job.status.phase == "Succeeded"
    ]
    return max(matches, key=lambda job: job.metadata.creation_timestamp or "", default=None)


def _output_digest(job: objects.Job, output: str) -> str | None:
    for committed in job.status.outputs or ():
        if committed.name == output and (committed.index or 0) == 0 and committed.sha256:
            return committed.sha256
    return None


def _pinned_by_spec(item: JobInput) -> bool:
    if item.url is not None:
        return item.url.sha256 is not None
    if item.bucket is not None:
        return item.bucket.sha256 is not None
    if item.volume is not None:
        return item.volume.revision is not None
    return False
