"""Secret versions kept while Jobs pin them: the controllers' half of pruning old versions.

A Job pins each Secret it reads at admission (``status.secretVersions``, with the Secret's uid in
``status.secretVersionIDs``) and every attempt reads that version, replacements included. This
reconciler writes, per Secret, the versions pinned by the Jobs of its project that have not
finished into the annotation ``nodus.dev/pinned-versions`` ("1,3"); the API server then drops on
each write the old versions the annotation does not name, once superseded for ten minutes (ADR
0013). So a Secret updated every minute keeps only what running Jobs need, and a version a Job
still needs is never dropped.

Keyed by (project, Secret name). A Secret's change, and a change of a Job that pins it, enqueue it.
Level-triggered: the pins are recomputed from the informers every time, and a patch is sent only
when the annotation is wrong or old versions wait to be dropped; a version still in its grace
period brings the key back when the grace ends.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects, phases
from nodus.apis.v1.secret import SecretVersion
from nodus.client import Client, errors
from nodus.client.informers import Handler, Informer
from nodus.client.workqueue import WorkQueue
from nodus.controllers.manager import Result

Object = dict[str, Any]

# The API server's nodus.api.kinds.secret.PRUNE_GRACE: older unpinned versions go at the next write.
PRUNE_GRACE = timedelta(minutes=10)
PINNING_INDEX = "pins-secret"


def pinned_secrets(obj: Object) -> list[str]:
    """Index of Jobs by the Secrets they pin and may still read: ``<project>/<secret uid>``."""
    job = objects.read(objects.Job, obj)
    if job.status.phase in phases.JOB_FINISHED:
        return []
    namespace = job.metadata.namespace or ""
    return [f"{namespace}/{uid}" for uid in (job.status.secret_version_ids or {}).values()]


def enqueue_pinned(queue: WorkQueue[Any]) -> Handler:
    """A Job changed: the Secrets it pins (before and after) look at their pins again."""

    def handler(old: Object | None, new: Object | None) -> None:
        for obj in (old, new):
            if obj is not None:
                job = objects.read(objects.Job, obj)
                for name in job.status.secret_versions or {}:
                    queue.add((job.metadata.namespace or "", name))

    return handler


class SecretPins:
    """Keeps ``nodus.dev/pinned-versions`` of each Secret equal to what unfinished Jobs pin."""

    def __init__(self, client: Client, secrets: Informer, jobs: Informer) -> None:
        self._client = client
        self._secrets = secrets
        self._jobs = jobs

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        namespace, name = key
        obj = self._secrets.get(namespace, name) if namespace is not None else None
        if obj is None:
            return None
        secret = objects.read(objects.Secret, obj)
        uid = secret.metadata.uid
        pinned: set[int] = set()
        for pinning in self._jobs.by_index(PINNING_INDEX, f"{namespace}/{uid}"):
            job = objects.read(objects.Job, pinning)
            ids, pins = job.status.secret_version_ids or {}, job.status.secret_versions or {}
            if name in pins and ids.get(name) == uid:
                pinned.add(pins[name])
        versions = secret.status.versions or []
        current = secret.metadata.annotations.get(labels.PINNED_VERSIONS)
        desired = ",".join(str(v) for v in sorted(pinned))
        droppable, waiting = _unpinned(versions, pinned)
        if current == desired and not droppable:
            return _until(waiting)
        if current is None and len(versions) < 2:
            return None  # nothing to keep or drop: no annotation needed
        patch = {"metadata": {"annotations": {labels.PINNED_VERSIONS: desired}}}
        with contextlib.suppress(errors.NotFound):
            await self._client.patch("secrets", name, patch, namespace)
        return _until(waiting)


def _unpinned(versions: Sequence[SecretVersion], pinned: set[int]) -> tuple[bool, list[float]]:
    """Whether an old unpinned version can go now, and in how many seconds the others can."""
    now = units.now()
    droppable, waiting = False, []
    for entry, successor in itertools.pairwise(versions):
        if entry.version in pinned:
            continue
        superseded = units.time_or_none(successor.created_time)
        if superseded is None:
            continue
        due = (superseded + PRUNE_GRACE - now).total_seconds()
        if due <= 0:
            droppable = True
        else:
            waiting.append(due)
    return droppable, waiting


def _until(waiting: list[float]) -> Result | None:
    return Result(requeue_after=min(waiting) + 1.0) if waiting else None
