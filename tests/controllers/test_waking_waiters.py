"""Which waiting Jobs a change wakes (``assembly``): a Job's change wakes only the Jobs waiting for its outputs,
so a burst of creates is not quadratic; a Secret's change still wakes every waiting Job of its project."""

from __future__ import annotations

from typing import Any

from nodus.client.informers import Informer
from nodus.client.workqueue import WorkQueue
from nodus.controllers.assembly import _enqueue_readers_of_job, _enqueue_waiting_jobs
from nodus.controllers.jobs.reconciling import (
    WAITING_FOR_JOB_INDEX,
    WAITING_INDEX,
    waiting_for_outputs_of,
    waiting_in,
)


def _job(name: str, reads: str | None = None, phase: str | None = None, project: str = "p") -> dict[str, Any]:
    spec: dict[str, Any] = {"image": "busybox", "command": ["true"]}
    if reads is not None:
        spec["inputs"] = [{"name": "data", "output": {"job": reads, "name": "model"}}]
    job: dict[str, Any] = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": project, "resourceVersion": "1", "uid": f"uid-{name}"},
        "spec": spec,
    }
    if phase is not None:
        job["status"] = {"phase": phase}
    return job


async def _queued(queue: WorkQueue[Any]) -> set[Any]:
    keys = set()
    while len(queue):
        key = await queue.get()
        keys.add(key)
        queue.done(key)
    return keys


def _jobs() -> Informer:
    jobs = Informer(None, "jobs")  # type: ignore[arg-type]  # never run: fed by hand
    jobs.add_index(WAITING_INDEX, waiting_in)
    jobs.add_index(WAITING_FOR_JOB_INDEX, waiting_for_outputs_of)
    return jobs


async def test_a_burst_of_new_jobs_wakes_none_of_the_waiting() -> None:
    jobs, queue = _jobs(), WorkQueue[Any]()
    jobs.add_handler(_enqueue_readers_of_job(queue, jobs))
    for i in range(300):
        jobs._apply("ADDED", _job(f"j{i}"))
    jobs._apply("ADDED", _job("reader", reads="producer"))
    assert await _queued(queue) == set()  # none of them reads a Job that changed


async def test_a_job_wakes_the_jobs_waiting_for_its_outputs_and_only_them() -> None:
    jobs, queue = _jobs(), WorkQueue[Any]()
    jobs.add_handler(_enqueue_readers_of_job(queue, jobs))
    for i in range(50):
        jobs._apply("ADDED", _job(f"j{i}"))
    jobs._apply("ADDED", _job("reader", reads="producer"))
    jobs._apply("ADDED", _job("admitted-reader", reads="producer", phase="Running"))  # no longer waits
    jobs._apply("ADDED", _job("elsewhere", reads="producer", project="q"))  # another project's "producer"
    await _queued(queue)
    jobs._apply("ADDED", _job("producer", phase="Running"))
    assert await _queued(queue) == {("p", "reader")}
    jobs._apply("MODIFIED", _job("producer", phase="Succeeded"))
    assert await _queued(queue) == {("p", "reader")}
    jobs._apply("DELETED", _job("producer", phase="Succeeded"))
    assert await _queued(queue) == {("p", "reader")}


async def test_a_secret_still_wakes_every_waiting_job_of_its_project() -> None:
    jobs, queue = _jobs(), WorkQueue[Any]()
    secrets = Informer(None, "secrets")  # type: ignore[arg-type]
    secrets.add_handler(_enqueue_waiting_jobs(queue, jobs))
    for i in range(3):
        jobs._apply("ADDED", _job(f"j{i}"))
    jobs._apply("ADDED", _job("done", phase="Succeeded"))
    secrets._apply("ADDED", {"kind": "Secret", "metadata": {"name": "s", "namespace": "p", "resourceVersion": "1"}})
    assert await _queued(queue) == {("p", "j0"), ("p", "j1"), ("p", "j2")}
