"""The gang parts of an Attempt: what a rank is told (``spec.gang``) and what its agent reports (``status.gang``).

A distributed Job runs each epoch as one Attempt per rank, ``<job>-<index>-<n>-r<rank>`` (ADR 0046 §3).
Every rank's spec names its peers (``members``, by rank), so an agent finds them without asking the
Job; the agents assemble the gang through the Attempts' status alone: each registers its mesh
endpoint (``address``), rank 0 also the program's rendezvous port, each probes its peers and says so
(``probedTime``), and none starts the command before every rank has probed. The Job controller reads
the same fields to report ``status.gang`` and to time the assembly out.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nodus.apis.v1.base import WireModel
from nodus.apis.v1.scalars import Duration, Time

Launcher = Literal["Plain", "Torchrun", "Ray", "Verl", "Accelerate", "Deepspeed"]
PathClass = Literal["Private", "Public", "Direct", "Relayed"]


class GangShard(WireModel):
    """GangShard is one rank's part of a committed gang checkpoint."""

    attempt: str = Field(min_length=1, description="Attempt is the rank attempt that uploaded it.")
    manifest: str = Field(min_length=1, description="Manifest is the sha256:<hex> blob of the shard's manifest.")
    rank: int = Field(ge=0, description="Rank is the rank that wrote it.")
    seq: int = Field(ge=1, description="Seq is the shard's sequence number within its attempt.")
    size: int | None = Field(None, ge=0, description="Size is the shard's size in bytes.")


class AttemptGangSpec(WireModel):
    """AttemptGangSpec tells one rank the shape of its gang epoch and who its peers are."""

    epoch: int = Field(ge=1, description="Epoch is the gang epoch (the attempt number of every rank).")
    gpus_per_node: int = Field(ge=0, alias="gpusPerNode", description="GPUsPerNode is the GPUs on each node.")
    launcher: Launcher = Field("Plain", description="Launcher is how the command is started on each node.")
    members: list[str] = Field(min_length=2, description="Members are the epoch's rank attempts, by rank.")
    network: Literal["Colocated", "Regional", "Global"] = Field(
        "Colocated", description="Network is the locality every member is placed under."
    )
    restore_shards: list[GangShard] | None = Field(
        None,
        description="RestoreShards are every rank's shard of the gang checkpoint to restore, restored together "
        "before the command starts (a torch.distributed.checkpoint directory needs rank 0's metadata too).",
    )
    size: int = Field(ge=2, description="Size is the number of ranks.")
    startup_timeout: Duration = Field("15m", description="StartupTimeout is the assembly budget of the epoch.")
    transport: Literal["Direct", "Auto"] = Field(
        "Direct", description="Transport is Direct (private or direct paths only) or Auto (relayed allowed)."
    )


class MeshProbe(WireModel):
    """MeshProbe is what one rank measured of its peers."""

    bus_gbps: str | None = Field(
        None, alias="busGbps", description="BusGbps is the bandwidth to the next rank of the ring, in Gbit/s."
    )
    measured_time: Time | None = Field(None, description="MeasuredTime is when it was measured.")
    rtt_ms: str | None = Field(None, alias="rttMs", description="RTTMs is the slowest round trip to a peer, in ms.")


class CommittedShard(WireModel):
    """CommittedShard is a checkpoint shard this rank uploaded, under the gang request it answered."""

    manifest: str = Field(min_length=1, description="Manifest is the sha256:<hex> blob of the shard's manifest.")
    request: str = Field(min_length=1, description="Request is the gang checkpoint request it answered.")
    seq: int = Field(ge=1, description="Seq is the shard's sequence number within its attempt.")
    size: int | None = Field(None, ge=0, description="Size is the shard's size in bytes.")
    time: Time | None = Field(None, description="Time is when it committed.")


class AttemptGangStatus(WireModel):
    """AttemptGangStatus is one rank's part of the assembly, as its agent reports it."""

    address: str | None = Field(None, description="Address is the rank's mesh endpoint, host:port.")
    failure: str | None = Field(None, description="Failure says why this rank could not mesh with its peers.")
    notice: Time | None = Field(
        None,
        description="Notice is when this rank's host was given notice (a preemption): the controller then asks every "
        "rank for a gang checkpoint under this time, and this rank stops once its own shard of it is committed.",
    )
    probe: MeshProbe | None = Field(None, description="Probe is what this rank measured.")
    probed_time: Time | None = Field(None, description="ProbedTime is when this rank finished probing its peers.")
    registered_time: Time | None = Field(None, description="RegisteredTime is when the rank registered.")
    rendezvous: str | None = Field(
        None, description="Rendezvous is rank 0's address for the program's own rendezvous, host:port (rank 0 only)."
    )
    shards: list[CommittedShard] | None = Field(
        None,
        max_length=8,
        description="Shards are this rank's latest committed checkpoint shards (the last few), by gang request: a gang "
        "checkpoint is committed once every rank of the epoch lists one for the same request.",
    )
