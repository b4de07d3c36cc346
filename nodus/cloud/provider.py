"""The provider interface: what Nodus asks of a cloud that supplies hosts for offerings.

The controllers decide (the scheduler picks an offering, the provisioner creates a ``Node`` in phase
``Booting``); a provider makes that decision real. ``boot`` brings up a host whose node agent then
registers the ``Node`` itself; ``terminate`` takes it down. Both are idempotent and keyed by the
Node's name, so a controller that restarts and reconciles every Node again does no harm. A provider
learns nothing from the controllers but Node objects and the offering they name; it reports
through the Node's status (``Failed`` for a boot that failed) and, for its capacity, through the
Offerings' ``status.capacity``.
"""

from __future__ import annotations

from typing import Any, Protocol

Object = dict[str, Any]


class Provider(Protocol):
    name: str

    def capacity(self, offering: Object) -> int | None:
        """How many hosts of ``offering`` the provider can run at once; None when it does not say."""

    def is_up(self, node_name: str) -> bool:
        """Whether the provider has a host (booting or running) for this Node."""

    async def boot(self, node: Object, offering: Object, join_token: str) -> None:
        """Start bringing up the host for ``node``; returns at once. Idempotent. ``join_token`` is a bootstrap
        token bound to the node's name: the host's agent exchanges it for its own node credential (as a
        cloud passes one in a VM's user data), so no host ever holds the controllers' credentials."""

    async def terminate(self, node_name: str, grace_seconds: float) -> None:
        """Take the host down: its agent gets ``grace_seconds`` to stop, then the host is gone. Idempotent."""

    def forget(self) -> None:
        """Stop tracking every host without touching it: leadership was lost and the next leader adopts them."""

    async def close(self) -> None:
        """The controller process is stopping: what the provider does with its hosts is its own (the simulated
        cloud takes them down; a real cloud's hosts outlive a controller restart)."""
