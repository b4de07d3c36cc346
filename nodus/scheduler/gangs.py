"""Gangs: the ranks of one epoch of a distributed Job, placed all together or not at all.

A gang is the pending Works that share a :class:`~nodus.scheduler.snapshot.GangKey` (project, Job
uid, epoch number). :func:`queue` gathers them at the queue position of their oldest pending member,
so the cycle considers a gang once, in turn, like one Work.

Where the members may go is a **group**: the fitting offerings that share a :func:`group_key`.
``Colocated`` is one provider and one region, ``Regional`` one region class, ``Global`` anywhere.
Every pair of members must also have a network path that the gang's transport admits
(:func:`path_class`, :func:`admits`): ``Direct`` admits only Private and Direct paths, which exist
within one provider, so under ``Direct`` the provider joins the key of ``Regional`` and ``Global``
too; ``Auto`` admits every path.

:func:`try_groups` tries every group in key order inside a ledger trial that is rolled back: it
takes one option per pending member greedily, in the plan's ranked order, exactly as a single Work
takes its option (a warm idle host is one option, a cold start another). A group where every member
found one is a :class:`Candidate`; :func:`choose` picks one by the Work's profile and the cycle then
takes its options for real. So a gang never holds part of its hosts across cycles, and two gangs
can never each hold half of what both need: the older one gets all of it or neither gets any.

A gang whose epoch is only partly placed (a binding write failed, or a rank was re-created) must
join its placed siblings: only their group is tried, and the transport must hold against them too.
A gang the snapshot shows only part of (its other ranks not yet created, or not yet seen) is not
:attr:`Gang.complete` and waits without a decision: placing part of it could strand hosts.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Literal, NamedTuple, Protocol

from nodus.scheduler import scoring
from nodus.scheduler.capacity import Offering
from nodus.scheduler.snapshot import GangKey, GangRequest, Network, Profile, Transport, Work

PathClass = Literal["Private", "Direct", "Public", "Relayed"]
#: The members' offerings share this key when they are in one group (see :func:`group_key`).
GroupKey = tuple[str, ...]

#: The paths each ``spec.gang.transport`` admits between two members (ADR 0046 §18).
ADMITTED: Mapping[Transport, frozenset[PathClass]] = {
    "Direct": frozenset({"Private", "Direct"}),
    "Auto": frozenset({"Private", "Direct", "Public", "Relayed"}),
}


def accepts_inbound(offering: Offering) -> bool:
    """Whether hosts of ``offering`` accept inbound connections from their peers.

    Always True today: no Offering field says otherwise, so the price book never yields a Relayed
    path. It is the hook :func:`path_class` takes, for when one does.
    """
    return True


def path_class(a: Offering, b: Offering, inbound: Callable[[Offering], bool] = accepts_inbound) -> PathClass:
    """The network path between members on offerings ``a`` and ``b`` (the same offering too).

    ``Relayed`` when either side cannot accept inbound connections (``inbound``), else ``Private``
    within one provider and region, ``Direct`` within one provider across regions and ``Public``
    across providers. Pure.
    """
    if not (inbound(a) and inbound(b)):
        return "Relayed"
    return located_path((a.provider, a.region), (b.provider, b.region))


def located_path(a: tuple[str, str], b: tuple[str, str]) -> PathClass:
    """The path between two reachable hosts at (provider, region) ``a`` and ``b``: ``Private`` within one provider
    and region, ``Direct`` within one provider across regions, ``Public`` across providers."""
    if a[0] != b[0]:
        return "Public"
    return "Private" if a[1] == b[1] else "Direct"


def admits(transport: Transport, path: PathClass) -> bool:
    """Whether ``transport`` lets two members talk over ``path``."""
    return path in ADMITTED[transport]


def admitted(offerings: Sequence[Offering], transport: Transport) -> bool:
    """Whether every pair of members, on ``offerings`` (one entry per member), has a path ``transport`` admits."""
    return all(admits(transport, path_class(a, b)) for a, b in itertools.combinations(offerings, 2))


def group_key(offering: Offering, network: Network, transport: Transport) -> GroupKey:
    """The key members must share: (provider, region) for Colocated, (region class,) for Regional, () for Global.

    Under transport Direct the provider is added to the Regional and Global keys, since members
    of different providers would talk over Public paths.
    """
    if network == "Colocated":
        return offering.provider, offering.region
    key: GroupKey = (offering.region_class,) if network == "Regional" else ()
    return (*key, offering.provider) if transport == "Direct" else key


def describe(key: GroupKey, network: Network) -> str:
    """A group for messages: ``sim/us-east`` (Colocated), ``us`` or ``us on sim`` (Regional), ``sim`` or ``anywhere``.

    ``on sim`` is the provider a transport Direct adds to the key.
    """
    if network == "Colocated":
        return "/".join(key)
    if network == "Regional":
        return " on ".join(key)
    return key[0] if key else "anywhere"


def scope(network: Network, transport: Transport) -> str:
    """Where one group lies, for messages: ``one provider region``, ``one region class``, ... or '' (anywhere)."""
    if network == "Colocated":
        return "one provider region"
    direct = transport == "Direct"
    if network == "Regional":
        return "one region class on one provider" if direct else "one region class"
    return "one provider" if direct else ""


@dataclass(frozen=True, slots=True)
class Gang:
    """The pending members of one gang epoch, by rank, and where its already placed siblings are.

    ``request`` is the lowest pending rank's ``spec.gang``; every rank of an epoch has the same size,
    network and transport, and the same requirement shape and profile.
    """

    key: GangKey
    request: GangRequest
    members: tuple[Work, ...]
    placed: tuple[str, ...]

    @property
    def leader(self) -> Work:
        """The lowest pending rank, whose requirement shape and profile stand for every member's."""
        return self.members[0]

    @property
    def complete(self) -> bool:
        """Whether every rank is either pending here or placed already."""
        return len(self.members) + len(self.placed) >= self.request.size


def queue(works: Iterable[Work]) -> list[Work | Gang]:
    """``works`` (in queue order) with each gang's members gathered where its oldest member stands."""
    ranks: dict[GangKey, list[tuple[int, str, GangRequest, Work]]] = {}
    order: list[Work | GangKey] = []
    for work in works:
        if work.gang is None:
            order.append(work)
            continue
        key = GangKey(work.key.namespace, work.gang.job_uid, work.gang.number)
        if key not in ranks:
            ranks[key] = []
            order.append(key)
        ranks[key].append((work.gang.rank, work.key.name, work.gang, work))
    return [item if isinstance(item, Work) else _gang(item, ranks[item]) for item in order]


def partition(
    ranked: Iterable[scoring.Option], network: Network, transport: Transport
) -> dict[GroupKey, list[scoring.Option]]:
    """``ranked`` options split by :func:`group_key`, each group keeping the ranked order."""
    groups: dict[GroupKey, list[scoring.Option]] = {}
    for option in ranked:
        groups.setdefault(group_key(option.offering, network, transport), []).append(option)
    return groups


class Usage(NamedTuple):
    """One offering's hosts as the ledger counts them: holding capacity, its capacity (None: unlimited), idle."""

    in_use: int
    capacity: int | None
    idle: int


class Ledger(Protocol):
    """What a trial needs of the cycle's ledger."""

    def available(self, option: scoring.Option) -> bool: ...

    def take(self, option: scoring.Option) -> object:
        """Consume what ``option`` needs (what it returns, the seat taken, a trial ignores)."""
        ...

    def trial(self) -> AbstractContextManager[None]:
        """A block in which :meth:`take` may be called freely: on exit the ledger is as before."""
        ...

    def usage(self, offering: str) -> Usage: ...


@dataclass(frozen=True, slots=True)
class Candidate:
    """A group that can hold every pending member: one choice per member, in rank order."""

    key: GroupKey
    choices: tuple[scoring.Choice, ...]

    @property
    def total(self) -> Decimal:
        """The members' expected cost together."""
        return sum((choice.option.cost for choice in self.choices), Decimal(0))

    def cost_key(self) -> tuple[int, Decimal, GroupKey]:
        return max(c.option.tier for c in self.choices), self.total, self.key

    def speed_key(self) -> tuple[int, timedelta, int, Decimal, GroupKey]:
        # A gang starts when its last member can: the slowest start and the slowest family count.
        options = [c.option for c in self.choices]
        tier, start = max(o.tier for o in options), max(o.start for o in options)
        return tier, start, max(o.family_rank for o in options), self.total, self.key


@dataclass(frozen=True, slots=True)
class Trial:
    """What :func:`try_groups` found: the candidates and, for the message when there are none, the nearest group.

    ``free`` is how many members the nearest group (``nearest``, None when no group was tried) could
    take now, ``usage`` its offerings' hosts; ``holdable`` says whether some group has hosts enough
    in all, so the gang is placed once capacity frees up; ``largest`` is the most hosts any group
    has in all (None: unlimited).
    """

    candidates: tuple[Candidate, ...]
    nearest: GroupKey | None
    free: int
    usage: tuple[tuple[str, Usage], ...]
    holdable: bool
    largest: int | None


def try_groups(
    gang: Gang, groups: Mapping[GroupKey, Sequence[scoring.Option]], offerings: Mapping[str, Offering], ledger: Ledger
) -> Trial:
    """Try every group allowed for ``gang`` (``groups`` from :func:`partition`); leaves ``ledger`` as it found it.

    ``offerings`` maps ids to offerings, to find the placed siblings' group; a sibling on an offering
    gone from the price book constrains nothing, since where it is cannot be known.
    """
    siblings = [offerings[o] for o in gang.placed if o in offerings]
    allowed = {group_key(o, gang.request.network, gang.request.transport) for o in siblings}
    candidates: list[Candidate] = []
    nearest: tuple[int, GroupKey] | None = None
    largest: int | None = 0
    for key in sorted(groups):
        if siblings and key not in allowed:
            continue
        capacity = _capacity(groups[key])
        largest = None if largest is None or capacity is None else max(largest, capacity)
        choices = _fill(groups[key], len(gang.members), gang.leader.profile, ledger)
        chosen = [*siblings, *(c.option.offering for c in choices)]
        if len(choices) == len(gang.members) and admitted(chosen, gang.request.transport):
            candidates.append(Candidate(key, tuple(choices)))
        elif nearest is None or len(choices) > nearest[0]:
            nearest = len(choices), key
    if candidates or nearest is None:
        return Trial(tuple(candidates), None, 0, (), holdable=bool(candidates), largest=largest)
    free, key = nearest
    usage = tuple((o.id, ledger.usage(o.id)) for o in _offerings(groups[key]))
    # The placed siblings hold hosts of this very group (the only one tried when there are any).
    holdable = largest is None or largest - len(gang.placed) >= len(gang.members)
    return Trial((), key, free, usage, holdable, largest)


def choose(candidates: Sequence[Candidate], profile: Profile) -> Candidate:
    """The candidate ``profile`` picks, as :func:`scoring.choose` picks one Work's option, over whole gangs.

    Cost takes the lowest total expected cost; Speed the earliest start of the whole gang (its
    slowest member's), then the faster family, then the total; Balanced the candidate Speed would
    take among those within :data:`scoring.BALANCED_COST_TOLERANCE` of the cheapest total. A lower
    tier (``interruptible: Prefer``, avoided offerings) wins first, and ties break by group key.
    ``candidates`` must not be empty.
    """
    cheapest = min(candidates, key=Candidate.cost_key)
    if profile == "Cost":
        return cheapest
    if profile == "Speed":
        return min(candidates, key=Candidate.speed_key)
    tier, band = cheapest.cost_key()[0], cheapest.total * (1 + scoring.BALANCED_COST_TOLERANCE)
    return min((c for c in candidates if c.cost_key()[0] == tier and c.total <= band), key=Candidate.speed_key)


def _gang(key: GangKey, ranks: list[tuple[int, str, GangRequest, Work]]) -> Gang:
    ranks.sort(key=lambda rank: rank[:2])
    members = tuple(work for *_, work in ranks)
    # Every rank of one epoch has the same siblings placed; take the fullest view in case two differ.
    placed = max((work.gang_placed for work in members), key=len)
    return Gang(key, ranks[0][2], members, placed)


def _fill(ranked: Sequence[scoring.Option], count: int, profile: Profile, ledger: Ledger) -> list[scoring.Choice]:
    """Up to ``count`` choices taken one after another from ``ranked``, as if bound; then given back."""
    choices: list[scoring.Choice] = []
    with ledger.trial():
        while len(choices) < count:
            choice = scoring.choose(ranked, profile, ledger.available)
            if choice is None:
                break
            ledger.take(choice.option)
            choices.append(choice)
    return choices


def _offerings(options: Iterable[scoring.Option]) -> list[Offering]:
    return list({option.offering.id: option.offering for option in options}.values())


def _capacity(options: Iterable[scoring.Option]) -> int | None:
    """The hosts a group's offerings have in all (None: one of them is unlimited)."""
    total = 0
    for offering in _offerings(options):
        if offering.capacity is None:
            return None
        total += offering.capacity
    return total
