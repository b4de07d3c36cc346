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
