"""The ``Job`` kind (``jobs.nodus.dev/v1``): its declaration and strategy.

``JOB`` is what the registry, routes, discovery, OpenAPI and Table output are generated from. The
wire models (spec, status, cost) are shared with the clients and live in ``nodus.apis.v1``
(``jobspec``, ``jobcapacity``, ``jobdata``, ``jobstatus``, ``jobcost`` on ``base`` and ``scalars``).
This package holds the server's side, by concept: write-time canonicalisation (``aliases``,
``defaults``), validation (``validation`` and its ``validation_*`` topics, on ``rules`` and
``jsonview``), warnings (``notices``) and printer columns (``columns``).
"""

from __future__ import annotations

from nodus.api.kinds.job.columns import PRINTER_COLUMNS
from nodus.api.kinds.job.strategy import JobStrategy
from nodus.api.registry import KindInfo
from nodus.apis.v1.jobspec import JobSpec
from nodus.apis.v1.jobstatus import JobStatus

JOB = KindInfo(
    kind="Job",
    plural="jobs",
    singular="job",
    namespaced=True,
    description="Job is a run-to-completion container with checkpoints, recovery from preemption, Indexed "
    "completions, multi-node gangs (Beta), a cost estimate before launch and exact prepaid billing. Every index "
    "runs as Attempts.",
    spec_model=JobSpec,
    status_model=JobStatus,
    strategy=JobStrategy(),
    printer_columns=PRINTER_COLUMNS,
    short_names=("nj",),
    categories=("nodus",),
    selectable_fields=("status.phase",),
    has_log=True,
    list_map_keys={
        "spec.env": ("name",),
        "spec.inputs": ("name",),
        "spec.outputs": ("name",),
        "spec.sidecars": ("name",),
        "spec.sidecars.env": ("name",),
        "spec.secrets": ("name",),
        "spec.volumes": ("mountPath",),
        "status.conditions": ("type",),
    },
)

__all__ = ["JOB", "JobSpec", "JobStatus", "JobStrategy"]
