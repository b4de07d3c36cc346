"""``nodus agent``: one per host. Registers its Node, heartbeats, runs the Attempts bound to it.

The agent is an API client like any other. It watches the Attempts labelled with its node
(``nodus.dev/node=<name>``) and its own Node, and converges: an attempt assigned here that has not
ended gets a run: several at once when each was placed on its own GPUs of a shared host, else one at a time
(``nodus.agent.sharing``); an attempt with ``spec.stop`` is stopped
(SIGTERM, then SIGKILL after its grace period). Its Node is its lifeline:

* marked ``Lost`` (heartbeats lapsed, say after a network partition): its attempts have been
  replaced elsewhere, so it kills whatever still runs and exits, never running a slot twice;
* marked ``Terminating`` with a deadline (``nodus.dev/terminate-at``, a preemption notice): it stops
  its attempts before the deadline, reports them ``Lost``/``Preempted`` and exits;
* ``Failed`` (the host never booted): it exits;
* deleted, or its credential refused: the host was revoked; it stops everything and exits.

It authenticates with its own node credential (``nodus.agent.identity``), which it renews as it
runs; the node authorizer lets it read and write only its Node, its Attempts and what they pin. An
Attempt that disappears while its run goes on (deleted with its finalizers stripped by an
administrator) is stopped at once: nothing runs that no Attempt accounts for.

SIGTERM or SIGINT to the agent means the host is going away now: the same as a notice with a short
deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import urllib.parse
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import nodus
from nodus.agent import dialing, gpus, hostshape, images, podengine, podnet, sharing, spotnotice
from nodus.agent.contract import HostFacts
from nodus.agent.identity import NodeIdentity
from nodus.agent.podman import PodmanRuntime
from nodus.agent.running import AttemptRun
from nodus.agent.runtime import Runtime
from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects, phases
from nodus.apis.v1.attempt import StopRequest
from nodus.apis.v1.lease import node_lease_name
from nodus.client import Client, errors
from nodus.client.informers import Informer

Object = dict[str, Any]
log = logging.getLogger("nodus.agent")
DRAINED = "Drained"  # the stop reason of a drain (nodus.controllers.nodes.draining)


@dataclass
class AgentSettings:
    node_name: str
    # None on a Pool's host, which reports the shape it discovers instead (ADR 0047).
    offering: str | None
    work_dir: Path
    gpus: int | None = None
    heartbeat_interval: timedelta = timedelta(seconds=10)
    shutdown_grace: float = 10.0
    # Host directories programs must not see: the agent's kubeconfig and the control plane's files.
    hidden: tuple[str, ...] = ()
    # A PEM file of extra CA certificates for https inputs and git sources (beside the system's).
    trust_ca: str | None = None
    # Multiplies checkpoint intervals and waits: tests run an hour of cadence in minutes.
    checkpoint_time_scale: float = 1.0
    # Where a gang's other hosts reach this one (its mesh endpoint and, on rank 0, the rendezvous).
    advertise_address: str = "127.0.0.1"
    # Destinations (ADR 0032): loopback endpoints allowed (tests, nodus dev); endpoints never reached
    # (HOST[:PORT]; the API server's own address is added at registration).
    allow_loopback_endpoints: bool = False
    forbid_addresses: tuple[str, ...] = ()
    # Registries pulled from over plain HTTP or unverified TLS (HOST:PORT), as Docker's insecure-registries.
    insecure_registries: tuple[str, ...] = ()
    # The instance metadata service (an EC2 host's http://169.254.169.254): polled for spot interruption notices.
    metadata_url: str | None = None


class Agent:
    def __init__(
        self, settings: AgentSettings, client: Client, runtime: Runtime, identity: NodeIdentity | None = None
    ) -> None:
        self.settings = settings
        self.client = client
        self.runtime = runtime
        self.identity = identity
        self.runs: dict[str, AttemptRun] = {}
        self._kick = asyncio.Event()
        self._leaving: str | None = None
        self._refused: set[str] = set()  # attempts refused (sharing.Refuse) whose Failed report is written
        self._reports: set[asyncio.Task[Object]] = set()
        self.host: HostFacts | None = None
        self.attempts = Informer(client, "attempts", label_selector=f"nodus.dev/node={settings.node_name}")
        self.node = Informer(client, "nodes", field_selector=f"metadata.name={settings.node_name}")
        self.attempts.add_handler(self._changed)
        self.node.add_handler(self._changed)

    def _changed(self, old: Object | None, new: Object | None) -> None:
        self._kick.set()

    async def run(self) -> None:
        # A pool host has no offering: it reports the shape it finds (register).
        offering = await self.client.get("offerings", self.settings.offering) if self.settings.offering else None
        await self.register(offering)
        async with asyncio.TaskGroup() as tasks:
            # Heartbeats start at once: a restarted agent must beat its Node's grace, and preparing the
            # container runtime (leftover pods, the Open network) can take longer than the grace of a test.
            beating = tasks.create_task(self._heartbeat())
            if isinstance(self.runtime, PodmanRuntime):
                await self._prepare_containers(self.runtime)
            watching = [tasks.create_task(self.attempts.run()), tasks.create_task(self.node.run())]
            if self.identity is not None:
                watching.append(tasks.create_task(self.identity.rotate_forever(self.client, self._revoked)))
            if self.settings.metadata_url:
                notices = spotnotice.watch(self.settings.metadata_url, self._report_notice)
                watching.append(tasks.create_task(notices))
            try:
                await self.attempts.wait_synced()
                await self.node.wait_synced()
                await self._converge_forever()
            finally:
                for task in (*watching, beating):
                    task.cancel()

    async def _prepare_containers(self, containers: PodmanRuntime) -> None:
        """What running Jobs in their images needs on this host: the image cache, the GPUs as CDI devices and the
        Open egress network with its rules against the control plane (ADR 0040, 0041)."""
        assert self.host is not None
        await self._remove_leftover_pods()
        self.host.images = images.ImageCache(
            insecure_registries=self.settings.insecure_registries, work_dir=self.settings.work_dir / "images"
        )
        try:
            found = await asyncio.to_thread(gpus.discover)
            self.host.cdi = await asyncio.to_thread(gpus.CdiDevices.for_host, found)
        except gpus.CdiError as exc:
            log.warning("GPUs are not given to containers: %s", exc)
        server = urllib.parse.urlsplit(self.client.config.server).hostname or "127.0.0.1"
        control_plane = [server, *self.settings.forbid_addresses]
        containers.open_network = await asyncio.to_thread(podnet.ensure_open_network, control_plane)

    async def _remove_leftover_pods(self) -> None:
        """Pods an earlier run of this agent left (it died; conmon kept them): their programs stop here, and
        their attempts start afresh once the agent converges (or on another node, when this one is gone)."""
        if not isinstance(self.runtime, PodmanRuntime):
            return
        left = await asyncio.to_thread(podengine.remove_pods_under, self.settings.work_dir)
        if left:
            log.info("removed %d pods an earlier run of this agent left", left)

    async def register(self, offering: Object | None) -> None:
        """Report the Node Ready (it exists: the provisioner or the credential exchange created it). A Pool's host
        (``spec.pool``) reports the shape it discovers (``nodus.agent.hostshape``); others their ``offering``'s."""
        name = self.settings.node_name
        try:
            node = await self.client.get("nodes", name)
        except errors.NotFound:
            await self._remove_leftover_pods()
            raise SystemExit(f"node {name} does not exist (deleted?); start the agent under a new node name") from None
        view = objects.read(objects.Node, node)
        if view.spec.pool is not None:
            if self.settings.offering:
                raise SystemExit(
                    f"node {name} is a host of pool {view.spec.pool.project}/{view.spec.pool.name}: it reports its own "
                    "shape; start the agent without --offering"
                )
            capacity, gpu_indexes = await self._discovered_shape()
            spec: Object = {}
        else:
            if offering is None or view.spec.offering != self.settings.offering:
                raise SystemExit(
                    f"node {name} provides offering {view.spec.offering}, not {self.settings.offering}: start the "
                    f"agent with --offering {view.spec.offering}"
                )
            spec = offering.get("spec") or {}
            gpus = self.settings.gpus if self.settings.gpus is not None else int(spec.get("gpus") or 0)
            capacity = {
                "gpus": gpus,
                "cpu": str(spec.get("vcpu", "")),
                **{k: spec[k] for k in ("memory", "disk") if spec.get(k)},
            }
            gpu_indexes = list(range(gpus))
        policy = await asyncio.to_thread(  # resolves the forbidden names: blocking
            dialing.host_policy,
            self.settings.allow_loopback_endpoints,
            self.settings.forbid_addresses,
            self.client.config.server,
        )
        self.host = HostFacts(
            name,
            self.settings.offering or "",
            gpu_indexes,
            self.settings.work_dir,
            self.settings.hidden,
            trust_ca=self.settings.trust_ca,
            mtbi=_mtbi(spec),
            checkpoint_time_scale=self.settings.checkpoint_time_scale,
            mesh_host=self.settings.advertise_address,
            destinations=policy,
        )
        phase = view.status.phase
        if phase in ("Lost", "Failed", "Terminating"):
            await self._remove_leftover_pods()
            raise SystemExit(f"node {name} is {phase}; start the agent under a new node name")
        now = units.now()
        status = {
            **(node.get("status") or {}),
            "phase": "Ready",
            "readyTime": units.format_time(now),
            "heartbeatTime": units.format_micro_time(now),
            "capacity": capacity,
            "gpuIndexes": gpu_indexes,
            "addresses": [
                {"type": "Hostname", "address": socket.gethostname()},
                {"type": "InternalIP", "address": "127.0.0.1"},
            ],
            "runtime": self.runtime.name,
            "agentVersion": nodus.__version__,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "AgentReady",
                    "message": "The node agent is registered and heartbeating.",
                    "lastTransitionTime": units.format_time(now),
                }
            ],
        }
        status.pop("reason", None)
        status.pop("message", None)
        await self.client.update("nodes", {**node, "status": status}, subresource="status")
        log.info(
            "node %s registered (%s, %d GPUs, runtime %s)",
            name,
            f"offering {self.settings.offering}" if self.settings.offering else "pool host",
            len(gpu_indexes),
            self.runtime.name,
        )

    async def _discovered_shape(self) -> tuple[Object, list[int]]:
        """A pool host's capacity and GPU ordinals as it finds them; ``--gpus`` overrides the count (more than
        were found: ordinals from 0, as on a host whose GPUs the agent is told of)."""
        shape = await asyncio.to_thread(hostshape.discover, self.settings.work_dir)
        capacity = shape.capacity(self.settings.gpus)
        found = [gpu.index for gpu in shape.gpus]
        count = int(capacity["gpus"])
        indexes = found[:count] if count <= len(found) else list(range(count))
        return capacity, indexes

    async def _heartbeat(self) -> None:
        """Renew the node's heartbeat Lease every interval (ADR 0055): one small write that only Lease watchers
        see, where a Node status write would reach every Node watcher. The Node's status is written only when
        something in it changes."""
        interval = self.settings.heartbeat_interval.total_seconds()
        node = self.settings.node_name
        while True:
            await asyncio.sleep(interval)
            renewal = {"spec": {"holderIdentity": node, "renewTime": units.format_micro_time(units.now())}}
            try:
                try:
                    await self.client.patch("leases", node_lease_name(node), renewal)
                except errors.NotFound:
                    await self._heartbeat_without_lease(node)
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)

    async def _heartbeat_without_lease(self, node: str) -> None:
        """No Lease to renew: the Node is gone (leave), or the lifecycle controller has not created its Lease yet
        (it does once it sees the Node), and until then the heartbeat goes on the Node's status."""
        patch = {"status": {"heartbeatTime": units.format_micro_time(units.now())}}
        try:
            await self.client.patch("nodes", node, patch, subresource="status")
        except errors.NotFound:
            self.leave("the Node was deleted", 0)

    async def _report_notice(self, notice: dict[str, str]) -> None:
        """The provider's notice that it takes this host back, on the Node for the controllers to act on."""
        patch = {"status": {"preemptionNotice": notice}}
        await self.client.patch("nodes", self.settings.node_name, patch, subresource="status")

    def _revoked(self, why: str) -> None:
        self.leave(why, 0)

    def leave(self, why: str, grace: float, *, reason: str = "NodeLost", expected: bool = False) -> None:
        """Stop every run within ``grace`` and exit once they have reported. ``expected``: an ordinary end (the
        host scaled down, the agent told to stop), logged at INFO rather than as a warning."""
        if self._leaving is None:
            log.log(logging.INFO if expected else logging.WARNING, "leaving: %s", why)
            self._leaving = why
        for run in self.runs.values():
            run.request_stop("HostGone", grace, lost_reason=reason)
        self._kick.set()

    async def _converge_forever(self) -> None:
        while True:
            self._converge()
            if self._leaving is not None and all(r.task is None or r.task.done() for r in self.runs.values()):
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), 1.0)
            self._kick.clear()

    def _converge(self) -> None:
        node = self.node.get(None, self.settings.node_name)
        if node is not None:
            self._watch_node(node)
        for attempt in self.attempts.items():
            view = objects.read(objects.Attempt, attempt)
            uid, spec = view.metadata.uid, view.spec
            run = self.runs.get(uid)
            if run is None:
                finished = view.status.phase in phases.ATTEMPT_FINISHED
                if finished or spec.node != self.settings.node_name or self._leaving:
                    continue
                assert self.host is not None
                going = (_holding(r.view) for r in self.runs.values() if r.task is not None and not r.task.done())
                decided = sharing.decide(_holding(view), self.host.gpu_indexes, going)
                if isinstance(decided, sharing.Wait):
                    continue  # a run it may not share the host with goes on; it starts when that one ends
                if isinstance(decided, sharing.Refuse):
                    self._refuse(attempt, decided.message)
                    continue
                # Each run sees only its own GPUs: CDI devices, NVIDIA_VISIBLE_DEVICES and NODUS env (ADR 0048).
                host = dataclasses.replace(self.host, gpu_indexes=list(decided.gpus))
                run = AttemptRun(attempt, self.client, self.runtime, host)
                self.runs[uid] = run
                if spec.stop:
                    _request_stop(run, spec.stop)
                run.start()
                continue
            run.update(attempt)
            if spec.stop:
                _request_stop(run, spec.stop)
            else:
                run.withdraw_stop()
        present = {attempt["metadata"]["uid"] for attempt in self.attempts.items()}
        for uid, run in list(self.runs.items()):
            if uid in present:
                continue
            if run.task is not None and not run.task.done():
                # Its Attempt is gone (deleted with its finalizers stripped): nothing may run that no Attempt
                # accounts for, and nobody would bill it.
                run.request_stop("AttemptDeleted", 0, lost_reason="AttemptDeleted")
            else:
                del self.runs[uid]

    def _refuse(self, attempt: Object, message: str) -> None:
        """End an attempt this host cannot run (``sharing.Refuse``) ``Failed``, once; written in the background."""
        uid = attempt["metadata"]["uid"]
        if uid in self._refused:
            return
        self._refused.add(uid)
        log.warning("refusing attempt %s: %s", attempt["metadata"]["name"], message)
        patch = {
            "metadata": {"resourceVersion": attempt["metadata"].get("resourceVersion")},
            "status": {
                "phase": "Failed",
                "reason": sharing.REASON,
                "message": message,
                "finishTime": units.format_time(units.now()),
            },
        }
        task = asyncio.create_task(
            self.client.patch(
                "attempts", attempt["metadata"]["name"], patch, attempt["metadata"]["namespace"], subresource="status"
            )
        )
        self._reports.add(task)  # kept until done: the loop holds only a weak reference to a task
        task.add_done_callback(self._reports.discard)
        task.add_done_callback(lambda done: self._refused.discard(uid) if done.exception() else None)

    def _watch_node(self, obj: Object) -> None:
        node = objects.read(objects.Node, obj)
        status = node.status
        phase = status.phase
        if phase == "Lost":
            self.leave("the node was marked Lost; its attempts have been replaced", 0)
        elif phase == "Failed":
            self.leave("the node was marked Failed", 0)
        elif phase == "Terminating":
            deadline_text = node.metadata.annotations.get(labels.TERMINATE_AT)
            grace = self.settings.shutdown_grace
            if deadline_text:
                grace = max((units.parse_time(deadline_text) - units.now()).total_seconds() - 1.0, 0.0)
            reason = "Preempted" if status.reason == "Preempted" else "NodeLost"
            self.leave(
                f"the node is terminating ({status.reason})",
                grace,
                reason=reason,
                expected=status.reason == "ScaledDown",
            )


def _holding(attempt: objects.Attempt) -> sharing.Holding:
    """What an attempt holds of this host: its placement's GPU ordinals (None: the whole host), dedicated or not."""
    placement = attempt.status.placement
    indexes = placement.gpu_indexes if placement is not None else None
    dedicated = attempt.spec.placement is not None and attempt.spec.placement.dedicated is True
    return sharing.Holding(tuple(indexes) if indexes is not None else None, dedicated)


def _request_stop(run: AttemptRun, stop: StopRequest) -> None:
    deadline = units.time_or_none(stop.deadline)
    if stop.reason == DRAINED:
        # A drain takes the host away from this attempt only: it ends Lost (replaced elsewhere, restoring the
        # checkpoint it takes now) while the host stays up, cordoned.
        grace = float(stop.grace_period_seconds)
        if deadline is not None:
            grace = max(min(grace, (deadline - units.now()).total_seconds() - 1.0), 0.0)
        run.request_stop(DRAINED, grace, lost_reason=DRAINED)
        return
    run.request_stop(
        stop.reason,
        float(stop.grace_period_seconds),
        checkpoint=bool(stop.checkpoint),
        deadline=deadline,
        requested_time=stop.requested_time,
    )


def _mtbi(offering_spec: Object) -> timedelta | None:
    """The offering's mean time between interruptions, when it is interruptible."""
    text = offering_spec.get("meanTimeBetweenInterruptions")
    return units.parse_duration(str(text)) if offering_spec.get("interruptible") and text else None
