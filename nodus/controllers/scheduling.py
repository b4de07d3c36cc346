"""The scheduler's loop: snapshot the informers, run one pure cycle, write its decisions.

Cycles are numbered and run one at a time, woken by any change to attempts, nodes or offerings (and
a periodic tick, for warm windows that expire with no event). A cycle's decisions are written
concurrently: a binding is one ``/status`` write per attempt (``Provisioning`` with
``status.placement``), carrying the resourceVersion the snapshot saw, so an attempt that changed
meanwhile (stopped, say) is refused and reconsidered next cycle rather than bound stale.

Between a write and the informer showing it, the loop *assumes* its bindings (as kube-scheduler
does): an assumed attempt is not offered again and the capacity it took stays taken. An attempt
placed on a new host holds that capacity as an in-flight host until the provisioner gives it a Node.

The ranks of a gang epoch are bound together in one cycle or not at all (``nodus.scheduler.gangs``),
but each binding is still its own write: when one fails, its rank stays Pending while its siblings
are placed, and the next cycle places it beside them. For that the snapshot tells each pending rank
where its epoch's placed siblings are (``Work.gang_placed``), counting assumed bindings the
informer does not show yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from datetime import timedelta
from typing import Any

from nodus.apimachinery import units
from nodus.apis.v1 import objects, phases
from nodus.client import Client, errors
from nodus.client.informers import Informer
from nodus.controllers.metrics import ControllerMetrics
from nodus.controllers.nodes.provisioning import NODE_INDEX, RAN_ON_INDEX, idle_since, never_came
from nodus.scheduler import capacity
from nodus.scheduler import cycle as cycles
from nodus.scheduler import snapshot as snapshots

Object = dict[str, Any]
log = logging.getLogger("nodus.controllers.scheduler")


SCHEDULING_INDEX = "scheduling"
PENDING, HELD, IN_FLIGHT = "pending", "held", "in-flight"


def scheduling_state(obj: Object) -> list[str]:
    """Index of attempts by what a cycle does with them, so that a cycle reads those, not every attempt: ``pending``
    (Pending, to place), ``held`` (Pending but stopped or being deleted: never placed), ``in-flight`` (placed, waiting
    for a new host). It reads the raw fields, no model: it runs on every attempt event."""
    status = obj.get("status") or {}
    phase = status.get("phase")
    spec = obj.get("spec") or {}
    if phase in (None, "Pending"):
        stopped = spec.get("stop") is not None or bool((obj.get("metadata") or {}).get("deletionTimestamp"))
        return [HELD if stopped else PENDING]
    if phase == "Provisioning" and not spec.get("node") and not (status.get("placement") or {}).get("node"):
        return [IN_FLIGHT]
    return []


class SchedulerLoop:
    """The scheduler loop. ``fee`` is the price book's platform fee (what a pool attempt pays; None: the shipped
    book's); ``cold_start`` the providers whose offerings may be cold-started: the active one's name, or empty
    without a provider (None: any, for tests that run no provider)."""

    def __init__(
        self,
        client: Client,
        attempts: Informer,
        nodes: Informer,
        offerings: Informer,
        *,
        concurrency: int = 8,
        tick: float = 5.0,
        fee: capacity.PlatformFee | None = None,
        cold_start: frozenset[str] | None = None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self._client = client
        self._attempts = attempts
        self._nodes = nodes
        self._offerings = offerings
        self._writes = asyncio.Semaphore(concurrency)
        self._tick = tick
        self._fee = fee if fee is not None else capacity.PlatformFee()
        self._cold_start = cold_start
        self._metrics = metrics
        self._wake = asyncio.Event()
        self._assumed: dict[tuple[str, str], cycles.Binding] = {}  # attempt key -> its binding being written
        # What each assumed binding holds of its host (a share of a pool or shareable host) until the informer shows it.
        self._assumed_uses: dict[tuple[str, str], capacity.Use] = {}
        self.cycle = 0
        with contextlib.suppress(ValueError):  # a shared informer another loop (a test's) has indexed already
            attempts.add_index(SCHEDULING_INDEX, scheduling_state)
        for informer in (attempts, nodes, offerings):
            informer.add_handler(self._changed)

    def _changed(self, old: Object | None, new: Object | None) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._tick):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.run_once()
            except Exception:
                log.exception("scheduling cycle %d failed", self.cycle)
                await asyncio.sleep(1.0)
                self._wake.set()

    async def run_once(self) -> int:
        """One cycle; returns how many attempts it bound. Nothing pending, no cycle (most wake-ups are
        heartbeats and the scheduler's own writes)."""
        pending = self._pending()
        if not pending:
            return 0
        started = time.perf_counter()
        snapshot = self.snapshot(pending)
        result = cycles.run_cycle(snapshot)
        by_key = {(a["metadata"]["namespace"], a["metadata"]["name"]): a for a in pending}
        writes = [self._bind(by_key[(b.work.namespace, b.work.name)], b) for b in result.bindings]
        writes += [
            self._unschedulable(by_key[(u.work.namespace, u.work.name)], u.message) for u in result.unschedulable
        ]
        outcomes = await asyncio.gather(*writes, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, errors.Conflict | errors.NotFound):
                log.error("scheduler write failed: %s", outcome)
        bound = sum(1 for o in outcomes[: len(result.bindings)] if o is True)
        if self._metrics is not None:
            self._metrics.cycle(time.perf_counter() - started, bound)
        return bound

    def _pending(self) -> list[Object]:
        """The Pending attempts to place, oldest first (as stored: the snapshot reads them). An assumption ends
        once the informer shows its attempt past Pending, or gone."""
        shown = {_key(obj) for obj in self._attempts.by_index(SCHEDULING_INDEX, HELD)}
        pending = self._attempts.by_index(SCHEDULING_INDEX, PENDING)
        shown.update(_key(obj) for obj in pending)
        for key in [key for key in self._assumed if key not in shown]:
            self._assumed.pop(key, None)
            self._assumed_uses.pop(key, None)
        out = []
        for obj in pending:
            if _key(obj) not in self._assumed:
                meta = obj["metadata"]
                out.append((meta.get("creationTimestamp") or "", meta["name"], obj))
        out.sort(key=lambda entry: entry[:2])
        return [obj for *_, obj in out]

    def snapshot(self, pending: list[Object] | None = None) -> snapshots.Snapshot:
        self.cycle += 1
        now = units.now()
        pending = self._pending() if pending is None else pending
        work = [snapshots.Work.from_object(a) for a in pending]
        if any(w.gang is not None for w in work):
            work = self._with_placed_siblings(work)
        offerings = [capacity.Offering.from_object(o) for o in self._offerings.items()]
        taken: dict[str, list[capacity.Use]] = {}
        for key, binding in self._assumed.items():
            if binding.node:
                held = self._assumed_uses.get(key)
                taken.setdefault(binding.node, []).extend([held] if held is not None else [])
        hosts = [self._host(node, taken) for node in self._nodes.items()]
        hosts += self._in_flight(now)
        return snapshots.Snapshot(
            cycle=self.cycle,
            now=now,
            work=work,
            offerings=offerings,
            hosts=hosts,
            fee=self._fee,
            cold_start=self._cold_start,
        )

    def _with_placed_siblings(self, work: list[snapshots.Work]) -> list[snapshots.Work]:
        """``work`` with ``gang_placed`` filled: the offerings of each gang epoch's placed, unfinished ranks."""
        wanted = {w.gang_key for w in work if w.gang_key is not None}
        placed: dict[snapshots.GangKey, list[str]] = {}
        for obj in self._attempts.items():
            gang = snapshots.gang_key(obj)
            if gang not in wanted:
                continue
            attempt = objects.read(objects.Attempt, obj)
            status = attempt.status
            offering = status.placement.offering if status.placement is not None else None
            assumed = self._assumed.get((attempt.metadata.namespace or "", attempt.metadata.name))
            if offering is None and assumed is not None:
                offering = assumed.offering  # bound by this loop; the informer has not shown it yet
            if offering and status.phase not in phases.ATTEMPT_FINISHED:
                placed.setdefault(gang, []).append(offering)
        return [
            dataclasses.replace(w, gang_placed=tuple(sorted(placed.get(w.gang_key, ())))) if w.gang_key else w
            for w in work
        ]

    def _host(self, node: Object, taken: dict[str, list[capacity.Use]]) -> capacity.Host:
        """The Node as the cycle sees it: what the unfinished attempts on it (and those just bound there) hold."""
        name = node["metadata"]["name"]
        on_it = self._attempts.by_index(NODE_INDEX, name)
        uses = [capacity.Use.from_object(attempt) for attempt in on_it] + taken.get(name, [])
        host = capacity.Host.from_object(node, busy=bool(on_it) or name in taken, uses=uses)
        if host.phase == "Booting" and never_came(self._attempts.by_index(RAN_ON_INDEX, name)):
            return dataclasses.replace(host, unschedulable=True)  # about to be released (IdleHosts)
        if host.busy or host.warm_until is None:
            return host
        shown = objects.read(objects.Node, node).status.idle_since
        if shown != idle_since(node, self._attempts.by_index(RAN_ON_INDEX, name)):
            # The warm window on the Node is from an earlier idle spell; the idle-host controller is about
            # to write this one's, and cannot release the host before it has.
            return dataclasses.replace(host, warm_until=None)
        return dataclasses.replace(host, warm_until=host.warm_until - RELEASE_MARGIN)

    def _in_flight(self, now: Any) -> list[capacity.Host]:
        """Placed attempts still waiting for a new Node: each holds one host of its offering."""
        out = []
        for obj in self._attempts.by_index(SCHEDULING_INDEX, IN_FLIGHT):
            placement = (obj.get("status") or {}).get("placement") or {}
            out.append(
                capacity.Host(
                    name=f"(new host for {obj['metadata']['name']})",
                    offering=str(placement.get("offering")),
                    phase="Booting",
                    busy=True,
                    unschedulable=True,
                    warm_until=None,
                )
            )
        return out

    async def _bind(self, attempt: Object, binding: cycles.Binding) -> bool:
        key = (attempt["metadata"]["namespace"], attempt["metadata"]["name"])
        placement = binding.placement()
        status = {k: v for k, v in (attempt.get("status") or {}).items() if k not in ("reason", "message")}
        status.update(phase="Provisioning", placement=placement, scheduledTime=units.format_time(units.now()))
        self._assumed[key] = binding
        self._assumed_uses[key] = capacity.Use.from_object({**attempt, "status": status})
        try:
            async with self._writes:
                await self._client.update("attempts", {**attempt, "status": status}, key[0], subresource="status")
        except BaseException:
            # Cancelled too (leadership lost mid-write): an assumption left behind would hide the attempt from
            # every later cycle while it stays Pending.
            self._assumed.pop(key, None)
            self._assumed_uses.pop(key, None)
            self._wake.set()
            raise
        return True

    async def _unschedulable(self, attempt: Object, message: str) -> bool:
        shown = objects.read(objects.Attempt, attempt).status
        if shown.reason == "Unschedulable" and shown.message == message:
            return False
        new = {**(attempt.get("status") or {}), "reason": "Unschedulable", "message": message}
        async with self._writes:
            await self._client.update(
                "attempts", {**attempt, "status": new}, attempt["metadata"]["namespace"], subresource="status"
            )
        return False


def _key(attempt: Object) -> tuple[str, str]:
    return (attempt["metadata"].get("namespace") or "", attempt["metadata"]["name"])


# A warm host is not offered in the last moments of its warm window: the idle-host release acts at
# the window's end on its own view, and a binding made just before might not have reached that view.
RELEASE_MARGIN = timedelta(seconds=3)
