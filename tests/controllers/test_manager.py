"""The manager runs reconcilers on keys from informers: retries errors with backoff, honours
requeue_after, drops terminal errors, shares informers, and runs workers only while leading. Expected
failures (a 409 Conflict, a 403 in a project being deleted) are logged without a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from nodus.client import Client, errors
from nodus.client.informers import Informer, Key
from nodus.client.leaderelection import LeaderElector
from nodus.client.workqueue import WorkQueue
from nodus.controllers.manager import Manager, Result, TerminalError, enqueue_object, enqueue_owner
from nodus.controllers.metrics import ControllerMetrics
from tests.conftest import make_project
from tests.support.objects import API, job
from tests.support.waiting import eventually


class Recording:
    """Reconciles by counting calls per key; behaviour per job name is scripted by its labels."""

    def __init__(self, jobs: Informer, client: Client) -> None:
        self.jobs = jobs
        self.client = client
        self.calls: Counter[Key] = Counter()
        self.active: set[Key] = set()
        self.overlap = False

    async def reconcile(self, key: Key) -> Result | None:
        if key in self.active:
            self.overlap = True
        self.active.add(key)
        try:
            self.calls[key] += 1
            await asyncio.sleep(0.01)
            obj = self.jobs.get(*key)
            behaviour = ((obj or {}).get("metadata", {}).get("labels") or {}).get("behaviour")
            if behaviour == "flaky" and self.calls[key] < 3:
                raise RuntimeError("transient failure")
            if behaviour == "terminal":
                raise TerminalError("cannot ever work")
            if behaviour == "timer" and self.calls[key] < 3:
                return Result(requeue_after=0.05)
            if behaviour == "stale" and obj is not None and self.calls[key] < 3:
                await self.client.update(
                    "jobs", {**obj, "metadata": {**obj["metadata"], "resourceVersion": "1"}}, key[0]
                )
            if behaviour == "child":  # what a Job controller does: create an object in the Job's project
                with contextlib.suppress(errors.AlreadyExists):
                    await self.client.create("volumes", _volume(f"{key[1]}-child"), key[0])
            return None
        finally:
            self.active.discard(key)


def _volume(name: str) -> dict[str, Any]:
    return {"apiVersion": "nodus.dev/v1", "kind": "Volume", "metadata": {"name": name}, "spec": {}}


@contextlib.asynccontextmanager
async def running(manager: Manager) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(manager.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _manager(
    client: Client, project: str, elector: LeaderElector | None = None, metrics: ControllerMetrics | None = None
) -> tuple[Manager, Recording]:
    manager = Manager(client, elector=elector, metrics=metrics)
    jobs = manager.informer("jobs", namespace=project)
    queue: WorkQueue[Key] = WorkQueue()
    jobs.add_handler(enqueue_object(queue))
    reconciler = Recording(jobs, client)
    manager.add_controller("test", reconciler, queue, workers=4)
    return manager, reconciler


async def test_reconciles_each_object_and_retries_failures(
    client: Client, project: str, caplog: pytest.LogCaptureFixture
) -> None:
    await client.create("jobs", job("existing"), project)
    manager, reconciler = _manager(client, project)
    async with running(manager):
        await eventually(lambda: reconciler.calls[(project, "existing")] >= 1)
        await client.create("jobs", job("flaky", labels={"behaviour": "flaky"}), project)
        await client.create("jobs", job("timer", labels={"behaviour": "timer"}), project)
        with caplog.at_level(logging.ERROR, logger="nodus.controllers.test"):
            await client.create("jobs", job("terminal", labels={"behaviour": "terminal"}), project)
            await eventually(lambda: reconciler.calls[(project, "flaky")] >= 3)  # failed twice, retried
            await eventually(lambda: reconciler.calls[(project, "timer")] >= 3)  # requeued without a change
            await eventually(lambda: reconciler.calls[(project, "terminal")] >= 1)
            await eventually(lambda: any("will not be retried" in r.getMessage() for r in caplog.records))

        before = reconciler.calls[(project, "existing")]
        await client.delete("jobs", "existing", project)  # a deletion is reconciled too
        await eventually(lambda: reconciler.calls[(project, "existing")] > before)
    assert reconciler.calls[(project, "terminal")] == 1  # not retried
    assert not reconciler.overlap  # one key is never reconciled twice at once


async def test_failures_are_logged_with_a_traceback(
    client: Client, project: str, caplog: pytest.LogCaptureFixture
) -> None:
    manager, reconciler = _manager(client, project)
    with caplog.at_level(logging.ERROR, logger="nodus.controllers.test"):
        async with running(manager):
            await client.create("jobs", job("flaky", labels={"behaviour": "flaky"}), project)
            await eventually(lambda: reconciler.calls[(project, "flaky")] >= 3)
    failures = [r for r in caplog.records if r.name == "nodus.controllers.test" and r.exc_info]
    assert failures and "transient failure" in str(failures[0].exc_info[1] if failures[0].exc_info else "")


async def test_conflicts_are_retried_at_debug_level(
    client: Client, project: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 16: the optimistic-concurrency race filled a few minutes of nodus dev with INFO lines."""
    manager, reconciler = _manager(client, project)
    with caplog.at_level(logging.DEBUG, logger="nodus.controllers.test"):
        async with running(manager):
            await client.create("jobs", job("stale", labels={"behaviour": "stale"}), project)
            await eventually(lambda: reconciler.calls[(project, "stale")] >= 3)  # two real 409s, retried
    conflicts = [r for r in caplog.records if r.name == "nodus.controllers.test" and "conflict" in r.getMessage()]
    assert len(conflicts) >= 2
    assert all(r.levelno == logging.DEBUG and not r.exc_info for r in conflicts)


async def test_a_project_being_deleted_is_one_info_line(
    client: Client, admin: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 16: deleting a project with a running Job printed three ERROR tracebacks, the Job controller's
    retries of creating an Attempt the server refuses (403) in a project being deleted."""
    doomed = make_project(admin)
    held = job("held", labels={"behaviour": "child"})
    held["metadata"]["finalizers"] = ["example.com/hold"]  # stays, being deleted, in the project being deleted
    await client.create("jobs", held, doomed)
    manager, reconciler = _manager(client, doomed)
    with caplog.at_level(logging.DEBUG, logger="nodus.controllers.test"):
        async with running(manager):
            await eventually(lambda: reconciler.calls[(doomed, "held")] >= 1)
            await eventually(lambda: admin.get(f"{API}/namespaces/{doomed}/volumes/held-child").status_code == 200)
            before = reconciler.calls[(doomed, "held")]
            admin.delete(f"{API}/projects/{doomed}").raise_for_status()
            # The garbage collector marks the Job (its finalizer keeps it): the reconcile that follows tries to
            # create the child and meets the 403 (the project is checked before the name).
            await eventually(lambda: reconciler.calls[(doomed, "held")] > before)
            await asyncio.sleep(0.5)  # retries would come within this (5 ms, 10 ms, 20 ms, ...)
            refusals = reconciler.calls[(doomed, "held")] - before
    admin.patch(
        f"{API}/namespaces/{doomed}/jobs/held",
        json={"metadata": {"finalizers": None}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()
    lines = [r for r in caplog.records if r.name == "nodus.controllers.test" and r.levelno >= logging.INFO]
    assert [(r.levelname, r.exc_info) for r in lines] == [("INFO", None)], [r.getMessage() for r in lines]
    assert f"reconcile ('{doomed}', 'held') stopped: unable to create new content in project" in lines[0].getMessage()
    assert refusals <= 2, "not retried (each further call is a new event, not a retry)"


async def test_informers_are_shared(client: Client, project: str) -> None:
    manager = Manager(client)
    first = manager.informer("jobs", namespace=project, resync=60)
    assert manager.informer("jobs", namespace=project, resync=30) is first and first.resync == 30
    assert manager.informer("jobs", namespace=project, label_selector="a=b") is not first
    assert manager.informer("jobs") is not first


def test_enqueue_owner_queues_the_controlling_owner() -> None:
    queue: WorkQueue[Key] = WorkQueue()
    handler = enqueue_owner(queue, "Job")
    attempt = {
        "metadata": {
            "name": "train-0-1",
            "namespace": "p",
            "ownerReferences": [
                {"kind": "Job", "name": "train", "controller": True},
                {"kind": "Job", "name": "not-controller"},
                {"kind": "Node", "name": "n", "controller": True},
            ],
        }
    }
    handler(None, attempt)
    handler(attempt, None)
    assert len(queue) == 1


async def test_workers_run_only_while_leading(client: Client, project: str) -> None:
    lease = f"test-{uuid.uuid4().hex[:8]}"
    holder = LeaderElector(client, lease, "holder", lease_duration=60, renew_deadline=2.0, retry_period=0.2)
    leading = asyncio.Event()

    async def hold() -> None:
        leading.set()
        await asyncio.Event().wait()

    held = asyncio.create_task(holder.run(hold))
    await asyncio.wait_for(leading.wait(), 30)
    elector = LeaderElector(client, lease, "manager", lease_duration=60, renew_deadline=2.0, retry_period=0.2)
    manager, reconciler = _manager(client, project, elector)
    await client.create("jobs", job("waiting"), project)
    async with running(manager):
        await asyncio.wait_for(manager.wait_synced(), 30)
        await asyncio.sleep(0.5)
        assert not reconciler.calls  # standing by: cache warm, no work
        held.cancel()  # the holder shuts down cleanly and releases the lease
        with contextlib.suppress(asyncio.CancelledError):
            await held
        await eventually(lambda: reconciler.calls[(project, "waiting")] >= 1, timeout=20)
        assert elector.is_leader


async def test_metrics_show_each_queue_its_reconciles_and_the_clients_requests(client: Client, project: str) -> None:
    metrics = ControllerMetrics()
    manager, reconciler = _manager(client, project, metrics=metrics)
    for name in ("a", "b", "flaky"):
        await client.create("jobs", job(name, labels={"behaviour": name}), project)
    server = await asyncio.to_thread(metrics.serve, "127.0.0.1:0")
    try:
        host, port = server.server_address[:2]
        async with running(manager), httpx.AsyncClient() as http:
            await eventually(lambda: reconciler.calls[(project, "flaky")] >= 3 and not reconciler.active)

            async def scraped() -> dict[str, float]:
                text = (await http.get(f"http://{host}:{port}/metrics")).text
                lines = (line.rpartition(" ") for line in text.splitlines() if not line.startswith("#"))
                return {name: float(value) for name, _, value in lines if name}

            samples = await scraped()
    finally:
        await asyncio.to_thread(server.shutdown)
        server.server_close()
    assert samples['nodus_workqueue_work_duration_seconds_count{name="test"}'] >= 5  # a, b, flaky three times
    assert samples['nodus_workqueue_queue_duration_seconds_count{name="test"}'] >= 5
    assert samples['nodus_workqueue_retries_total{name="test"}'] == 2  # flaky failed twice
    assert samples['nodus_workqueue_adds_total{name="test"}'] >= 3
    assert samples['nodus_workqueue_depth{name="test"}'] == 0
    # Each reconcile sleeps 10 ms: the work histogram sees it.
    assert samples['nodus_workqueue_work_duration_seconds_sum{name="test"}'] >= 0.05
    assert samples["nodus_client_requests_total"] >= 4  # our creates, the informer's list
    assert samples["nodus_client_request_seconds_total"] > 0
