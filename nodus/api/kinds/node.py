"""Node (``nodes.nodus.dev/v1``, cluster-scoped): a host that runs Attempts.

A Node is created by the provisioner when the scheduler asks for new capacity on an offering (or by
an agent started by hand), brought up by the provider, registered and kept alive by its agent's
heartbeats (renewals of its Lease ``node.<name>``, ADR 0055), and marked ``Lost`` by the node lifecycle
controller when the heartbeats lapse. Only
Nodus writes Nodes; everyone may read them. Unlike most kinds, a Node may be created with its
status: the provisioner records ``Booting`` in the same write that creates it.

A Node provides exactly one of an Offering (``spec.offering``: a provider's host, or an agent started
by hand) and a Pool (``spec.pool``: a host a project brought, joined with the pool's join token, ADR
0047); a Node's ``spec.pool`` never changes.
"""

from __future__ import annotations

from typing import Any

from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1.lease import NODE_NAME_MAX
from nodus.apis.v1.node import NodeSpec, NodeStatus


class NodeStrategy(Strategy):
    def prepare_for_create(self, obj: Object) -> None:
        status = obj.get("status")
        super().prepare_for_create(obj)
        if isinstance(status, dict):
            obj["status"] = status

    def validate(self, obj: Object) -> list[FieldError]:
        spec, errors = validate_model(NodeSpec, obj.get("spec"), Path("spec"))
        if spec is not None and (spec.offering is None) == (spec.pool is None):
            errors.append(
                fieldpath.required(
                    Path("spec", "offering"),
                    "exactly one of spec.offering (the offering id the host provides) and spec.pool (the Pool it "
                    "joined: {project, name}) must be set",
                )
                if spec.offering is None
                else fieldpath.forbidden(
                    Path("spec", "pool"),
                    "a Node provides either an offering or a pool host's own shape, not both: drop spec.pool or "
                    "spec.offering",
                )
            )
        name = str((obj.get("metadata") or {}).get("name") or "")
        if len(name) > NODE_NAME_MAX:
            errors.append(
                fieldpath.invalid(
                    Path("metadata", "name"),
                    name,
                    f"must be no more than {NODE_NAME_MAX} characters: the node's heartbeat Lease is named "
                    f"node.<name> (ADR 0055); start the agent with a shorter --node-name",
                )
            )
        if isinstance(obj.get("status"), dict):
            errors.extend(self.validate_status(obj))
        return errors

    def validate_update(self, new: Object, old: Object) -> list[FieldError]:
        errors = self.validate(new)
        before, after = (o.get("spec") or {} for o in (old, new))
        if isinstance(before, dict) and isinstance(after, dict) and before.get("pool") != after.get("pool"):
            errors.append(
                fieldpath.forbidden(
                    Path("spec", "pool"), "is immutable: a host joins one Pool; delete the Node and join it again"
                )
            )
        return errors

    def validate_status(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(NodeStatus, obj.get("status") or {}, Path("status"))
        return errors


def _ready(obj: Object) -> str:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return str(condition.get("status"))
    return "Unknown"


def _source(obj: Object) -> str:
    """The offering a Node provides, or ``pool:<project>/<name>`` for a pool host."""
    spec = obj.get("spec") or {}
    pool = spec.get("pool")
    if isinstance(pool, dict):
        return f"pool:{pool.get('project')}/{pool.get('name')}"
    return str(spec.get("offering") or "")


def _gpus(obj: Object) -> Any:
    return ((obj.get("status") or {}).get("capacity") or {}).get("gpus")


NODE = KindInfo(
    kind="Node",
    plural="nodes",
    singular="node",
    namespaced=False,
    description="Node is a host that runs Attempts: it provides one Offering (brought up by a provider) or joined a "
    "project's Pool, and is kept alive by its agent's heartbeats (renewals of the Lease node.<name>). Only Nodus "
    "writes Nodes.",
    spec_model=NodeSpec,
    status_model=NodeStatus,
    strategy=NodeStrategy(),
    printer_columns=(
        PrinterColumn(
            "Offering",
            "string",
            ".spec.offering",
            "Offering is the offering this host provides, or pool:PROJECT/NAME for a pool host.",
            value=_source,
        ),
        PrinterColumn("Phase", "string", ".status.phase", "Phase is Booting, Ready, Lost, Failed or Terminating."),
        PrinterColumn("Ready", "string", ".status.conditions[?(@.type=='Ready')].status", "Ready.", value=_ready),
        PrinterColumn("GPUs", "integer", ".status.capacity.gpus", "GPUs on the host.", value=_gpus),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the node was created."),
        PrinterColumn("Ready Since", "date", ".status.readyTime", "When the agent registered.", priority=1),
        PrinterColumn("Runtime", "string", ".status.runtime", "The agent's sandbox.", priority=1),
        PrinterColumn("Reason", "string", ".status.reason", "Reason explains the phase.", priority=1),
    ),
    short_names=("nn",),
    categories=("nodus",),
    selectable_fields=("status.phase",),
    user_writable=False,
)
