"""Node (``nodes.nodus.dev``): one host, its shape and addresses, as its agent registers and reports it.

The wire models of the kind: what the API server validates and what clients read, defined once.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.apis.v1.base import WireModel
from nodus.apis.v1.jobstatus import Condition
from nodus.apis.v1.phases import NodePhase


class NodePool(WireModel):
    """NodePool names the Pool a host joined."""

    project: str = Field(min_length=1, description="Project is the pool's project.")
    name: str = Field(min_length=1, description="Name is the pool's name.")


class NodeSpec(WireModel):
    """NodeSpec says which offering a host provides, or which Pool it joined, and whether new work may land on it.

    Exactly one of ``offering`` and ``pool`` is set (the Node strategy checks it)."""

    offering: str | None = Field(
        None, min_length=1, description="Offering is the offering id this host provides (absent on a pool host)."
    )
    pool: NodePool | None = Field(
        None, description="Pool is the Pool the host joined with a join token (immutable); absent on offering hosts."
    )
    provider: str | None = Field(None, description="Provider is the cloud provider that supplies the host.")
    unschedulable: bool | None = Field(None, description="Unschedulable keeps new attempts off the host.")


class NodeAddress(WireModel):
    """NodeAddress is one way to reach the host."""

    address: str = Field(min_length=1, description="Address is the address.")
    type: str = Field(min_length=1, description="Type is InternalIP, ExternalIP or Hostname.")


class NodeCapacity(WireModel):
    """NodeCapacity is what the host offers: its offering's shape, or what a pool host's agent discovered."""

    accelerator: str | None = Field(
        None, description="Accelerator is the GPU variant id, such as h100-sxm-80g, when the model is in the catalog."
    )
    gpu_family: str | None = Field(None, description="GPUFamily is the GPUs' family, such as H100.")
    gpu_model: str | None = Field(None, description="GPUModel is the GPU name the driver reports.")
    gpu_memory: str | None = Field(None, description="GPUMemory is the memory of each GPU, such as 80Gi.")
    interconnect: Literal["nvlink", "pcie"] | None = Field(
        None, description="Interconnect joins the host's GPUs: nvlink or pcie; absent without GPUs."
    )
    cpu: str | None = Field(None, description="CPU is the host's vCPU count.")
    disk: str | None = Field(None, description="Disk is the host's ephemeral disk.")
    gpus: int | None = Field(None, ge=0, description="GPUs is the number of accelerators.")
    memory: str | None = Field(None, description="Memory is the host memory.")


class PreemptionNotice(WireModel):
    """PreemptionNotice is the provider's notice, as the host's agent read it, that the host is taken back."""

    time: str = Field(min_length=1, description="Time is when the provider takes the host away (RFC 3339).")
    action: str = Field(min_length=1, description="Action is what the provider then does: terminate, stop, ...")
    source: str = Field(min_length=1, description="Source is where the agent read it, such as aws-spot.")
    notice_time: str | None = Field(None, description="NoticeTime is when the agent read the notice.")


class NodeStatus(WireModel):
    """NodeStatus is what Nodus observed about a host."""

    addresses: list[NodeAddress] | None = Field(None, description="Addresses reach the host.")
    agent_version: str | None = Field(None, description="AgentVersion is the node agent's version.")
    boot_time: str | None = Field(None, description="BootTime is when provisioning started.")
    capacity: NodeCapacity | None = Field(None, description="Capacity is what the host offers.")
    conditions: list[Condition] | None = Field(None, description="Conditions include Ready.")
    gpu_indexes: list[int] | None = Field(None, alias="gpuIndexes", description="GPUIndexes are the host's GPUs.")
    heartbeat_time: str | None = Field(
        None,
        description="HeartbeatTime is the agent's last heartbeat written on the Node: at registration, and while "
        "its Lease does not exist yet. Renewals go to the Lease node.<name>.",
    )
    idle_since: str | None = Field(None, description="IdleSince is when the host's last attempt ended.")
    message: str | None = Field(None, description="Message explains the phase.")
    phase: NodePhase | None = Field(None, description="Phase is Booting, Ready, Lost, Failed or Terminating.")
    preemption_notice: PreemptionNotice | None = Field(
        None,
        description="PreemptionNotice is the provider's notice that it takes the host back (an EC2 spot interruption); "
        "the controllers turn it into phase Terminating with reason Preempted and its time as the deadline.",
    )
    ready_time: str | None = Field(None, description="ReadyTime is when the agent registered.")
    reason: str | None = Field(None, description="Reason is a CamelCase code for the phase.")
    runtime: str | None = Field(None, description="Runtime is the agent's sandbox: bubblewrap or unsandboxed.")
    warm_until: str | None = Field(None, description="WarmUntil is when idle capacity is released.")
