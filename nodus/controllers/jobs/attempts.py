"""The Attempt object the Job controller creates for one start of an index: everything the agent needs, pinned.

The Job's spec fields the agent reads are copied as they are (a later edit of the Job never changes a run
under way), the data plane's pins are added (Secret versions, inputs, Volumes, source commit), and a Job
bound to an estimate has its placement capped at the estimate's rate. Names are deterministic
(``<job>-<index>-<n>``), so a retried create meets AlreadyExists rather than making a duplicate; a gang
epoch's ranks are made from this one (``gangs.members_for``).
"""

from __future__ import annotations

from typing import Any

from nodus.apimachinery import estimates, workloads
from nodus.apis.v1 import labels, objects
from nodus.apis.v1.jobstatus import ImageStatus
from nodus.controllers.jobs import pinning, reporting

Object = dict[str, Any]

# Copied from the Job's spec into every Attempt as they are.
_COPIED = (
    "command",
    "args",
    "workingDir",
    "env",
    "resources",
    "placement",
    "expectedDuration",
    "scaledownWindow",
    "initCommand",
    "sidecars",
    "imagePullSecrets",
    "network",
    "outputs",
    "recovery",
    "completeByTime",
)


def attempt_for(
    job: Object, index: int, number: int, pins: pinning.Pins | None = None, carried: Object | None = None
) -> Object:
    """The Attempt that runs ``index`` for the ``number``-th time: everything the agent needs, pinned, and
    what it starts from (``carried``: the checkpoint to restore or the progress cursor)."""
    read = objects.read(objects.Job, job)
    meta = read.metadata
    # The copied fields go as the Job stores them (JSON), never re-serialised from the view.
    spec: Object = job["spec"]
    pinned = {key: spec[key] for key in _COPIED if spec.get(key) is not None}
    pinned.update(carried or {})
    image = read.spec.image or read.spec.image_ref
    if image:
        pinned["image"] = pinned_image(image, read.status.image)
    if pins is not None:
        pinned.update(pins.attempt())
    source = reporting.pinned_source(spec, job.get("status") or {})
    if source is not None:
        pinned["source"] = source
    bound = estimates.bound_rate(job)
    if bound is not None:
        pinned["placement"] = estimates.capped_placement(pinned.get("placement") or {}, bound)
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Attempt",
        "metadata": {
            "name": f"{meta.name}-{index}-{number}",
            "namespace": meta.namespace,
            "labels": {
                labels.JOB: meta.name,
                labels.INDEX: str(index),
                workloads.LABEL: workloads.signature(spec),
            },
            "ownerReferences": [
                {
                    "apiVersion": "nodus.dev/v1",
                    "kind": "Job",
                    "name": meta.name,
                    "uid": meta.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"job": meta.name, "jobUID": meta.uid, "index": index, "number": number, **pinned},
    }


def pinned_image(reference: str, image_status: ImageStatus | None) -> str:
    """``reference`` at the digest the Job pinned (``name:tag@sha256:...``: the agent pulls the digest, the tag stays
    for people), or as written while no agent has resolved it yet (ADR 0042)."""
    digest = image_status.digest if image_status is not None else None
    if not digest or "@" in reference:
        return reference
    return f"{reference}@{digest}"
