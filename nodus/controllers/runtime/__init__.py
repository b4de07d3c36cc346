"""The runtime of Nodus controllers: informers, work queues, leader election and the manager.

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

Everything here talks to the API server through :mod:`nodus.client`; nothing imports the server.
"""

from nodus.controllers.runtime.informers import Handler, IndexFunc, Informer, Key, Object, object_key
from nodus.controllers.runtime.leaderelection import LeaderElector
from nodus.controllers.runtime.manager import (
    Manager,
    Reconciler,
    Result,
    TerminalError,
    enqueue_object,
    enqueue_owner,
)
from nodus.controllers.runtime.workqueue import ShutDown, WorkQueue

__all__ = [
    "Handler",
    "IndexFunc",
    "Informer",
    "Key",
    "LeaderElector",
    "Manager",
    "Object",
    "Reconciler",
    "Result",
    "ShutDown",
    "TerminalError",
    "WorkQueue",
    "enqueue_object",
    "enqueue_owner",
    "object_key",
]
