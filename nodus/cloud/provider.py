"""The provider interface: what Nodus asks of a cloud that supplies hosts for offerings.

The controllers decide (the scheduler picks an offering, the provisioner creates a ``Node`` in phase
``Booting``); a provider makes that decision real. ``boot`` brings up a host whose node agent then
registers the ``Node`` itself; ``terminate`` takes it down. Both are idempotent and keyed by the
Node's name, so a controller that restarts and reconciles every Node again does no harm. A provider
learns nothing from the controllers but Node objects and the offering they name; it reports
through the Node's status (``Failed`` for a boot that failed) and, for its capacity, through the
Offerings' ``status.capacity``.

Hosts outlive the controller process that started them: a new leader adopts them (``adopt``) from what
the Nodes carry, which is what ``annotations`` asked the hosts controller to write there. The controllers
know providers only through these protocols; the concrete one is chosen where the process starts
(``nodus controllers --provider``) and handed to them as a factory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

Object = dict[str, Any]


class BootRefused(Exception):
    """The cloud refused to start a host, and asking again in the same way will not help: the hosts controller marks
    the Node ``Failed`` with ``reason`` (``CapacityBusy``: the offering is out of capacity right now, so its attempt
    is retried elsewhere; ``BootFailed``: a setting the operator must fix) and ``message``. Any other exception from
    :meth:`Provider.boot` is transient (throttling, the network) and the boot is retried."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Provider(Protocol):
    """A cloud's hosts, as the hosts controller drives them (one reconcile at a time per Node name).

    Every method but ``boot``, ``terminate`` and ``close`` returns at once and does no I/O that can block the
    event loop for long.
    """

    name: str
    """What Nodes the provisioner creates for this provider carry in ``spec.provider``."""

    def capacity(self, offering: Object) -> int | None:
        """How many hosts of ``offering`` the provider can run at once; None when it does not say."""

    def is_up(self, node_name: str) -> bool:
        """Whether the provider has a host (booting or running) for this Node."""

    def adopt(self, node: Object) -> bool:
        """Take over the host of ``node`` that an earlier controller process started, found from what the Node
        carries (see :meth:`annotations`) or what the provider keeps itself. True if such a host is up and is
        now tracked; False if there is none, or it is gone, or this provider tracks the Node already. Never
        starts or stops a host."""

    def annotations(self, node_name: str) -> dict[str, str]:
        """The annotations the Node should carry for a later controller to adopt its host (the simulated cloud:
        its agent's pid); empty while the provider has nothing to record. The hosts controller writes them once
        the Node is Ready, whenever they differ from the Node's."""

    async def boot(self, node: Object, offering: Object, join_token: str) -> None:
        """Start bringing up the host for ``node``; returns once the cloud has accepted the request (it does not wait
        for the host to come up). Idempotent. Raises :class:`BootRefused` when the cloud refuses it for good.
        ``join_token`` is a bootstrap token bound to the node's name: the host's agent exchanges it for its own node
        credential (as a cloud passes one in a VM's user data), so no host ever holds the controllers' credentials."""

    def kill(self, node_name: str) -> bool:
        """The host stops at once, without notice or grace (a forced power-off): for a Node Lost or Failed,
        whose agent has nothing left to report. False if there is no running host."""

    async def terminate(self, node_name: str, grace_seconds: float) -> None:
        """Take the host down: its agent gets ``grace_seconds`` to stop, then the host is gone. Idempotent."""

    def forget(self) -> None:
        """Stop tracking every host without touching it: leadership was lost and the next leader adopts them."""

    async def close(self) -> None:
        """The controller process is stopping: what the provider does with its hosts is its own (the simulated
        cloud takes them down; a real cloud's hosts outlive a controller restart)."""


@runtime_checkable
class FaultInjection(Protocol):
    """An optional capability of a provider: faults a user may inflict on purpose, to see recovery work.

    Only a provider with it gets the hosts controller's fault requests (``nodus sim preempt|kill|fail-boot``, as
    ``sim.nodus.dev/<action>-requested-at`` annotations on a Node). ``kill`` is the :class:`Provider`'s; a
    preemption needs nothing of the provider (the controller announces it on the Node and terminates the host
    at its deadline); a failed boot needs :meth:`fail_boot`.
    """

    def fail_boot(self, node_name: str) -> bool:
        """Make a host that is still booting never come up; False if it is not booting (then nothing changes)."""


@runtime_checkable
class Sweeping(Protocol):
    """An optional capability of a provider whose hosts it can list (a real cloud's, found by their tags).

    The hosts controller calls :meth:`sweep` when it starts leading and then periodically, so that no host outlives
    its Node: one whose Node was deleted while no controller led, or that a controller started and then died before
    its Node recorded it. Hosts of known Nodes are adopted on the way.
    """

    async def sweep(self, known: Mapping[str, str]) -> list[str]:
        """Check every host this provider runs for this cluster against ``known`` (node name -> Node uid: every Node of
        this provider, in any phase): track (adopt) those of a known Node, terminate the others (those younger than a
        short grace are spared: their Node may not have reached the caller's cache yet). Returns the node names whose
        hosts it terminated."""


@runtime_checkable
class StandsIn(Protocol):
    """An optional capability of a provider that boots hosts for another provider's offerings: the fake cloud plays
    the simulated cloud's price book (ADR 0059). The scheduler then cold-starts the offerings of
    ``offering_provider`` rather than those named like the provider; its Nodes still carry the provider's own name."""

    offering_provider: str
