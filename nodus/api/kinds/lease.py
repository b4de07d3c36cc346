"""Lease (``leases.nodus.dev/v1``, cluster-scoped): leader election among controller processes.

Shaped like ``coordination.k8s.io/v1`` Lease. A candidate takes the lease by creating it, or by an
update that carries the resourceVersion it read once the holder's renewTime plus
leaseDurationSeconds has passed; optimistic concurrency makes two candidates' takeovers exclusive.
Only administrators (controllers run as such) write leases.
"""

from __future__ import annotations

from pydantic import Field

from nodus.api.kinds.job.base import JobModel
from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery.fieldpath import FieldError, Path


class LeaseSpec(JobModel):
    """LeaseSpec names the current holder and how long its claim lasts."""

    acquire_time: str | None = Field(None, description="AcquireTime is when the current holder took the lease.")
    holder_identity: str | None = Field(None, description="HolderIdentity is the leader; empty when released.")
    lease_duration_seconds: int | None = Field(
        None, ge=1, description="LeaseDurationSeconds is how long others wait after renewTime before taking over."
    )
    lease_transitions: int | None = Field(None, ge=0, description="LeaseTransitions counts changes of holder.")
    renew_time: str | None = Field(None, description="RenewTime is the holder's last renewal.")


class LeaseStrategy(Strategy):
    def validate(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(LeaseSpec, obj.get("spec") or {}, Path("spec"))
        return errors


def _holder(obj: Object) -> str:
    return str((obj.get("spec") or {}).get("holderIdentity") or "")


LEASE = KindInfo(
    kind="Lease",
    plural="leases",
    singular="lease",
    namespaced=False,
    description="Lease elects one active leader among controller processes; the others stand by.",
    spec_model=LeaseSpec,
    status_model=None,
    strategy=LeaseStrategy(),
    printer_columns=(
        PrinterColumn("Holder", "string", ".spec.holderIdentity", "HolderIdentity is the leader.", value=_holder),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the lease was created."),
    ),
    has_status=False,
    user_writable=False,
)
