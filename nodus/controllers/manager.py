"""The controller manager: shared informers, work queues and the workers that run reconcilers.

A controller in a few lines::

    manager = Manager(client, elector=LeaderElector(client, "nodus-controllers", identity))
    jobs = manager.informer("jobs")
    attempts = manager.informer("attempts")
    attempts.add_index("job-uid", lambda a: [a["spec"]["jobUID"]])
    queue: WorkQueue[Key] = WorkQueue()
    jobs.add_handler(enqueue_object(queue))
    attempts.add_handler(enqueue_owner(queue, "Job"))
    manager.add_controller("jobs", JobReconciler(client, jobs, attempts), queue, workers=4)
    await manager.run()

The informers, work queues and leader election are client machinery (:mod:`nodus.client.informers`,
:mod:`nodus.client.workqueue`, :mod:`nodus.client.leaderelection`), which the node agent uses too;
what is here is the controllers' own: reconcilers, their results and errors, and the workers.

A controller is a :class:`Reconciler`, a :class:`WorkQueue` of its keys, and a number of workers.
Informer handlers put keys on the queue (see :func:`enqueue_object`, :func:`enqueue_owner`);
workers take one key at a time and call ``reconcile(key)``:

- returns ``None`` or ``Result()``: done, the key's backoff is forgotten;
- returns ``Result(requeue_after=s)``: done, reconcile again in ``s`` seconds (timed waits);
- raises :class:`TerminalError`: logged, forgotten, not retried (the input cannot succeed);
- raises a 403 creating something in a project that is being deleted (cause ``ProjectTerminating``):
  one INFO line, forgotten, not retried: the project's deletion removes the key's object too, and
  that deletion queues the key again;
- raises anything else: logged with its traceback and retried with the key's exponential
  backoff (a 409 Conflict, the usual optimistic-concurrency race, is logged at DEBUG without one).

:meth:`Manager.run` starts every informer, waits until all have listed, then runs the workers,
under a :class:`LeaderElector` when one is given: standbys keep their caches warm (and their
queues filling) so that a takeover starts from a synced cache.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeGuard, TypeVar

from nodus.apimachinery.causes import PROJECT_TERMINATING
from nodus.client import Client, errors
from nodus.client.informers import Handler, Informer, Key, Object, object_key
from nodus.client.leaderelection import LeaderElector
from nodus.client.workqueue import ShutDown, WorkQueue
from nodus.controllers.metrics import ControllerMetrics, QueueObserver

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)


@dataclass
class Result:
    """What a reconcile asks for beyond success: to run again after ``requeue_after`` seconds."""

    requeue_after: float | None = None


class TerminalError(Exception):
    """A reconcile failure that retrying cannot fix: logged and the key forgotten until it changes."""


class Reconciler(Protocol[K_contra]):
    """Converges one object, named by its key, towards its desired state. Level-triggered and idempotent:
    the key carries no event, so read the current state (from informers) every time."""

    async def reconcile(self, key: K_contra) -> Result | None: ...


@dataclass
class _Controller(Generic[K]):
    name: str
    reconciler: Reconciler[K]
    queue: WorkQueue[K]
    workers: int
    log: logging.Logger
    observer: QueueObserver | None = None


def enqueue_object(queue: WorkQueue[Key]) -> Handler:
    """A handler that queues ``(namespace, name)`` of the object that changed."""

    def handler(old: Object | None, new: Object | None) -> None:
        obj = new if new is not None else old
        if obj is not None:
            queue.add(object_key(obj))

    return handler


def enqueue_owner(queue: WorkQueue[Key], kind: str) -> Handler:
    """A handler that queues ``(namespace, owner name)`` of the controlling owner of kind ``kind``
    (e.g. the Job of an Attempt), for the old and the new object both."""

    def handler(old: Object | None, new: Object | None) -> None:
        for obj in (old, new):
            if obj is None:
                continue
            metadata = obj.get("metadata") or {}
            for ref in metadata.get("ownerReferences") or []:
                if ref.get("controller") and ref.get("kind") == kind and ref.get("name"):
                    queue.add((metadata.get("namespace") or None, str(ref["name"])))

    return handler


class Manager:
    """Runs informers and controllers against one :class:`Client`; register everything before :meth:`run`.

    With ``metrics``, every controller's queue and reconciles, and the client's requests, are measured there."""

    def __init__(
        self, client: Client, *, elector: LeaderElector | None = None, metrics: ControllerMetrics | None = None
    ) -> None:
        self.client = client
        self.elector = elector
        self.metrics = metrics
        if metrics is not None:
            metrics.client(client.requests)
        self._informers: dict[tuple[str, str | None, str | None, str | None], Informer] = {}
        self._controllers: list[_Controller[Any]] = []
        self._runnables: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        self._log = logging.getLogger("nodus.controllers.manager")

    def informer(
        self,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resync: float | None = None,
        **kwargs: Any,
    ) -> Informer:
        """The informer of ``plural`` with these selectors, shared by every caller that asks for the same.

        ``resync`` of a shared informer is the shortest any caller asked for.
        """
        key = (plural, namespace, label_selector, field_selector)
        existing = self._informers.get(key)
        if existing is None:
            existing = self._informers[key] = Informer(
                self.client,
                plural,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                resync=resync,
                **kwargs,
            )
        elif resync is not None and (existing.resync is None or resync < existing.resync):
            existing.resync = resync
        return existing

    def add_controller(self, name: str, reconciler: Reconciler[K], queue: WorkQueue[K], workers: int = 1) -> None:
        """Run ``workers`` workers taking keys from ``queue`` into ``reconciler``.

        Logs as ``nodus.controllers.<name>``.
        """
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if any(c.name == name for c in self._controllers):
            raise ValueError(f"a controller named {name!r} is registered already")
        observer = None
        if self.metrics is not None:
            observer = queue.observer = self.metrics.queue(name, queue.__len__)
        self._controllers.append(
            _Controller(name, reconciler, queue, workers, logging.getLogger(f"nodus.controllers.{name}"), observer)
        )

    def add_runnable(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        """Run ``run()`` beside the controllers while leading (a loop that is not keyed, such as the scheduler's).

        It is cancelled when leadership is lost; returning ends only that runnable.
        """
        self._runnables.append((name, run))

    async def wait_synced(self) -> None:
        """Until every informer has listed once."""
        await asyncio.gather(*(informer.wait_synced() for informer in self._informers.values()))

    async def run(self) -> None:
        """Start informers, wait for them to sync, then run the controllers (while leading, with an elector).

        Runs until cancelled, or until the elector's run returns.
        """
        async with asyncio.TaskGroup() as tasks:
            informers = [tasks.create_task(i.run(), name=repr(i)) for i in self._informers.values()]
            try:
                self._log.info("waiting for %d informers to sync", len(informers))
                await self.wait_synced()
                if self.elector is not None:
                    await self.elector.run(self.run_controllers)
                else:
                    await self.run_controllers()
            finally:
                for task in informers:
                    task.cancel()

    async def run_controllers(self) -> None:
        """Run every controller's workers until cancelled (or until their queues shut down)."""
        names = ", ".join(f"{c.name} ({c.workers})" for c in self._controllers)
        self._log.info("starting controllers: %s", names or "none")
        async with asyncio.TaskGroup() as tasks:
            for name, run in self._runnables:
                tasks.create_task(_run_logged(name, run), name=name)
            for controller in self._controllers:
                for number in range(controller.workers):
                    tasks.create_task(_work(controller), name=f"{controller.name}-{number}")


def _project_terminating(exc: Exception) -> TypeGuard[errors.Forbidden]:
    """A 403 for creating content in a project that is being deleted: expected while a project goes."""
    return isinstance(exc, errors.Forbidden) and any(c.get("reason") == PROJECT_TERMINATING for c in exc.causes)


async def _run_logged(name: str, run: Callable[[], Awaitable[None]]) -> None:
    try:
        await run()
    except asyncio.CancelledError:
        raise
    except Exception:
        logging.getLogger(f"nodus.controllers.{name}").exception("%s stopped with an error", name)


async def _work(controller: _Controller[Any]) -> None:
    queue, log, observer = controller.queue, controller.log, controller.observer
    while True:
        try:
            key = await queue.get()
        except ShutDown:
            return
        started = time.perf_counter()
        try:
            result = await controller.reconciler.reconcile(key)
        except asyncio.CancelledError:
            queue.add(key)  # interrupted (leadership lost, shutting down): reconcile it again next time
            raise
        except TerminalError as exc:
            log.error("reconcile %s failed and will not be retried: %s", key, exc)
            queue.forget(key)
        except errors.Conflict as exc:
            # Expected under optimistic concurrency (another writer came first) and retried at once: a line
            # worth reading only when debugging.
            log.debug("reconcile %s hit a conflict, retrying: %s", key, exc.message)
            queue.add_rate_limited(key)
        except Exception as exc:
            if _project_terminating(exc):
                log.info("reconcile %s stopped: %s", key, exc.message)
                queue.forget(key)
            else:
                log.exception("reconcile %s failed (attempt %d), retrying", key, queue.num_requeues(key) + 1)
                queue.add_rate_limited(key)
        else:
            queue.forget(key)
            if result is not None and result.requeue_after is not None:
                queue.add_after(key, result.requeue_after)
        finally:
            queue.done(key)
            if observer is not None:
                observer.worked(time.perf_counter() - started)
