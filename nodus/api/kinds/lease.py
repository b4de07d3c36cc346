"""Lease (``leases.nodus.dev/v1``, cluster-scoped): leader election, and node heartbeats.

Shaped like ``coordination.k8s.io/v1`` Lease. A candidate takes the lease by creating it, or by an
update that carries the resourceVersion it read once the holder's renewTime plus
leaseDurationSeconds has passed; optimistic concurrency makes two candidates' takeovers exclusive.
Only administrators (controllers run as such) write leases.

Each Node also has a Lease, ``node.<node name>``, labelled ``nodus.dev/node``: the node lifecycle controller creates
it and the node's agent renews it every heartbeat interval, the one write it may make to a Lease (ADR 0055).
"""

from __future__ import annotations

from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1.lease import LeaseSpec


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
    description="Lease elects one active leader among controller processes (the others stand by), and carries "
    "each node agent's heartbeats (node.<node name>).",
    spec_model=LeaseSpec,
    status_model=None,
    strategy=LeaseStrategy(),
    printer_columns=(
        PrinterColumn("Holder", "string", ".spec.holderIdentity", "HolderIdentity is the leader.", value=_holder),
        PrinterColumn("Renewed", "date", ".spec.renewTime", "RenewTime is the holder's last renewal."),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the lease was created."),
    ),
    has_status=False,
    user_writable=False,
)
