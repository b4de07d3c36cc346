"""One fake host: what ``nodus agent`` does for its Node, through the API with the host's own node credential.

A :class:`FakeHost` exchanges its join token for a node credential (``POST nodecredentials``, as
``nodus.agent.identity``), reports its Node ``Ready`` with its offering's shape (as ``Agent.register``), renews its
Lease ``node.<name>`` (ADR 0055) when the process's heartbeat loop says, renews its credential halfway through its
lifetime, and runs the Attempts bound to it as :class:`~nodus.cloud.fakeattempts.FakeRun`\\ s. It reacts to its
Node as the agent does (``Agent._watch_node``): ``Lost`` or ``Failed`` stops every run at once, ``Terminating``
stops them before the deadline (``Lost``/``Preempted`` for a preemption), and a host that has left writes nothing
more. :meth:`FakeHost.kill` is the host vanishing: nothing is written from then on.

Every request goes through the process's one shared :class:`~nodus.client.Client` (one connection pool for all
hosts), with this host's bearer token set on the request: the node authorizer sees each host as itself.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, Literal

import orjson

import nodus
from nodus.agent import sharing
from nodus.apimachinery import units
from nodus.apis.v1 import labels, objects, phases
from nodus.apis.v1.lease import node_lease_name
from nodus.client import Client, errors
from nodus.client.rest import path
from nodus.cloud.fakeattempts import SANDBOX, FakeRun

Object = dict[str, Any]
log = logging.getLogger("nodus.cloud.fakehosts")

CREDENTIALS = "/apis/nodus.dev/v1/nodecredentials"
_MERGE_PATCH = "application/merge-patch+json"
_TERMINAL_DELAYS = (0.2, 0.5, 1.0, 2.0, 5.0)
DRAINED = "Drained"  # the stop reason of a drain (nodus.controllers.nodes.draining)
State = Literal["joining", "ready", "leaving", "gone"]


class FakeHost:
    """The host of Node ``name`` providing ``offering`` (its spec ``shape``), joining with ``join_token``."""

    def __init__(
        self,
        client: Client,
        name: str,
        offering: str,
        shape: Object,
        join_token: str,
        default_duration: timedelta,
        credential_lifetime: timedelta | None = None,
    ) -> None:
        """``credential_lifetime`` asks for node credentials that short (at least 10 s); None: the server's."""
        self.client = client
        self.name = name
        self.offering = offering
        self.shape = shape
        self.gpu_indexes = tuple(range(int(shape.get("gpus") or 0)))
        self.state: State = "joining"
        self.runs: dict[str, FakeRun] = {}
        self._join_token: str | None = join_token
        self._token = ""
        self._issued = self._expires = 0.0
        self._default = default_duration
        self._lifetime = credential_lifetime
        self._refused: set[str] = set()
        self._reports: set[asyncio.Task[None]] = set()  # kept until done: the loop holds tasks weakly

    # Joining

    async def join(self) -> None:
        """Exchange the join token and report the Node ``Ready``; the host is ``gone`` if either is refused for good
        (the Node was deleted or failed meanwhile). Other failures raise: the caller retries."""
        if self._join_token is not None:
            spec = {"nodeName": self.name, "offering": self.offering}
            try:
                await self._exchange(self._join_token, spec)
            except (errors.Unauthorized, errors.Forbidden, errors.Conflict, errors.NotFound) as exc:
                self._gone(f"the join token was refused: {exc}")
                return
            self._join_token = None  # used: not kept beyond the exchange
        try:
            node = await self._json("GET", path("nodes", None, self.name))
        except errors.NotFound:
            self._gone("its Node does not exist")
            return
        if (node.get("status") or {}).get("phase") in ("Lost", "Failed", "Terminating"):
            self._gone(f"its Node is {node['status']['phase']}")
            return
        await self._json("PUT", path("nodes", None, self.name, "status"), {**node, "status": self._ready(node)})
        if self.state == "joining":  # not killed or told to leave meanwhile
            self.state = "ready"

    def _ready(self, node: Object) -> Object:
        """The Node's status as ``Agent.register`` writes it, with the offering's shape."""
        now = units.now()
        capacity = {
            "gpus": len(self.gpu_indexes),
            "cpu": str(self.shape.get("vcpu", "")),
            **{k: self.shape[k] for k in ("memory", "disk") if self.shape.get(k)},
        }
        status = {
            **(node.get("status") or {}),
            "phase": "Ready",
            "readyTime": units.format_time(now),
            "heartbeatTime": units.format_micro_time(now),
            "capacity": capacity,
            "gpuIndexes": list(self.gpu_indexes),
            "addresses": [{"type": "Hostname", "address": self.name}, {"type": "InternalIP", "address": "127.0.0.1"}],
            "runtime": SANDBOX,
            "agentVersion": nodus.__version__,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "AgentReady",
                    "message": "The node agent is registered and heartbeating (a fake host).",
                    "lastTransitionTime": units.format_time(now),
                }
            ],
        }
        status.pop("reason", None)
        status.pop("message", None)
        return status

    async def _exchange(self, token: str, spec: Object) -> None:
        if self._lifetime is not None:
            spec = {**spec, "expirationSeconds": int(self._lifetime.total_seconds())}
        body = {"apiVersion": "nodus.dev/v1", "kind": "NodeCredentialRequest", "spec": spec}
        status = (await self._json("POST", CREDENTIALS, body, token=token)).get("status") or {}
        self._expires = units.parse_time(str(status["expirationTimestamp"])).timestamp()
        self._issued = time.time()
        self._token = str(status["token"])

    # Heartbeats and the credential

    async def beat(self) -> None:
        """Renew the Lease (ADR 0055); before the lifecycle controller has created it, the heartbeat goes on the
        Node's status, and a Node gone makes the host leave. Renews the credential when half its life is over."""
        if self.state not in ("ready", "leaving"):
            return
        if time.time() >= self._issued + (self._expires - self._issued) / 2:
            try:
                await self._exchange(self._token, {"nodeName": self.name})
            except (errors.Unauthorized, errors.Forbidden, errors.Conflict) as exc:
                self.leave(f"the node credential could not be renewed: {exc}", 0)
                return
            except Exception as exc:
                # The credential is still good for half its life: the renewal is tried again next beat, and this
                # beat's Lease renewal goes on.
                log.warning("fake host %s: renewing its credential failed (%s)", self.name, exc)
        now = units.format_micro_time(units.now())
        renewal = {"spec": {"holderIdentity": self.name, "renewTime": now}}
        try:
            await self._json("PATCH", path("leases", None, node_lease_name(self.name)), renewal)
        except errors.NotFound:
            try:
                await self._json("PATCH", path("nodes", None, self.name, "status"), {"status": {"heartbeatTime": now}})
            except errors.NotFound:
                self.leave("the Node was deleted", 0)

    # Converging

    def converge(self, node: Object | None, attempts: Iterable[Object]) -> None:
        """Act on the Node and the Attempts bound to this host, as ``Agent._converge``: start runs, pass stops on,
        stop runs whose Attempt is gone; leave when the Node says so."""
        if self.state in ("joining", "gone"):
            return
        if node is not None:
            self._watch_node(objects.read(objects.Node, node))
        present: set[str] = set()
        for attempt in attempts:
            view = objects.read(objects.Attempt, attempt)
            uid = view.metadata.uid
            present.add(uid)
            run = self.runs.get(uid)
            if run is None:
                if view.status.phase in phases.ATTEMPT_FINISHED or view.spec.node != self.name:
                    continue
                if self.state == "leaving":
                    continue
                run = self._new_run(attempt, view)
                if run is None:
                    continue
            run.update(attempt)
            stop = view.spec.stop
            if stop is not None:
                # A drain takes the host from this attempt only: it ends Lost (Drained), as the agent's does.
                lost = DRAINED if stop.reason == DRAINED else None
                run.request_stop(stop.reason, float(stop.grace_period_seconds), lost_reason=lost)
        for uid, run in list(self.runs.items()):
            if uid not in present:
                if run.going:
                    run.request_stop("AttemptDeleted", 0, lost_reason="AttemptDeleted")
                else:
                    del self.runs[uid]
        if self.state == "leaving" and not any(run.going for run in self.runs.values()):
            self.state = "gone"

    def _new_run(self, attempt: Object, view: objects.Attempt) -> FakeRun | None:
        going = (_holding(run.view) for run in self.runs.values() if run.going)
        decided = sharing.decide(_holding(view), self.gpu_indexes, going)
        if isinstance(decided, sharing.Wait):
            return None
        if isinstance(decided, sharing.Refuse):
            if view.metadata.uid not in self._refused:
                self._refused.add(view.metadata.uid)
                status = {"phase": "Failed", "reason": sharing.REASON, "message": decided.message}
                task = asyncio.create_task(self.report(attempt, {**status, "finishTime": _now()}, True))
                self._reports.add(task)
                task.add_done_callback(self._reports.discard)
            return None
        run = FakeRun(attempt, decided.gpus, self.report, self._default)
        self.runs[view.metadata.uid] = run
        run.start()
        return run

    def _watch_node(self, node: objects.Node) -> None:
        phase = node.status.phase
        if phase == "Lost":
            self.leave("the node was marked Lost; its attempts have been replaced", 0)
        elif phase == "Failed":
            self.leave("the node was marked Failed", 0)
        elif phase == "Terminating":
            deadline = units.time_or_none(node.metadata.annotations.get(labels.TERMINATE_AT))
            grace = 10.0 if deadline is None else max((deadline - units.now()).total_seconds() - 1.0, 0.0)
            reason = "Preempted" if node.status.reason == "Preempted" else "NodeLost"
            self.leave(f"the node is terminating ({node.status.reason})", grace, reason=reason)

    def leave(self, why: str, grace: float, *, reason: str = "NodeLost") -> None:
        """Stop every run (fake programs stop at once, well within ``grace``); the host is ``gone`` once they have
        reported, and from then on renews nothing."""
        if self.state in ("ready", "joining"):
            log.info("fake host %s leaving: %s", self.name, why)
            self.state = "leaving"
        for run in self.runs.values():
            run.request_stop("HostGone", grace, lost_reason=reason)
        if not any(run.going for run in self.runs.values()):
            self.state = "gone"

    def kill(self) -> None:
        """The host vanishes: its runs are cancelled and nothing more is written or renewed."""
        self.state = "gone"
        for run in self.runs.values():
            run.kill()

    def _gone(self, why: str) -> None:
        log.warning("fake host %s gives up: %s", self.name, why)
        self.state = "gone"

    # Requests

    async def report(self, attempt: Object, status: Object, terminal: bool) -> None:
        """PATCH an Attempt's status as this host, as ``AttemptRun._report``: a terminal report is retried until it
        lands; a refusal (the Attempt deleted, or no longer this node's) ends the reporting."""
        meta = attempt["metadata"]
        delays = itertools.chain(_TERMINAL_DELAYS, itertools.repeat(10.0)) if terminal else iter((0.5, 1.0))
        url = path("attempts", meta["namespace"], meta["name"], "status")
        for delay in delays:
            if self.state == "gone" and not terminal:
                return
            try:
                await self._json("PATCH", url, {"status": status})
                return
            except (errors.NotFound, errors.Forbidden):
                return
            except Exception as exc:
                phase = status.get("phase")
                log.warning("fake host %s: reporting %s of %s failed (%s)", self.name, phase, meta["name"], exc)
                await asyncio.sleep(delay)

    async def _json(self, method: str, url: str, body: Object | None = None, *, token: str | None = None) -> Object:
        headers = {"Authorization": f"Bearer {token or self._token}"}
        kwargs: dict[str, Any] = {"headers": headers}
        if body is not None:
            headers["Content-Type"] = _MERGE_PATCH if method == "PATCH" else "application/json"
            kwargs["content"] = orjson.dumps(body)
        response = await self.client.request(method, url, **kwargs)
        value = orjson.loads(response.content) if response.content else {}
        return value if isinstance(value, dict) else {}


def _holding(attempt: objects.Attempt) -> sharing.Holding:
    """What an attempt holds of the host, as ``nodus.agent.daemon`` reads it."""
    placement = attempt.status.placement
    indexes = placement.gpu_indexes if placement is not None else None
    dedicated = attempt.spec.placement is not None and attempt.spec.placement.dedicated is True
    return sharing.Holding(tuple(indexes) if indexes is not None else None, dedicated)


def _now() -> str:
    return units.format_time(units.now())
