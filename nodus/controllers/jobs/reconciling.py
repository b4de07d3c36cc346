"""The Job reconciler: applies ``planning.plan`` through the API.

Writes go in an order that keeps every intermediate state valid: attempts are created first (a
retry meets AlreadyExists, never a duplicate, because names are ``<job>-<index>-<n>``), stops next,
then the Job's ``/status`` (with the resourceVersion read, so a stale view is refused with 409 and
the key is retried), then the finalizer, then a TTL deletion. Reading comes from the informers'
caches; a cache that lags only costs a retry.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects
from nodus.client import Client, errors
from nodus.client.informers import Informer
from nodus.controllers.jobs import planning
from nodus.controllers.jobs.gangplanning import TimeScales
from nodus.controllers.jobs.gangs import ASSEMBLY_REASONS
from nodus.controllers.jobs.slots import view
from nodus.controllers.manager import Result

Object = dict[str, Any]
log = logging.getLogger("nodus.controllers.jobs")

JOB_UID_INDEX = "job-uid"
WAITING_INDEX = "waiting"
WAITING_FOR_JOB_INDEX = "waiting-for-job"
# The kinds a Job's data plane names, found through their informers at admission.
REFERENCED = ("secrets", "volumes", "connections", "jobs", "workspaces")


def job_uid_of(attempt: Object) -> list[str]:
    """Index of Attempts by the uid of their Job."""
    return [view(attempt).spec.job_uid]


def waiting_in(job: Object) -> list[str]:
    """Index of Jobs not admitted yet, by project: they wait for objects that may appear."""
    read = objects.read(objects.Job, job)
    if (read.status.phase or "Pending") != "Pending":
        return []
    return [read.metadata.namespace or ""]


def waiting_for_outputs_of(job: Object) -> list[str]:
    """Index of Jobs not admitted yet by the Jobs whose outputs they take as inputs (``project/name``): only a
    change of one of those can admit them, so a Job's change wakes its readers, not every waiting Job."""
    read = objects.read(objects.Job, job)
    if (read.status.phase or "Pending") != "Pending":
        return []
    namespace = read.metadata.namespace or ""
    return sorted({f"{namespace}/{item.output.job}" for item in read.spec.inputs or () if item.output is not None})


class JobReconciler:
    """Reconciles one Job, keyed by (project, name)."""

    def __init__(
        self,
        client: Client,
        jobs: Informer,
        attempts: Informer,
        referenced: dict[str, Informer] | None = None,
        *,
        scales: TimeScales | None = None,
    ) -> None:
        self._client = client
        self._scales = scales or TimeScales()
        self._jobs = jobs
        self._attempts = attempts
        self._referenced = {"jobs": jobs, **(referenced or {})}
        self._written: dict[tuple[str | None, str], int] = {}  # key -> resourceVersion of our last write

    async def reconcile(self, key: tuple[str | None, str]) -> Result | None:
        namespace, name = key
        if namespace is None:
            return None
        job = self._jobs.get(namespace, name)
        if job is None:
            self._written.pop(key, None)
            return None
        meta = objects.read(objects.Job, job).metadata
        written = self._written.get(key)
        if written is not None and int(meta.resource_version) < written:
            # The cache has not caught up with our own last write: acting on it would be refused as
            # stale (409). The watch event of that write brings this key back.
            return Result(requeue_after=1.0)
        attempts = self._attempts.by_index(JOB_UID_INDEX, meta.uid)
        informers = self._referenced

        def lookup(plural: str, other: str) -> Object | None:
            informer = informers.get(plural)
            return informer.get(namespace, other) if informer is not None else None

        decided = planning.plan(job, attempts, units.now(), lookup, self._scales)
        for body in decided.create:
            with contextlib.suppress(errors.AlreadyExists):
                await self._client.create("attempts", body, namespace)
        # One request time for every stop of this decision: a gang's ranks checkpoint before a stop under it,
        # as one gang checkpoint (their shards are matched by it).
        requested = units.format_time(units.now())
        for attempt, reason in decided.stop:
            await stop_attempt(
                self._client,
                attempt,
                reason,
                checkpoint=decided.checkpoint_first,
                deadline=decided.stop_deadline,
                requested_time=requested,
            )
        for attempt, spec_patch in decided.patch:
            with contextlib.suppress(errors.NotFound):
                attempt_meta = view(attempt).metadata
                await self._client.patch("attempts", attempt_meta.name, {"spec": spec_patch}, attempt_meta.namespace)
        current = job
        if decided.status != (job.get("status") or {}):
            current = await self._client.update(
                "jobs", {**job, "status": decided.status}, namespace, subresource="status"
            )
        if decided.add_finalizer or decided.remove_finalizer:
            current = await self._set_finalizer(current, add=decided.add_finalizer)
        if current is not job:
            self._written[key] = int(objects.read(objects.Job, current).metadata.resource_version)
        if decided.delete_job:
            log.info("deleting job %s/%s: ttlSecondsAfterFinished passed", namespace, name)
            with contextlib.suppress(errors.NotFound):
                await self._client.delete("jobs", name, namespace, propagation_policy="Background", uid=meta.uid)
        return Result(requeue_after=decided.requeue_after) if decided.requeue_after is not None else None

    async def _set_finalizer(self, job: Object, *, add: bool) -> Object:
        meta = objects.read(objects.Job, job).metadata
        finalizers = [f for f in meta.finalizers if f != labels.STOP_ATTEMPTS]
        if add:
            finalizers.append(labels.STOP_ATTEMPTS)
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta.resource_version}}
        return await self._client.patch("jobs", meta.name, patch, meta.namespace)


async def stop_attempt(
    client: Client,
    attempt: Object,
    reason: str,
    grace_seconds: int = planning.STOP_GRACE_SECONDS,
    *,
    checkpoint: bool = False,
    deadline: str | None = None,
    requested_time: str | None = None,
) -> None:
    """Ask an attempt to stop. One that no host has taken yet is simply marked Stopped; a host's
    agent is asked through ``spec.stop`` and reports ``Stopped`` after SIGTERM (and SIGKILL). With
    ``checkpoint`` a running attempt's agent takes a checkpoint first (until ``deadline``, if given)."""
    read = view(attempt)
    meta, spec = read.metadata, read.spec
    if spec.stop is not None:
        return
    now = requested_time or units.format_time(units.now())
    unstarted = read.status.phase in ("Pending", "Provisioning")
    on_host = bool(spec.node)
    if spec.gang is not None and unstarted and (not on_host or reason in ASSEMBLY_REASONS):
        # A gang rank's stop reason is what its epoch is read by (``gangs.Epoch.outcome``), so it is noted in
        # the spec even when no host took it. One whose host has not started it and may never (a host that
        # never registers) is over now too, so the gang can be placed again; a late agent sees the stop.
        patch = {"metadata": {"resourceVersion": meta.resource_version}, "spec": {"stop": {"reason": reason}}}
        attempt = await client.patch("attempts", meta.name, patch, meta.namespace)
        on_host = False
    if not on_host:
        status = {
            **(attempt.get("status") or {}),
            "phase": "Stopped",
            "reason": "Stopped",
            "message": f"Stopped before it started ({reason}).",
            "finishTime": now,
        }
        await client.update("attempts", {**attempt, "status": status}, meta.namespace, subresource="status")
        return
    stop: Object = {"reason": reason, "gracePeriodSeconds": grace_seconds, "requestedTime": now}
    if checkpoint and read.status.phase == "Running":
        stop["checkpoint"] = True
        if deadline is not None:
            stop["deadline"] = deadline
    patch = {"metadata": {"resourceVersion": meta.resource_version}, "spec": {"stop": stop}}
    await client.patch("attempts", meta.name, patch, meta.namespace)
