"""Pool (``pools.nodus.dev``): hosts a project brings itself, joined with join tokens.

The wire models of the kind: what the API server validates and what clients read, defined once.
"""

from __future__ import annotations

from pydantic import Field

from nodus.apis.v1.base import WireModel
from nodus.apis.v1.jobstatus import Condition


class PoolSpec(WireModel):
    """PoolSpec says what a pool is for, how many hosts may join it and the labels its Nodes get."""

    description: str | None = Field(None, max_length=256, description="Description says what the pool is for.")
    max_hosts: int | None = Field(
        None, ge=1, description="MaxHosts is the most hosts that may be in the pool at once; absent: no limit."
    )
    node_labels: dict[str, str] | None = Field(
        None,
        description="NodeLabels are put on every Node that joins the pool; keys must not be in nodus.dev/.",
    )


class PoolGPUs(WireModel):
    """PoolGPUs counts one accelerator's GPUs in the pool."""

    accelerator: str | None = Field(
        None, description="Accelerator is the variant id, such as h100-sxm-80g; absent when not in the catalog."
    )
    family: str | None = Field(None, description="Family is the accelerator's family, such as H100.")
    total: int = Field(ge=0, description="Total is the GPUs of this accelerator on the pool's Ready hosts.")
    free: int = Field(ge=0, description="Free is those of them no unfinished attempt holds on a schedulable host.")


class PoolStatus(WireModel):
    """PoolStatus is what the pool holds now, as the pools controller counts it from its Nodes and Attempts."""

    hosts: int | None = Field(None, ge=0, description="Hosts is the pool's Nodes, in every phase.")
    hosts_by_phase: dict[str, int] | None = Field(None, description="HostsByPhase counts the pool's Nodes by phase.")
    ready_hosts: int | None = Field(None, ge=0, description="ReadyHosts is the pool's Ready Nodes.")
    busy_hosts: int | None = Field(None, ge=0, description="BusyHosts is the Ready Nodes running an attempt.")
    gpus: list[PoolGPUs] | None = Field(None, description="GPUs counts the Ready hosts' GPUs by accelerator.")
    free_gpus: int | None = Field(
        None, ge=0, alias="freeGPUs", description="FreeGPUs is the GPUs no attempt holds on Ready, schedulable hosts."
    )
    total_gpus: int | None = Field(None, ge=0, alias="totalGPUs", description="TotalGPUs is the Ready hosts' GPUs.")
    last_join_time: str | None = Field(None, description="LastJoinTime is when a host last joined the pool.")
    last_join_node: str | None = Field(None, description="LastJoinNode is the Node that joined last.")
    observed_generation: int | None = Field(
        None, ge=0, description="ObservedGeneration is the metadata.generation the status was computed from."
    )
    conditions: list[Condition] | None = Field(None, description="Conditions include Ready (a host can take work).")
