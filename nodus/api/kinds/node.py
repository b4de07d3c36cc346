"""Node (``nodes.nodus.dev/v1``, cluster-scoped): a host that runs Attempts.

A Node is created by the provisioner when the scheduler asks for new capacity on an offering (or by
an agent started by hand), brought up by the provider, registered and kept alive by its agent's
heartbeats, and marked ``Lost`` by the node lifecycle controller when the heartbeats lapse. Only
Nodus writes Nodes; everyone may read them. Unlike most kinds, a Node may be created with its
status: the provisioner records ``Booting`` in the same write that creates it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from nodus.api.kinds.job.base import JobModel
from nodus.api.kinds.job.status import Condition
from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery.fieldpath import FieldError, Path

NodePhase = Literal["Booting", "Ready", "Lost", "Failed", "Terminating"]


class NodeSpec(JobModel):
    """NodeSpec says which offering a host provides and whether new work may land on it."""

    offering: str = Field(min_length=1, description="Offering is the offering id this host provides.")
    provider: str | None = Field(None, description="Provider is the cloud provider that supplies the host.")
    unschedulable: bool | None = Field(None, description="Unschedulable keeps new attempts off the host.")


class NodeAddress(JobModel):
    """NodeAddress is one way to reach the host."""

    address: str = Field(min_length=1, description="Address is the address.")
    type: str = Field(min_length=1, description="Type is InternalIP, ExternalIP or Hostname.")


class NodeCapacity(JobModel):
    """NodeCapacity is what the host offers."""

    cpu: str | None = Field(None, description="CPU is the host's vCPU count.")
    disk: str | None = Field(None, description="Disk is the host's ephemeral disk.")
    gpus: int | None = Field(None, ge=0, description="GPUs is the number of accelerators.")
    memory: str | None = Field(None, description="Memory is the host memory.")


class NodeStatus(JobModel):
    """NodeStatus is what Nodus observed about a host."""

    addresses: list[NodeAddress] | None = Field(None, description="Addresses reach the host.")
    agent_version: str | None = Field(None, description="AgentVersion is the node agent's version.")
    boot_time: str | None = Field(None, description="BootTime is when provisioning started.")
    capacity: NodeCapacity | None = Field(None, description="Capacity is what the host offers.")
    conditions: list[Condition] | None = Field(None, description="Conditions include Ready.")
    gpu_indexes: list[int] | None = Field(None, alias="gpuIndexes", description="GPUIndexes are the host's GPUs.")
    heartbeat_time: str | None = Field(None, description="HeartbeatTime is the agent's last heartbeat.")
    idle_since: str | None = Field(None, description="IdleSince is when the host's last attempt ended.")
    message: str | None = Field(None, description="Message explains the phase.")
    phase: NodePhase | None = Field(None, description="Phase is Booting, Ready, Lost, Failed or Terminating.")
    ready_time: str | None = Field(None, description="ReadyTime is when the agent registered.")
    reason: str | None = Field(None, description="Reason is a CamelCase code for the phase.")
    runtime: str | None = Field(None, description="Runtime is the agent's sandbox: bubblewrap or unsandboxed.")
    warm_until: str | None = Field(None, description="WarmUntil is when idle capacity is released.")


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
