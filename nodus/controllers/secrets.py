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
from datetime import timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.client import Client, errors
from nodus.client.informers import Handler, Informer
from nodus.client.workqueue import WorkQueue
from nodus.controllers.manager import Result

Object = dict[str, Any]

PINNED_ANNOTATION = "nodus.dev/pinned-versions"
# The API server's nodus.api.kinds.secret.PRUNE_GRACE: older unpinned versions go at the next write.
PRUNE_GRACE = timedelta(minutes=10)
PINNING_INDEX = "pins-secret"
_FINISHED = frozenset({"Succeeded", "Failed", "Cancelled"})


def pinned_secrets(job: Object) -> list[str]:
    """Index of Jobs by the Secrets they pin and may still read: ``<project>/<secret uid>``."""
    status = job.get("status") or {}
    if status.get("phase") in _FINISHED:
        return []
    namespace = str(job["metadata"].get("namespace") or "")
    return [f"{namespace}/{uid}" for uid in (status.get("secretVersionIDs") or {}).values()]


def enqueue_pinned(queue: WorkQueue[Any]) -> Handler:
    """A Job changed: the Secrets it pins (before and after) look at their pins again."""

    def handler(old: Object | None, new: Object | None) -> None:
        for job in (old, new):
            if job is not None:
                namespace = str(job["metadata"].get("namespace") or "")
                for name in (job.get("status") or {}).get("secretVersions") or {}:
                    queue.add((namespace, str(name)))

    return handler


class SecretPins:
    """Keeps ``nodus.dev/pinned-versions`` of each Secret equal to what unfinished Jobs pin."""

    def __init__(self, client: Client, secrets: Informer, jobs: Informer) -> None:
        self._client = client
        self._secrets = secrets
        self._jobs = jobs

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        namespace, name = key
        secret = self._secrets.get(namespace, name) if namespace is not None else None
        if secret is None:
            return None
        meta = secret["metadata"]
        pinned: set[int] = set()
        for job in self._jobs.by_index(PINNING_INDEX, f"{namespace}/{meta['uid']}"):
            status = job.get("status") or {}
            if (status.get("secretVersionIDs") or {}).get(name) == meta["uid"] and name in status.get(
                "secretVersions", {}
            ):
                pinned.add(int(status["secretVersions"][name]))
        versions = (secret.get("status") or {}).get("versions") or []
        current = (meta.get("annotations") or {}).get(PINNED_ANNOTATION)
        desired = ",".join(str(v) for v in sorted(pinned))
        droppable, waiting = _unpinned(versions, pinned)
        if current == desired and not droppable:
            return _until(waiting)
        if current is None and len(versions) < 2:
            return None  # nothing to keep or drop: no annotation needed
        patch = {"metadata": {"annotations": {PINNED_ANNOTATION: desired}}}
        with contextlib.suppress(errors.NotFound):
            await self._client.patch("secrets", name, patch, namespace)
        return _until(waiting)


def _unpinned(versions: list[Object], pinned: set[int]) -> tuple[bool, list[float]]:
    """Whether an old unpinned version can go now, and in how many seconds the others can."""
    now = units.now()
    droppable, waiting = False, []
    for entry, successor in itertools.pairwise(versions):
        if int(entry.get("version") or 0) in pinned:
            continue
        superseded = units.time_or_none(successor.get("createdTime"))
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
