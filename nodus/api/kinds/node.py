"""Node (``nodes.nodus.dev/v1``, cluster-scoped): a host that runs Attempts.

A Node is created by the provisioner when the scheduler asks for new capacity on an offering (or by
an agent started by hand), brought up by the provider, registered and kept alive by its agent's
heartbeats, and marked ``Lost`` by the node lifecycle controller when the heartbeats lapse. Only
Nodus writes Nodes; everyone may read them. Unlike most kinds, a Node may be created with its
status: the provisioner records ``Booting`` in the same write that creates it.
"""

from __future__ import annotations

from typing import Any

from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1.node import NodeSpec, NodeStatus


class NodeStrategy(Strategy):
    def prepare_for_create(self, obj: Object) -> None:
        status = obj.get("status")
        super().prepare_for_create(obj)
        if isinstance(status, dict):
            obj["status"] = status

    def validate(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(NodeSpec, obj.get("spec"), Path("spec"))
        if isinstance(obj.get("status"), dict):
            errors.extend(self.validate_status(obj))
        return errors

    def validate_status(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(NodeStatus, obj.get("status") or {}, Path("status"))
        return errors


def _ready(obj: Object) -> str:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return str(condition.get("status"))
    return "Unknown"


def _gpus(obj: Object) -> Any:
    return ((obj.get("status") or {}).get("capacity") or {}).get("gpus")


NODE = KindInfo(
    kind="Node",
    plural="nodes",
    singular="node",
    namespaced=False,
    description="Node is a host that runs Attempts: it provides one Offering, is brought up by a provider and kept "
    "alive by its agent's heartbeats. Only Nodus writes Nodes.",
    spec_model=NodeSpec,
    status_model=NodeStatus,
    strategy=NodeStrategy(),
    printer_columns=(
        PrinterColumn("Offering", "string", ".spec.offering", "Offering is the offering this host provides."),
        PrinterColumn("Phase", "string", ".status.phase", "Phase is Booting, Ready, Lost, Failed or Terminating."),
        PrinterColumn("Ready", "string", ".status.conditions[?(@.type=='Ready')].status", "Ready.", value=_ready),
        PrinterColumn("GPUs", "integer", ".status.capacity.gpus", "GPUs on the host.", value=_gpus),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the node was created."),
        PrinterColumn("Heartbeat", "date", ".status.heartbeatTime", "The agent's last heartbeat.", priority=1),
        PrinterColumn("Runtime", "string", ".status.runtime", "The agent's sandbox.", priority=1),
        PrinterColumn("Reason", "string", ".status.reason", "Reason explains the phase.", priority=1),
    ),
    short_names=("nn",),
    categories=("nodus",),
    selectable_fields=("status.phase",),
    user_writable=False,
)
