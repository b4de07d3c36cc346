"""What one scheduler cycle hands out: capacity in use, idle hosts and hosts' free room, consumed as it binds.

The :class:`CapacityLedger` is the cycle's only mutable state (``nodus.scheduler.cycle`` owns the order of
decisions; this owns what they take). Built from the snapshot's Offerings and Hosts at the cycle's start, it answers
whether a ranked option is still available, takes it (a :class:`Seat`: the warm host, or a new one, and the GPUs
given), and runs a gang's trial placement that is rolled back. Pure: no clock of its own, no I/O.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from nodus.apis.v1 import phases
from nodus.scheduler import filters, gangs, scoring
from nodus.scheduler.capacity import Host, Offering
from nodus.scheduler.rooms import Demand, Room


class CapacityLedger:
    """Capacity in use, idle hosts and hosts' free room, consumed as the cycle binds. The only mutable state.

    Idle hosts (``_idle``) are taken whole; a shareable offering's usable hosts (``_rooms``) and every pool
    host (``_pools``, by project) are shared by what fits in their :class:`~nodus.scheduler.rooms.Room`.
    An idle host of a shareable offering is in both: taken whole it is gone from its rooms, shared it is gone
    from the idle hosts.
    """

    def __init__(
        self, offerings: Sequence[Offering], hosts: Sequence[Host], now: datetime, cold_start: frozenset[str] | None
    ) -> None:
        self._capacity = {o.id: o.capacity for o in offerings}
        self._cold_start = cold_start
        self._in_use = dict.fromkeys(self._capacity, 0)
        self._idle: dict[str, list[str]] = {}
        self._rooms: dict[str, list[Room]] = {}
        self._pools: dict[str, list[Room]] = {}
        by_id = {o.id: o for o in offerings}
        for host in sorted(hosts, key=lambda h: h.name):
            if host.pool is not None:
                assert host.shape is not None
                room = Room.of(host, host.shape.gpu_indexes, host.shape.vcpu, host.shape.memory)
                self._pools.setdefault(host.pool.project, []).append(room)
                continue
            offering = by_id.get(host.offering or "")
            if offering is None:
                continue  # an offering gone from the price book: nothing can be placed on it
            if host.holds_capacity():
                self._in_use[offering.id] += 1
            idle = host.is_idle_at(now)
            if idle:
                self._idle.setdefault(offering.id, []).append(host.name)
            if offering.shareable and (idle or (host.busy and _joinable(host))):
                shape = tuple(range(offering.gpus))
                self._rooms.setdefault(offering.id, []).append(Room.of(host, shape, offering.vcpu, offering.memory))
        self._had_idle = frozenset(self._idle)
        self._had_room = frozenset(self._rooms)
        for names in self._idle.values():
            names.reverse()  # so pop() hands out hosts in name order

    def had_idle(self, offering: str) -> bool:
        """Whether the offering had an idle host when the cycle began."""
        return offering in self._had_idle

    def had_room(self, offering: str) -> bool:
        """Whether the (shareable) offering had a host others may join when the cycle began."""
        return offering in self._had_room

    def boots(self, offering: Offering) -> bool:
        """Whether a new host of ``offering`` may be started: its provider is the active one."""
        return self._cold_start is None or offering.provider in self._cold_start

    def pool_rooms(self, project: str) -> list[Room]:
        """Every pool host of ``project`` (by name), with what is free on it now in the cycle."""
        return self._pools.get(project, [])

    def available(self, option: scoring.Option) -> bool:
        offering = option.offering.id
        if option.warm:
            if option.share is not None:
                return self._best_room(offering, option.share) is not None
            return bool(self._idle.get(offering))
        capacity = self._capacity[offering]
        return capacity is None or self._in_use[offering] < capacity

    def take(self, option: scoring.Option) -> Seat:
        """Consume what ``option`` needs; returns the warm host's name (None for a new host) and its GPUs."""
        offering = option.offering.id
        share = option.share
        if option.warm and share is not None:
            room = self._best_room(offering, share)
            assert room is not None
            name = room.host.name
            if name in self._idle.get(offering, ()):
                self._idle[offering].remove(name)
            return Seat(name, room.take(share))
        if option.warm:
            name = self._idle[offering].pop()
            for room in self._rooms.get(offering, ()):
                if room.host.name == name:
                    room.whole = True  # taken whole: nothing joins it
            return Seat(name, None)
        self._in_use[offering] += 1
        # A new host: a share of it gets its first GPUs; the rest is room for later cycles, once the Node exists.
        return Seat(None, tuple(range(share.gpus)) if share is not None else None)

    def _best_room(self, offering: str, demand: Demand) -> Room | None:
        """The room of ``offering`` where ``demand`` fits with the fewest GPUs left free, then by name."""
        fitting = [room for room in self._rooms.get(offering, ()) if room.why_not(demand) is None]
        return min(fitting, key=lambda room: (room.left_after(demand), room.host.name), default=None)

    @contextlib.contextmanager
    def trial(self) -> Iterator[None]:
        """Take freely inside the block; on exit the ledger is as it was (a gang's trial placement)."""
        in_use, idle = dict(self._in_use), {offering: list(names) for offering, names in self._idle.items()}
        rooms = self._rooms
        self._rooms = {offering: [room.copy() for room in kept] for offering, kept in rooms.items()}
        try:
            yield
        finally:
            self._in_use, self._idle, self._rooms = in_use, idle, rooms

    def usage(self, offering: str) -> gangs.Usage:
        """The offering's hosts holding capacity, its capacity and its idle hosts, as of now in the cycle."""
        return gangs.Usage(self._in_use[offering], self._capacity[offering], len(self._idle.get(offering, ())))

    def full(self, offerings: Sequence[Offering]) -> list[tuple[str, str]]:
        """(offering id, reason) for each of ``offerings`` with neither an idle host nor capacity left, or whose
        provider is not the active one and that has no idle host."""
        full = []
        for offering in offerings:
            if self._idle.get(offering.id):
                continue
            if not self.boots(offering):
                full.append((offering.id, filters.unbooted_reason(offering.provider, self._cold_start)))
                continue
            capacity = self._capacity[offering.id]
            if capacity is None or self._in_use[offering.id] < capacity:
                continue
            full.append((offering.id, filters.full_reason(self._in_use[offering.id], capacity)))
        return full


@dataclass(frozen=True, slots=True)
class Seat:
    """What the cycle took for a binding: the warm host (None: a new one) and its GPUs given (None: whole host)."""

    node: str | None
    gpu_indexes: tuple[int, ...] | None


def _joinable(host: Host) -> bool:
    """Whether a busy host of a shareable offering may take more attempts (its room says how many)."""
    return not host.unschedulable and host.phase in phases.NODE_USABLE
