"""What is free on one host as a cycle binds: its GPU ordinals, vCPUs and memory (ADR 0048).

A host runs several attempts at once when each has disjoint GPU ordinals and their cpu and memory
requests fit together. A :class:`Room` starts from the host's shape (a pool host's discovered one,
or its offering's) minus what the unfinished attempts on it hold (``snapshot.Use``), and is
consumed by :meth:`Room.take` as the cycle binds, so two Works of one cycle never get the same GPU.

A request left unset counts as the host's per-GPU share of what the attempt takes
(``vCPUs x GPUs taken / host GPUs``; the same for memory): a 1-GPU Work on a 4-GPU host holds a
quarter of its cpu and memory unless it says otherwise. A Work that takes the whole host
(:attr:`Demand.whole`) needs an empty one: ``placement.dedicated: true``, or a CPU-only Work with
neither cpu nor memory set (it has no share to count). An attempt whose placement has no
``gpuIndexes`` (placed before hosts were shared, or a whole-host one) holds the whole host, so
nothing joins it.

GPU ordinals are given lowest first. The NVLink topology within a host is not consulted: on the
hosts Nodus knows (one NVSwitch domain per host, or PCIe only) any subset is as good as another.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from decimal import Decimal

from nodus.scheduler.capacity import Host


@dataclass(frozen=True, slots=True)
class Demand:
    """What one Work takes of a host: ``gpus`` GPUs and its cpu and memory requests (None: unset)."""

    gpus: int
    cpu: Decimal | None
    memory: Decimal | None
    whole: bool = False

    @property
    def dedicated_reason(self) -> str:
        """Why this Work needs an empty host, for messages."""
        if self.gpus or self.cpu is not None or self.memory is not None:
            return "the Work is dedicated (placement.dedicated)"
        return "the Work takes a whole host (it sets no resources.cpu or resources.memory)"


@dataclass(slots=True)
class Room:
    """One host's free GPUs, vCPUs and memory; the only thing here that changes as the cycle binds."""

    host: Host
    gpu_indexes: tuple[int, ...]
    vcpu: Decimal
    memory: Decimal
    free_gpus: list[int] = field(default_factory=list)
    free_cpu: Decimal = Decimal(0)
    free_memory: Decimal = Decimal(0)
    attempts: int = 0
    whole: bool = False
    dedicated: bool = False

    @classmethod
    def of(cls, host: Host, gpu_indexes: tuple[int, ...], vcpu: Decimal, memory: Decimal) -> Room:
        """``host`` of that shape, less what its attempts hold (``host.uses``)."""
        room = cls(host, gpu_indexes, vcpu, memory, sorted(gpu_indexes), vcpu, memory)
        for use in host.uses:
            room._hold(use.gpus, use.cpu, use.memory, use.whole, use.dedicated)
        if host.busy and not host.uses:
            room._hold((), None, None, True, False)  # bound this cycle by the controller: nothing known of it
        return room

    @property
    def gpus(self) -> int:
        return len(self.gpu_indexes)

    def needs(self, demand: Demand) -> tuple[Decimal, Decimal]:
        """The vCPUs and memory ``demand`` holds here: its requests, or its per-GPU share of the host."""
        if demand.whole:
            return self.vcpu, self.memory
        return self._share(demand.cpu, self.vcpu, demand.gpus), self._share(demand.memory, self.memory, demand.gpus)

    def why_not(self, demand: Demand) -> str | None:
        """Why ``demand`` does not fit here now (a reason that reads after the host's name), or None."""
        if self.dedicated:
            return "is held by a dedicated attempt"
        if self.whole:
            return "runs an attempt that holds the whole host"
        if demand.whole and self.attempts:
            return f"is in use ({_count(self.attempts, 'attempt')}) and {demand.dedicated_reason}"
        if len(self.free_gpus) < demand.gpus:
            return f"has {len(self.free_gpus)} of {self.gpus} GPUs free and the Work asks for {demand.gpus}"
        cpu, memory = self.needs(demand)
        if cpu > self.free_cpu:
            return f"has {_number(self.free_cpu)} of {_number(self.vcpu)} vCPUs free and the Work needs {_number(cpu)}"
        if memory > self.free_memory:
            return (
                f"has {_bytes(self.free_memory)} of {_bytes(self.memory)} memory free "
                f"and the Work needs {_bytes(memory)}"
            )
        return None

    def why_not_at(self, gpus: tuple[int, ...] | None, demand: Demand) -> str | None:
        """Why ``demand`` cannot have exactly the ordinals ``gpus`` here now (None: the whole host), or None.

        The provisioner's check that a placement it is about to assign still fits its host.
        """
        if gpus is None:
            return f"is in use ({_count(self.attempts, 'attempt')})" if self.attempts else None
        if demand.whole:
            return self.why_not(demand)
        taken = sorted(set(gpus) - set(self.free_gpus))
        if taken and not (self.dedicated or self.whole):
            return f"has GPU{'s' if len(taken) > 1 else ''} {','.join(str(i) for i in taken)} in use or absent"
        return self.why_not(dataclasses.replace(demand, gpus=len(gpus)))

    def left_after(self, demand: Demand) -> int:
        """Free GPUs left once ``demand`` is taken: the best fit leaves the fewest."""
        return 0 if demand.whole else len(self.free_gpus) - demand.gpus

    def take(self, demand: Demand) -> tuple[int, ...]:
        """Hold ``demand`` here (it must fit: :meth:`why_not` is None); returns the GPU ordinals given to it."""
        gpus = tuple(self.gpu_indexes) if demand.whole else tuple(self.free_gpus[: demand.gpus])
        cpu, memory = self.needs(demand)
        self._hold(gpus, cpu, memory, demand.whole, False)
        return gpus

    def copy(self) -> Room:
        """A copy to take from in a trial (a gang's) without changing this one."""
        return Room(
            self.host,
            self.gpu_indexes,
            self.vcpu,
            self.memory,
            list(self.free_gpus),
            self.free_cpu,
            self.free_memory,
            self.attempts,
            self.whole,
            self.dedicated,
        )

    def _hold(
        self, gpus: tuple[int, ...], cpu: Decimal | None, memory: Decimal | None, whole: bool, dedicated: bool
    ) -> None:
        self.attempts += 1
        self.whole = self.whole or whole
        self.dedicated = self.dedicated or dedicated
        taken = set(gpus)
        self.free_gpus = [i for i in self.free_gpus if i not in taken]
        self.free_cpu -= self._share(cpu, self.vcpu, len(gpus))
        self.free_memory -= self._share(memory, self.memory, len(gpus))

    def _share(self, request: Decimal | None, total: Decimal, gpus: int) -> Decimal:
        if request is not None:
            return request
        if not self.gpus:
            return Decimal(0)
        return total * gpus / self.gpus


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _number(value: Decimal) -> str:
    return f"{value.normalize():f}"


def _bytes(value: Decimal) -> str:
    gib = value / (1 << 30)
    return f"{gib.quantize(Decimal('0.1')).normalize():f}Gi"
