"""``nodus controllers``: every reconciler, wired to shared informers, under one leader.

What runs while this process leads (the ``nodus-controllers`` Lease): the Job controller, the Secret
pins (old Secret versions kept while Jobs pin them), billing (holds and charges of each attempt),
storage billing (each Job's stored bytes, by the hour), the status copies of Budgets and of Projects'
credits, the Pools (their status, and their hosts revoked when they go), the Pipelines (their stage
Jobs in dependency order, ADR 0052), the scheduler loop, the provisioner (attempts to hosts, idle
hosts released), node lifecycle (heartbeats), and, with a provider, the hosts controller that
boots and kills its hosts (the simulated cloud's are agent processes). Standbys keep their
informers synced so a takeover starts warm. Garbage collection of owned objects runs in the API
server (ADR 0005); TTL after finish is the Job controller's.

The controllers know the provider only as a :class:`~nodus.cloud.provider.Provider`: whoever starts
the process (``nodus controllers``, ``nodus dev``) chooses it and passes a factory in the settings.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from nodus.apis.v1 import labels, objects
from nodus.client import Client, ClientConfig, errors
from nodus.client.informers import Handler, Informer, Object
from nodus.client.leaderelection import LeaderElector
from nodus.client.workqueue import WorkQueue
from nodus.cloud.provider import Provider, StandsIn
from nodus.controllers.billing import (
    BUDGET_WAIT_INDEX,
    CREDIT_WAIT_INDEX,
    AttemptBilling,
    enqueue_attempts_of_job,
    enqueue_waiting,
    enqueue_waiting_for_budget,
    waiting_for_budget,
    waiting_for_credit,
)
from nodus.controllers.budgets import BudgetStatus
from nodus.controllers.credits import ProjectCredits, enqueue_on_cost
from nodus.controllers.jobs.gangplanning import TimeScales
from nodus.controllers.jobs.reconciling import (
    JOB_UID_INDEX,
    WAITING_FOR_JOB_INDEX,
    WAITING_INDEX,
    JobReconciler,
    job_uid_of,
    waiting_for_outputs_of,
    waiting_in,
)
from nodus.controllers.manager import Manager, enqueue_object, enqueue_owner
from nodus.controllers.metrics import ControllerMetrics
from nodus.controllers.nodes.draining import Draining
from nodus.controllers.nodes.hosts import Hosts
from nodus.controllers.nodes.lifecycle import NodeLifecycle, enqueue_node_of_lease
from nodus.controllers.nodes.provisioning import (
    NODE_INDEX,
    RAN_ON_INDEX,
    AttemptProvisioner,
    IdleHosts,
    enqueue_gang,
    nodes_of,
    ran_on,
)
from nodus.controllers.pipelines import OWNER_INDEX, PipelineReconciler, owner_uid
from nodus.controllers.pools import (
    ATTEMPT_HOST_INDEX,
    POOL_INDEX,
    PoolStatus,
    enqueue_pool_of_attempt,
    enqueue_pool_of_node,
    host_of,
    pool_of,
)
from nodus.controllers.scheduling import SchedulerLoop
from nodus.controllers.secrets import PINNING_INDEX, SecretPins, enqueue_pinned, pinned_secrets
from nodus.controllers.storagebilling import UNPAID_INDEX, StorageBilling, enqueue_unpaid, unpaid_in
from nodus.scheduler.capacity import PlatformFee

log = logging.getLogger("nodus.controllers")

LEASE_NAME = "nodus-controllers"


@dataclass
class ControllerSettings:
    """How ``nodus controllers`` runs."""

    kubeconfig: Path
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    workers: int = 8
    node_grace: timedelta = timedelta(seconds=40)
    boot_timeout: timedelta = timedelta(minutes=15)
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resync: float = 300.0
    # How long a hold funds an attempt before it is extended (tests shorten it).
    funded_window: timedelta = timedelta(minutes=10)
    # How long one billed hour of storage lasts (tests shorten it; it is billed as an hour all the same).
    storage_hour: timedelta = timedelta(hours=1)
    # The cloud that supplies hosts, built once per assembled process (a provider holds the hosts it runs);
    # None: no provider, only hosts whose agents were started by hand (their Nodes' provider is "manual").
    provider: Callable[[], Provider] | None = None
    # How often a provider that lists its hosts (a real cloud's) is swept for hosts no Node accounts for.
    sweep_interval: timedelta = timedelta(minutes=1)
    # What a pool attempt pays: the price book's platformFee (None: the shipped book's, ADR 0048).
    platform_fee: PlatformFee | None = None
    # Gang assembly budgets and checkpoint intervals times these (tests shrink them; 1 in production).
    time_scales: TimeScales = field(default_factory=TimeScales)
    # Where /metrics is served (HOST:PORT); None: measured all the same, not served.
    metrics_address: str | None = None


def _enqueue_readers_of_job(queue: WorkQueue[Any], jobs: Informer) -> Handler:
    """A Job changed: the Jobs waiting for admission on its outputs look again (``WAITING_FOR_JOB_INDEX``).
    Not every waiting Job of the project: in a burst of creates that was quadratic (each new Job woke every
    Job still Pending), and the controllers fell behind by hundreds of Jobs (docs/benchmarks.md §13)."""

    def handler(old: Object | None, new: Object | None) -> None:
        for obj in (old, new):
            if obj is not None:
                key = f"{obj['metadata'].get('namespace') or ''}/{obj['metadata']['name']}"
                for job in jobs.by_index(WAITING_FOR_JOB_INDEX, key):
                    queue.add((job["metadata"].get("namespace") or "", job["metadata"]["name"]))
                return

    return handler


def _enqueue_waiting_jobs(queue: WorkQueue[Any], jobs: Informer) -> Handler:
    """A Secret, Volume, Connection, Pool or Workspace changed: the Jobs of its project waiting for admission look
    again (these change rarely; a Job's readers are woken by ``_enqueue_readers_of_job``)."""

    def handler(old: Object | None, new: Object | None) -> None:
        for obj in (old, new):
            if obj is not None:
                namespace = str(obj["metadata"].get("namespace") or "")
                for job in jobs.by_index(WAITING_INDEX, namespace):
                    queue.add((namespace, job["metadata"]["name"]))
                return

    return handler


def _enqueue_nodes_of_attempt(queue: WorkQueue[Any]) -> Handler:
    def handler(old: Object | None, new: Object | None) -> None:
        for obj in (old, new):
            if obj is not None:
                for name in {*nodes_of(obj), *ran_on(obj)}:
                    queue.add((None, name))

    return handler


class Controllers:
    """The assembled controller process; ``run`` until cancelled."""

    def __init__(self, settings: ControllerSettings, client: Client) -> None:
        self.settings = settings
        self.client = client
        self.elector = LeaderElector(
            client,
            LEASE_NAME,
            settings.identity,
            lease_duration=settings.lease_duration,
            renew_deadline=settings.renew_deadline,
            retry_period=settings.retry_period,
            on_lost=self._forget_hosts,
        )
        self.metrics = ControllerMetrics()
        self.manager = manager = Manager(client, elector=self.elector, metrics=self.metrics)
        jobs = manager.informer("jobs", resync=settings.resync)
        attempts = manager.informer("attempts", resync=settings.resync)
        nodes = manager.informer("nodes", resync=settings.resync)
        offerings = manager.informer("offerings")
        referenced = {
            plural: manager.informer(plural, resync=settings.resync)
            # A Job's placement.pool must exist to admit it (the Pool is looked up, not pinned).
            for plural in ("secrets", "volumes", "connections", "pools", "workspaces")
        }
        jobs.add_index(WAITING_INDEX, waiting_in)
        jobs.add_index(WAITING_FOR_JOB_INDEX, waiting_for_outputs_of)
        attempts.add_index(JOB_UID_INDEX, job_uid_of)
        attempts.add_index(NODE_INDEX, nodes_of)
        attempts.add_index(RAN_ON_INDEX, ran_on)
        self.offerings = offerings
        workers = settings.workers

        job_queue: WorkQueue[Any] = WorkQueue()
        jobs.add_handler(enqueue_object(job_queue))
        attempts.add_handler(enqueue_owner(job_queue, "Job"))
        for informer in referenced.values():
            informer.add_handler(_enqueue_waiting_jobs(job_queue, jobs))
        jobs.add_handler(_enqueue_readers_of_job(job_queue, jobs))
        job_reconciler = JobReconciler(client, jobs, attempts, referenced, scales=settings.time_scales)
        manager.add_controller("jobs", job_reconciler, job_queue, workers)

        jobs.add_index(PINNING_INDEX, pinned_secrets)
        pins_queue: WorkQueue[Any] = WorkQueue()
        referenced["secrets"].add_handler(enqueue_object(pins_queue))
        jobs.add_handler(enqueue_pinned(pins_queue))
        manager.add_controller("secret-pins", SecretPins(client, referenced["secrets"], jobs), pins_queue, workers)

        billing_queue: WorkQueue[Any] = WorkQueue()
        attempts.add_index(CREDIT_WAIT_INDEX, waiting_for_credit)
        attempts.add_handler(enqueue_object(billing_queue))
        manager.informer("projects", resync=settings.resync).add_handler(enqueue_waiting(billing_queue, attempts))
        jobs.add_handler(enqueue_attempts_of_job(billing_queue, attempts, JOB_UID_INDEX))
        billing = AttemptBilling(client, attempts, jobs, settings.funded_window)
        manager.add_controller("billing", billing, billing_queue, workers)

        storage_queue: WorkQueue[Any] = WorkQueue()
        jobs.add_index(UNPAID_INDEX, unpaid_in)
        jobs.add_handler(enqueue_object(storage_queue))
        manager.informer("projects", resync=settings.resync).add_handler(enqueue_unpaid(storage_queue, jobs))
        storage_billing = StorageBilling(client, jobs, settings.storage_hour)
        manager.add_controller("storage-billing", storage_billing, storage_queue, workers)

        budgets = manager.informer("budgets", resync=settings.resync)
        attempts.add_index(BUDGET_WAIT_INDEX, waiting_for_budget)
        budgets.add_handler(enqueue_waiting_for_budget(billing_queue, attempts))
        budget_queue: WorkQueue[Any] = WorkQueue()
        budgets.add_handler(enqueue_object(budget_queue))
        manager.add_controller("budget-status", BudgetStatus(client, budgets), budget_queue, workers)

        credits_queue: WorkQueue[Any] = WorkQueue()
        projects = manager.informer("projects", resync=settings.resync)
        projects.add_handler(enqueue_object(credits_queue))
        attempts.add_handler(enqueue_on_cost(credits_queue, objects.Attempt))
        jobs.add_handler(enqueue_on_cost(credits_queue, objects.Job))
        manager.add_controller("project-credits", ProjectCredits(client, projects), credits_queue, workers)

        # Each Pool's status from its hosts and what runs on them; a deleted Pool's hosts revoked (ADR 0047).
        pools = manager.informer("pools", resync=settings.resync)
        nodes.add_index(POOL_INDEX, pool_of)
        attempts.add_index(ATTEMPT_HOST_INDEX, host_of)
        pool_queue: WorkQueue[Any] = WorkQueue()
        pools.add_handler(enqueue_object(pool_queue))
        nodes.add_handler(enqueue_pool_of_node(pool_queue))
        attempts.add_handler(enqueue_pool_of_attempt(pool_queue, nodes))
        manager.add_controller("pools", PoolStatus(client, pools, nodes, attempts), pool_queue, workers)

        # Each Pipeline's stage Jobs, created in dependency order, and its status (ADR 0052).
        pipelines = manager.informer("pipelines", resync=settings.resync)
        jobs.add_index(OWNER_INDEX, owner_uid)
        pipeline_queue: WorkQueue[Any] = WorkQueue()
        pipelines.add_handler(enqueue_object(pipeline_queue))
        jobs.add_handler(enqueue_owner(pipeline_queue, "Pipeline"))
        manager.add_controller("pipelines", PipelineReconciler(client, pipelines, jobs), pipeline_queue, workers)

        provision_queue: WorkQueue[Any] = WorkQueue()
        attempts.add_handler(enqueue_object(provision_queue))
        attempts.add_handler(enqueue_gang(provision_queue))
        self.cloud: Provider | None = settings.provider() if settings.provider is not None else None
        provider_name = self.cloud.name if self.cloud is not None else "manual"
        provisioner = AttemptProvisioner(client, attempts, nodes, offerings, provider_name)
        manager.add_controller("provisioner", provisioner, provision_queue, workers)

        # Only the nodes' heartbeat Leases (labelled with their node), not the controllers' own election lease.
        node_leases = manager.informer("leases", label_selector=labels.NODE, resync=settings.resync)
        lifecycle = NodeLifecycle(
            client, nodes, attempts, node_leases, grace=settings.node_grace, boot_timeout=settings.boot_timeout
        )
        for name, reconciler in (
            ("idle-hosts", IdleHosts(client, attempts, nodes)),
            ("draining", Draining(client, nodes, attempts)),
            ("node-lifecycle", lifecycle),
        ):
            queue: WorkQueue[Any] = WorkQueue()
            nodes.add_handler(enqueue_object(queue))
            attempts.add_handler(_enqueue_nodes_of_attempt(queue))
            if reconciler is lifecycle:
                node_leases.add_handler(enqueue_node_of_lease(queue))
            manager.add_controller(name, reconciler, queue, workers)

        if self.cloud is not None:
            host_queue: WorkQueue[Any] = WorkQueue()
            nodes.add_handler(enqueue_object(host_queue))
            attempts.add_handler(_enqueue_nodes_of_attempt(host_queue))
            hosts = Hosts(client, self.cloud, nodes, offerings, attempts)
            manager.add_controller("hosts", hosts, host_queue, workers)
            interval = settings.sweep_interval.total_seconds()
            manager.add_runnable("host-sweep", lambda: hosts.sweep_forever(interval))

        # Only the active provider's offerings may be cold-started; without one (--provider none) none may: hosts
        # come from Pools and agents started by hand, and no Node is created that nothing would boot.
        # A provider standing in for another (the fake cloud, ADR 0059) boots that one's offerings.
        cold_start = frozenset({_offering_provider(self.cloud)}) if self.cloud is not None else frozenset()
        self.scheduler = SchedulerLoop(
            client, attempts, nodes, offerings, cold_start=cold_start, fee=settings.platform_fee, metrics=self.metrics
        )
        manager.add_runnable("scheduler", self.scheduler.run)
        manager.add_runnable("capacity", self._publish_capacity)

    async def _publish_capacity(self) -> None:
        """Write the provider's capacity into each Offering's ``status.capacity`` once per leadership."""
        if self.cloud is None:
            return
        for offering in self.offerings.items():
            capacity = self.cloud.capacity(offering)
            status = offering.get("status") or {}
            if status.get("capacity") == capacity:
                continue
            try:
                await self.client.update(
                    "offerings", {**offering, "status": {**status, "capacity": capacity}}, subresource="status"
                )
            except (errors.Conflict, errors.NotFound):
                continue

    def _forget_hosts(self) -> None:
        if self.cloud is not None:
            self.cloud.forget()

    async def run(self) -> None:
        address = self.settings.metrics_address
        server = self.metrics.serve(address) if address else None
        try:
            await self.manager.run()
        finally:
            if server is not None:
                await asyncio.shield(asyncio.to_thread(server.shutdown))  # waits for its thread's loop to notice
                server.server_close()
            if self.cloud is not None:
                await asyncio.shield(self.cloud.close())


async def run(settings: ControllerSettings) -> None:
    """Run the controllers until cancelled."""
    config = ClientConfig.from_kubeconfig(settings.kubeconfig)
    async with Client(config, user_agent="nodus-controllers") as client:
        await Controllers(settings, client).run()


def _offering_provider(cloud: Provider) -> str:
    """The provider named by the offerings ``cloud`` boots hosts for: its own name unless it stands in for another."""
    return cloud.offering_provider if isinstance(cloud, StandsIn) else cloud.name
