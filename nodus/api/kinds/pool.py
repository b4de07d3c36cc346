"""Pool (``pools.nodus.dev/v1``): hosts a project brings itself (ADR 0047).

A Pool is a project's own capacity: machines its Owners join with a join token (``POST
.../pools/NAME/jointokens``, served by ``nodus.api.http.jointokens``). Each joined host is a Node with
``spec.pool: {project, name}`` and the labels ``nodus.dev/pool`` and ``nodus.dev/pool-project`` (plus
``spec.nodeLabels``); Jobs of the project reach them with ``placement.pool``.

* ``spec.description`` (at most 256 characters), ``spec.maxHosts`` (at least 1; absent: no limit; the
  credential exchange refuses a host beyond it) and ``spec.nodeLabels`` (labels put on every Node that
  joins; ``nodus.dev/`` keys are Nodus's own and refused).
* Only the project's Owners create, update and delete Pools (``owners_write``): a Pool and its tokens
  let machines into the project. Editors and Viewers read them.
* ``status`` is the pools controller's count of the pool's hosts and GPUs (``nodus.controllers.pools``).
* Deleting a Pool deletes its Nodes (revoking the hosts' credentials): the server puts the
  ``nodus.dev/pool-hosts`` finalizer on every Pool, and the pools controller lifts it once the pool's
  Nodes are gone.

The name is an RFC 1123 label (at most 63 characters), since it is a label value on its Nodes.
"""

from __future__ import annotations

from typing import Any

from nodus.api import objectmeta
from nodus.api.kinds.modeling import validate_model
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apis.v1 import labels
from nodus.apis.v1.pool import PoolSpec, PoolStatus

NODUS_PREFIX = "nodus.dev/"


class PoolStrategy(Strategy):
    """A Pool is spec written by its project's Owners; status is the pools controller's; the server keeps
    the ``nodus.dev/pool-hosts`` finalizer on it until it is being deleted."""

    def prepare_for_create(self, obj: Object) -> None:
        super().prepare_for_create(obj)
        obj.setdefault("spec", {})
        finalizers = obj["metadata"].setdefault("finalizers", [])
        if isinstance(finalizers, list) and labels.POOL_HOSTS not in finalizers:
            finalizers.append(labels.POOL_HOSTS)

    def prepare_for_update(self, new: Object, old: Object) -> None:
        super().prepare_for_update(new, old)
        # Until deletion, the finalizer stays (a replace without it is not a way to strand the pool's hosts).
        had = labels.POOL_HOSTS in (old["metadata"].get("finalizers") or [])
        finalizers = new["metadata"].setdefault("finalizers", [])
        keep = had and not old["metadata"].get("deletionTimestamp")
        if keep and isinstance(finalizers, list) and labels.POOL_HOSTS not in finalizers:
            finalizers.append(labels.POOL_HOSTS)

    def validate(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(PoolSpec, obj.get("spec") or {}, Path("spec"))
        node_labels = (obj.get("spec") or {}).get("nodeLabels")
        if isinstance(node_labels, dict):
            path = Path("spec", "nodeLabels")
            errors += objectmeta.validate_labels(node_labels, path)
            for key in node_labels:
                if str(key).startswith(NODUS_PREFIX):
                    errors.append(
                        fieldpath.invalid(
                            path.key(str(key)),
                            key,
                            f"keys under {NODUS_PREFIX} are Nodus's own (every pool Node gets {labels.POOL} and "
                            f"{labels.POOL_PROJECT}); use a key of your own domain, such as example.com/rack",
                        )
                    )
        return errors

    def validate_status(self, obj: Object) -> list[FieldError]:
        _, errors = validate_model(PoolStatus, obj.get("status") or {}, Path("status"))
        return errors


def _status(obj: Object) -> dict[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, dict) else {}


def _hosts(obj: Object) -> str:
    status = _status(obj)
    return f"{status.get('readyHosts') or 0}/{status.get('hosts') or 0}"


def _gpus(obj: Object) -> str:
    status = _status(obj)
    return f"{status.get('freeGPUs') or 0}/{status.get('totalGPUs') or 0}"


def _max(obj: Object) -> str:
    spec = obj.get("spec") or {}
    return str(spec.get("maxHosts")) if isinstance(spec, dict) and spec.get("maxHosts") else "<none>"


POOL = KindInfo(
    kind="Pool",
    plural="pools",
    singular="pool",
    namespaced=True,
    description="Pool is hosts a project brings itself: its Owners mint join tokens (POST .../pools/NAME/jointokens) "
    "and each host that joins with one becomes a Node of the pool, which only the project's Jobs with "
    "placement.pool run on. Deleting the Pool deletes its Nodes.",
    spec_model=PoolSpec,
    status_model=PoolStatus,
    strategy=PoolStrategy(),
    printer_columns=(
        PrinterColumn("Hosts", "string", ".status.readyHosts", "Ready hosts / all hosts of the pool.", value=_hosts),
        PrinterColumn("GPUs", "string", ".status.freeGPUs", "Free GPUs / GPUs of the pool's Ready hosts.", value=_gpus),
        PrinterColumn(
            "Busy",
            "integer",
            ".status.busyHosts",
            "BusyHosts is the Ready hosts running an attempt.",
            value=lambda obj: _status(obj).get("busyHosts") or 0,
        ),
        PrinterColumn("Max", "string", ".spec.maxHosts", "MaxHosts is the most hosts that may join.", value=_max),
        PrinterColumn("Last-Join", "date", ".status.lastJoinTime", "LastJoinTime is when a host last joined."),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the pool was created."),
        PrinterColumn("Last-Node", "string", ".status.lastJoinNode", "The Node that joined last.", priority=1),
        PrinterColumn("Description", "string", ".spec.description", "Description of the pool.", priority=1),
    ),
    short_names=("pl",),
    categories=("nodus",),
    dns_label_names=True,
    owners_write=True,
)
