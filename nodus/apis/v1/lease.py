"""Lease (``leases.nodus.dev``): who holds a role (shaped like ``coordination.k8s.io/v1`` Lease).

The wire models of the kind: what the API server validates and what clients read, defined once.
"""

from __future__ import annotations

from pydantic import Field

from nodus.apis.v1.base import WireModel


class LeaseSpec(WireModel):
    """LeaseSpec names the current holder and how long its claim lasts."""

    acquire_time: str | None = Field(None, description="AcquireTime is when the current holder took the lease.")
    holder_identity: str | None = Field(None, description="HolderIdentity is the leader; empty when released.")
    lease_duration_seconds: int | None = Field(
        None, ge=1, description="LeaseDurationSeconds is how long others wait after renewTime before taking over."
    )
    lease_transitions: int | None = Field(None, ge=0, description="LeaseTransitions counts changes of holder.")
    renew_time: str | None = Field(None, description="RenewTime is the holder's last renewal.")


NODE_LEASE_PREFIX = "node."
"""A node's heartbeat Lease is named ``node.<node name>`` (ADR 0055). The prefix keeps node leases apart from the
controllers' election lease, whatever a host names itself; the longest Node name leaves room for it."""

NODE_NAME_MAX = 253 - len(NODE_LEASE_PREFIX)


def node_lease_name(node: str) -> str:
    """The name of the Lease that node ``node``'s agent renews."""
    return NODE_LEASE_PREFIX + node


def node_of_lease(name: str) -> str | None:
    """The node whose heartbeat Lease is named ``name``; None for other leases."""
    return name[len(NODE_LEASE_PREFIX) :] if name.startswith(NODE_LEASE_PREFIX) else None
