"""One numbered scheduler cycle: filter, score and bind every pending Work of a snapshot, in queue order.

:func:`run_cycle` is pure and synchronous: it reads only its :class:`~nodus.scheduler.snapshot.Snapshot`
(the clock is ``snapshot.now``) and returns decisions; the controller writes them (Pending ->
Provisioning with ``status.placement``, or ``reason: Unschedulable`` while the Attempt stays
Pending). The same snapshot always gives the same result.

Works are placed oldest first, and each binding consumes what it takes before the next Work is
considered: a cold start takes one host of its offering's capacity, a warm start takes that idle
host. So two Works never get the last host or the same idle host. Capacity in use is every Host of
the offering that still holds capacity (Booting and Ready ones, busy or idle); an offering without
a published capacity is unlimited. Reusing an idle host takes no new capacity.

The ranks of a gang epoch (a distributed Job) are placed all together or not at all, at the queue
position of their oldest pending rank (see ``gangs``): each group of offerings their network allows
is tried in a ledger trial that is rolled back, and only the chosen group's options are taken. A
gang that no group can hold takes nothing, and every pending rank is Unschedulable.

Cost: each distinct requirement shape (``filters.Requirements`` with its profile and expected
duration) is filtered against every offering and its options ranked once per cycle; per Work the
cycle then only walks the ranked options for the first one still available, which keeps a cycle
near O(shapes x offerings + works x offerings) with cheap steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from nodus.scheduler import explaining, filters, gangs, pools, scoring
from nodus.scheduler.capacity import Offering
from nodus.scheduler.capacityledger import CapacityLedger, Seat
from nodus.scheduler.rooms import Demand
from nodus.scheduler.snapshot import Network, Profile, Snapshot, Transport, Work, WorkKey, format_usd

_MICRO_USD = Decimal("0.000001")


@dataclass(frozen=True, slots=True)
class Binding:
    """The decision to run ``work`` on ``offering``: on the warm host ``node``, or on a new host when None.

    A pool binding has ``pool`` and its ``node`` and no offering (``offering`` is ''). ``gpu_indexes`` are
    the host's GPU ordinals given to the Work when it shares a host (None: the whole host).
    """

    work: WorkKey
    offering: str
    node: str | None
    rate_usd_per_hour: Decimal
    region_class: str
    interruptible: bool
    warm_reuse: bool
    expected_cost_usd: Decimal
    explain: str
    cycle: int
    # Where the host is: a gang's members' path classes (``gangs.path_class``) follow from these.
    provider: str = ""
    region: str = ""
    gpu_indexes: tuple[int, ...] | None = None
    pool: str | None = None

    def placement(self) -> dict[str, Any]:
        """The Attempt's ``status.placement`` as served (camelCase; ``node`` only for a warm reuse or a pool host)."""
        placement: dict[str, Any] = {}
        if self.pool is not None:
            placement["pool"] = self.pool
        if self.offering:
            placement["offering"] = self.offering
        if self.node is not None:
            placement["node"] = self.node
        if self.gpu_indexes is not None:
            placement["gpuIndexes"] = list(self.gpu_indexes)
        if self.provider:
            placement["provider"] = self.provider
            if self.region:
                placement["region"] = self.region
        placement.update(
            **({"regionClass": self.region_class} if self.region_class else {}),
            interruptible=self.interruptible,
            rateUSDPerHour=format_usd(self.rate_usd_per_hour),
            warmReuse=self.warm_reuse,
            explain=self.explain,
            cycle=self.cycle,
        )
        return placement


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """``work`` stays Pending this cycle; ``message`` says why, counted by reason, and what to change.

    ``waiting_for_capacity`` is True when some offering fits but every one of those is full, so
    the Work will be placed once capacity frees up without any change to the Job (for a gang rank:
    some group has hosts enough in all for the whole gang).
    """

    work: WorkKey
    message: str
    waiting_for_capacity: bool
    reason: str = "Unschedulable"


@dataclass(frozen=True, slots=True)
class CycleResult:
    """What one cycle decided, in the snapshot's Work order."""

    cycle: int
    bindings: list[Binding]
    unschedulable: list[Unschedulable]


def run_cycle(snapshot: Snapshot) -> CycleResult:
    """Decide every Work in ``snapshot`` (queue order). Pure: the snapshot is not changed."""
    offerings = sorted(snapshot.offerings, key=lambda o: o.id)
    by_id = {o.id: o for o in offerings}
    names = filters.family_names(offerings)
    ledger = CapacityLedger(offerings, snapshot.hosts, snapshot.now, snapshot.cold_start)
    plans: dict[tuple[filters.Requirements, Profile, timedelta, tuple[str, ...]], _Plan] = {}

    def plan_for(work: Work) -> _Plan:
        need = filters.Requirements.of(work, names)
        shape = (need, work.profile, work.expected_duration, work.avoid)
        plan = plans.get(shape)
        if plan is None:
            plan = plans[shape] = _Plan.build(need, work, offerings, ledger)
        return plan

    bindings: list[Binding] = []
    unschedulable: list[Unschedulable] = []
    for item in gangs.queue(snapshot.work):
        work_of = item.leader if isinstance(item, gangs.Gang) else item
        if work_of.pool is not None:
            members = item.members if isinstance(item, gangs.Gang) else (item,)
            for member in members:
                decided = _place_on_pool(snapshot, member, filters.Requirements.of(member, names), ledger)
                if isinstance(decided, Binding):
                    bindings.append(decided)
                else:
                    unschedulable.append(decided)
            continue
        if isinstance(item, gangs.Gang):
            if item.complete:  # else its other ranks are yet to be created or seen: decide nothing yet
                placed, waiting = _place_gang(snapshot.cycle, item, plan_for(item.leader), by_id, ledger)
                bindings += placed
                unschedulable += waiting
            continue
        work = item
        plan = plan_for(work)
        choice = scoring.choose(plan.ranked, work.profile, ledger.available)
        full = ledger.full(plan.fitting)
        if choice is None:
            unschedulable.append(Unschedulable(work.key, plan.unschedulable_message(full), bool(plan.fitting)))
            continue
        seat = ledger.take(choice.option)
        bindings.append(_binding(snapshot.cycle, work, choice, seat, plan, full))
    return CycleResult(snapshot.cycle, bindings, unschedulable)


def _place_on_pool(
    snapshot: Snapshot, work: Work, need: filters.Requirements, ledger: CapacityLedger
) -> Binding | Unschedulable:
    """Place ``work`` on a host of its pool (taking its room from ``ledger``), or say why not."""
    decided = pools.place(snapshot.cycle, work, need, ledger.pool_rooms(work.key.namespace), snapshot.fee)
    if isinstance(decided, pools.Refused):
        return Unschedulable(work.key, decided.message, decided.waiting)
    decided.room.take(pools.demand_of(work, need))
    return Binding(
        work=work.key,
        offering="",
        node=decided.room.host.name,
        rate_usd_per_hour=decided.rate,
        region_class="",
        interruptible=False,
        warm_reuse=decided.room.attempts > 1,
        expected_cost_usd=decided.rate * Decimal(work.expected_duration.total_seconds()) / 3600,
        explain=decided.explain,
        cycle=snapshot.cycle,
        provider="pool",
        gpu_indexes=decided.gpus,
        pool=work.pool,
    )


def _place_gang(
    cycle: int, gang: gangs.Gang, plan: _Plan, offerings: dict[str, Offering], ledger: CapacityLedger
) -> tuple[list[Binding], list[Unschedulable]]:
    """Bind every pending member of ``gang`` (taking from ``ledger``), or none and say why for each."""
    if not plan.fitting:
        # No offering fits a member at all: the plain message says what to change.
        message = plan.unschedulable_message([])
        return [], [Unschedulable(work.key, message, False) for work in gang.members]
    groups = plan.groups(gang.request.network, gang.request.transport)
    trial = gangs.try_groups(gang, groups, offerings, ledger)
    if not trial.candidates:
        message = explaining.gang_waiting(gang, trial)
        return [], [Unschedulable(work.key, message, trial.holdable) for work in gang.members]
    chosen = gangs.choose(trial.candidates, gang.leader.profile)
    head = explaining.gang_binding(gang, chosen, trial.candidates)
    full = ledger.full(plan.fitting)
    # Taken in the same order from the same ledger state as in the trial, so the same warm hosts.
    return [
        _binding(cycle, work, choice, ledger.take(choice.option), plan, full, head)
        for work, choice in zip(gang.members, chosen.choices, strict=True)
    ], []


class _Plan:
    """One requirement shape against every offering: which fit, their ranked options, and the rejected ones.

    ``rejected`` is (stage, offering id, reason), nearest miss (highest stage) first, then by id.
    Built once per shape and cycle; only its caches (messages, gang groups) change afterwards.
    """

    def __init__(self, fitting: list[Offering], ranked: list[scoring.Option], rejected: list[tuple[int, str, str]]):
        self.fitting = fitting
        self.ranked = ranked
        self.rejected = rejected
        # Many Attempts of one Job share a shape and, while capacity does not change, one message.
        self._messages: dict[tuple[tuple[str, str], ...], str] = {}
        self._groups: dict[tuple[Network, Transport], dict[gangs.GroupKey, list[scoring.Option]]] = {}

    @classmethod
    def build(
        cls, need: filters.Requirements, work: Work, offerings: Sequence[Offering], ledger: CapacityLedger
    ) -> _Plan:
        """Filter ``offerings`` (sorted by id) for ``need`` and rank the options of those that fit.

        On a shareable offering a Work that shares a host pays the offering's rate for its GPUs only
        (``rate x GPUs asked / GPUs per host``), so that is the rate filtered on and ranked by.
        """
        share = Demand(need.gpus, need.cpu, need.memory)
        fitting, rejected = filters.screen(need, [_priced(o, need) for o in offerings])
        options = [
            option
            for offering in fitting
            for option in scoring.options(
                offering,
                work.expected_duration,
                work.interruptible,
                ledger.had_room(offering.id) if filters.shares(need, offering) else ledger.had_idle(offering.id),
                avoided=offering.id in work.avoid,
                cold=ledger.boots(offering),
                share=share if filters.shares(need, offering) else None,
            )
        ]
        # Nearest miss (highest stage) first; the sort is stable, so offerings stay in id order.
        rejected.sort(key=_stage_descending)
        return cls(fitting, scoring.rank(options, work.profile), rejected)

    def unschedulable_message(self, full: list[tuple[str, str]]) -> str:
        """The Unschedulable message when every fitting offering is ``full`` (as the ledger's ``full`` words it)."""
        key = tuple(full)
        message = self._messages.get(key)
        if message is None:
            rejections = [(stage, reason) for stage, _, reason in self.rejected]
            rejections += [(filters.CAPACITY_STAGE, reason) for _, reason in full]
            message = self._messages[key] = explaining.unschedulable(rejections)
        return message

    def groups(self, network: Network, transport: Transport) -> dict[gangs.GroupKey, list[scoring.Option]]:
        """The ranked options split into the groups a gang under ``network`` and ``transport`` may use."""
        groups = self._groups.get((network, transport))
        if groups is None:
            groups = self._groups[network, transport] = gangs.partition(self.ranked, network, transport)
        return groups


def _priced(offering: Offering, need: filters.Requirements) -> Offering:
    """``offering`` as a Work sharing its host sees it: its rate for the GPUs the Work asks for."""
    if not filters.shares(need, offering) or need.gpus >= offering.gpus:
        return offering
    rate = (offering.rate_usd_per_hour * need.gpus / offering.gpus).quantize(_MICRO_USD, rounding=ROUND_HALF_UP)
    return dataclasses.replace(offering, rate_usd_per_hour=rate)


def _stage_descending(item: tuple[int, str, str]) -> int:
    return -item[0]


def _binding(
    cycle: int,
    work: Work,
    choice: scoring.Choice,
    seat: Seat,
    plan: _Plan,
    full: list[tuple[str, str]],
    gang: str | None = None,
) -> Binding:
    def rejected() -> Iterator[tuple[str, str]]:
        yield from full
        for _, offering_id, reason in plan.rejected:
            yield offering_id, reason

    offering, node = choice.option.offering, seat.node
    explain = explaining.binding(
        cycle, work.profile, work.interruptible, choice, node, rejected(), len(full) + len(plan.rejected)
    )
    if seat.gpu_indexes is not None:
        shared = ",".join(str(i) for i in seat.gpu_indexes)
        rate = format_usd(offering.rate_usd_per_hour)
        explain += f"\nshares its host: GPUs {shared} of {offering.gpus}, at ${rate}/h for them"
    if gang is not None:
        explain = f"{gang}\n{explain}"
    return Binding(
        work=work.key,
        offering=offering.id,
        node=node,
        rate_usd_per_hour=offering.rate_usd_per_hour,
        region_class=offering.region_class,
        interruptible=offering.interruptible,
        warm_reuse=choice.option.warm,
        expected_cost_usd=choice.option.cost,
        explain=explain,
        cycle=cycle,
        provider=offering.provider,
        region=offering.region,
        gpu_indexes=seat.gpu_indexes,
    )
