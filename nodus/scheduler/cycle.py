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

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from nodus.scheduler import explaining, filters, gangs, scoring
from nodus.scheduler.snapshot import Host, Network, Offering, Profile, Snapshot, Transport, Work, WorkKey, format_usd


@dataclass(frozen=True, slots=True)
class Binding:
    """The decision to run ``work`` on ``offering``: on the warm host ``node``, or on a new host when None."""

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

    def placement(self) -> dict[str, Any]:
        """The Attempt's ``status.placement`` as served (camelCase; ``node`` only for a warm reuse)."""
        placement: dict[str, Any] = {"offering": self.offering}
        if self.node is not None:
            placement["node"] = self.node
        if self.provider:
            placement.update(provider=self.provider, region=self.region)
        placement.update(
            regionClass=self.region_class,
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
    ledger = _Ledger(offerings, snapshot.hosts, snapshot.now)
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
        node = ledger.take(choice.option)
        bindings.append(_binding(snapshot.cycle, work, choice, node, plan, full))
    return CycleResult(snapshot.cycle, bindings, unschedulable)


def _place_gang(
    cycle: int, gang: gangs.Gang, plan: _Plan, offerings: dict[str, Offering], ledger: _Ledger
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
    def build(cls, need: filters.Requirements, work: Work, offerings: Sequence[Offering], ledger: _Ledger) -> _Plan:
        """Filter ``offerings`` (sorted by id) for ``need`` and rank the options of those that fit."""
        fitting, rejected = filters.screen(need, offerings)
        options = [
            option
            for offering in fitting
            for option in scoring.options(
                offering,
                work.expected_duration,
                work.interruptible,
                ledger.had_idle(offering.id),
                avoided=offering.id in work.avoid,
            )
        ]
        # Nearest miss (highest stage) first; the sort is stable, so offerings stay in id order.
        rejected.sort(key=_stage_descending)
        return cls(fitting, scoring.rank(options, work.profile), rejected)

    def unschedulable_message(self, full: list[tuple[str, str]]) -> str:
        """The Unschedulable message when every fitting offering is ``full`` (as ``_Ledger.full`` words it)."""
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


class _Ledger:
    """Capacity in use and idle hosts per offering, consumed as the cycle binds. The only mutable state."""

    def __init__(self, offerings: Sequence[Offering], hosts: Sequence[Host], now: datetime) -> None:
        self._capacity = {o.id: o.capacity for o in offerings}
        self._in_use = dict.fromkeys(self._capacity, 0)
        self._idle: dict[str, list[str]] = {}
        for host in sorted(hosts, key=lambda h: h.name):
            if host.offering not in self._capacity:
                continue  # an offering gone from the price book: nothing can be placed on it
            if host.holds_capacity():
                self._in_use[host.offering] += 1
            if host.is_idle_at(now):
                self._idle.setdefault(host.offering, []).append(host.name)
        self._had_idle = frozenset(self._idle)
        for names in self._idle.values():
            names.reverse()  # so pop() hands out hosts in name order

    def had_idle(self, offering: str) -> bool:
        """Whether the offering had an idle host when the cycle began."""
        return offering in self._had_idle

    def available(self, option: scoring.Option) -> bool:
        offering = option.offering.id
        if option.warm:
            return bool(self._idle.get(offering))
        capacity = self._capacity[offering]
        return capacity is None or self._in_use[offering] < capacity

    def take(self, option: scoring.Option) -> str | None:
        """Consume what ``option`` needs; returns the warm host's name, or None for a new host."""
        offering = option.offering.id
        if option.warm:
            return self._idle[offering].pop()
        self._in_use[offering] += 1
        return None

    @contextlib.contextmanager
    def trial(self) -> Iterator[None]:
        """Take freely inside the block; on exit the ledger is as it was (a gang's trial placement)."""
        in_use, idle = dict(self._in_use), {offering: list(names) for offering, names in self._idle.items()}
        try:
            yield
        finally:
            self._in_use, self._idle = in_use, idle

    def usage(self, offering: str) -> gangs.Usage:
        """The offering's hosts holding capacity, its capacity and its idle hosts, as of now in the cycle."""
        return gangs.Usage(self._in_use[offering], self._capacity[offering], len(self._idle.get(offering, ())))

    def full(self, offerings: Sequence[Offering]) -> list[tuple[str, str]]:
        """(offering id, reason) for each of ``offerings`` with neither an idle host nor capacity left."""
        full = []
        for offering in offerings:
            capacity = self._capacity[offering.id]
            if capacity is None or self._idle.get(offering.id) or self._in_use[offering.id] < capacity:
                continue
            full.append((offering.id, filters.full_reason(self._in_use[offering.id], capacity)))
        return full


def _stage_descending(item: tuple[int, str, str]) -> int:
    return -item[0]


def _binding(
    cycle: int,
    work: Work,
    choice: scoring.Choice,
    node: str | None,
    plan: _Plan,
    full: list[tuple[str, str]],
    gang: str | None = None,
) -> Binding:
    def rejected() -> Iterator[tuple[str, str]]:
        yield from full
        for _, offering_id, reason in plan.rejected:
            yield offering_id, reason

    offering = choice.option.offering
    explain = explaining.binding(
        cycle, work.profile, work.interruptible, choice, node, rejected(), len(full) + len(plan.rejected)
    )
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
    )
