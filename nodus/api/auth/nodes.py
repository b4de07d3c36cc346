"""The node authorizer: what a node agent (``system:node:<name>``) may do, point by point (ADR 0035).

Kubernetes' Node authorizer and NodeRestriction admission, for Nodus's kinds. A node's rights follow
the graph of what is bound to it: the Attempts labelled ``nodus.dev/node=<name>`` (the Job controller
labels an Attempt with its node when it binds it; users cannot write Attempts), and what those
Attempts pin. An Attempt is *active* until it reaches a terminal phase; a node reads pinned data only
for active Attempts.

A node may:

* read Offerings and Nodes (they describe the installation, as they do for every user);
* write the status of its own Node, and exchange its credential for a fresh one (rotation);
* read and renew its own heartbeat Lease, ``leases/node.<its name>`` (ADR 0055); the node lifecycle controller
  creates it;
* list and watch Attempts only with the label selector ``nodus.dev/node=<its name>`` (the server then
  shows it nothing else), and those of one gang epoch it runs a rank of (``nodus.dev/job=J,
  nodus.dev/gang-epoch=E`` in that project: its peers' mesh endpoints);
* get its Attempts, write their status and append their logs;
* read the Secret versions its active Attempts pin (by name, uid and version), the blobs they pin
  (inputs, Volume revisions, source, the checkpoint to restore and the chunks its manifest names, a
  Workspace revision and the chunks its manifest names),
  ask whether a blob exists and upload blobs in a project where it runs an active Attempt (outputs,
  checkpoints), and add a revision to a Volume an active Attempt mounts writable.

Everything else is refused with 403: other projects, Jobs, Secrets' objects, the ledger, credits,
other Nodes' writes, BootstrapTokens. Decisions read the graph through :class:`NodeGraph`, which may
cache; a refusal always reads it again first, so an Attempt bound a moment ago is never refused
because of a stale cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodus.api.auth.principal import Principal
from nodus.api.errors import APIError
from nodus.api.registry import GROUP
from nodus.apimachinery.selectors import LabelSelector, Operator, SelectorError, parse_label_selector
from nodus.apis.v1 import labels, phases
from nodus.apis.v1.lease import node_lease_name

Object = dict[str, Any]
READ_VERBS = frozenset({"get", "list", "watch"})


@dataclass(frozen=True)
class Attributes:
    """One request as an authorizer sees it (Kubernetes' ``authorizer.Attributes``).

    ``resource`` is a kind's plural or one of the API's other resources (``blobs``, ``ledger``,
    ``credits``, ``nodecredentials``); ``params`` carries what a subresource names besides the object
    (``uid`` and ``version`` of Secret values, ``digest`` and ``method`` of a blob)."""

    principal: Principal
    verb: str
    resource: str
    namespace: str | None = None
    name: str | None = None
    subresource: str = ""
    label_selector: str = ""
    field_selector: str = ""
    params: dict[str, str] = field(default_factory=dict)

    @property
    def shown_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


class NodeGraph(Protocol):
    """What the node authorizer reads: the Attempts bound to a node, and the chunks of a manifest."""

    async def attempts_on(self, node: str, fresh: bool = False) -> list[Object]:
        """Every Attempt labelled ``nodus.dev/node=<node>``, in every project; ``fresh`` skips any cache."""

    async def manifest_chunks(self, namespace: str, digest: str) -> frozenset[str]:
        """The chunk digests the checkpoint manifest blob ``digest`` names (empty when it is not one)."""


def refuse(attrs: Attributes, fix: str, why: str = "") -> APIError:
    """A 403 Status in kube-apiserver's words, naming the caller, verb, resource and where."""
    where = f' in project "{attrs.namespace}"' if attrs.namespace else " at the cluster scope"
    message = (
        f'{attrs.resource}.{GROUP} is forbidden: User "{attrs.principal.user}" cannot {attrs.verb} resource '
        f'"{attrs.shown_resource}" in API group "{GROUP}"{where}'
    )
    if why:
        message += f": {why}"
    return APIError("Forbidden", message, fix=fix, details={"group": GROUP, "kind": attrs.resource})


class NodeAuthorizer:
    def __init__(self, graph: NodeGraph) -> None:
        self._graph = graph

    async def authorize(self, attrs: Attributes) -> None:
        """Return when the node may; raise a 403 Status naming the rule otherwise."""
        node = attrs.principal.node_name
        assert node is not None
        if _static(attrs, node):
            return
        if await self._bound(attrs, node, fresh=False) or await self._bound(attrs, node, fresh=True):
            return
        raise refuse(
            attrs,
            f"A node agent reads and writes only its own Node, the Attempts bound to it and what they pin "
            f"(list Attempts with labelSelector {labels.NODE}={node}).",
            why=f"node {node} has no active Attempt that allows it",
        )

    async def _bound(self, attrs: Attributes, node: str, fresh: bool) -> bool:
        attempts = await self._graph.attempts_on(node, fresh=fresh)
        mine = [a for a in attempts if _spec(a).get("node") == node]
        here = [a for a in mine if a["metadata"].get("namespace") == attrs.namespace]
        active = [a for a in here if _phase(a) not in phases.ATTEMPT_FINISHED]
        resource, sub, verb = attrs.resource, attrs.subresource, attrs.verb
        if resource == "attempts":
            return _attempt_allowed(attrs, node, here, active)
        if resource == "secrets" and sub == "values" and verb == "get":
            return _secret_pinned(attrs, active)
        if resource == "blobs" and verb == "create":
            return bool(active)
        if resource == "blobs" and verb == "get":
            digest = attrs.params.get("digest", "")
            if attrs.params.get("method") == "HEAD":
                return bool(active)  # existence only: checkpoint uploads skip chunks the project has
            return await self._blob_pinned(attrs.namespace or "", digest, active)
        if resource == "volumes" and sub == "revisions" and verb == "create":
            return any(
                m.get("volume") == attrs.name and not m.get("readOnly")
                for a in active
                for m in _spec(a).get("volumes") or []
            )
        return False

    async def _blob_pinned(self, namespace: str, digest: str, active: list[Object]) -> bool:
        pinned, manifests = _pinned_blobs(active)
        if digest in pinned or digest in manifests:
            return True
        for manifest in manifests:
            if digest in await self._graph.manifest_chunks(namespace, manifest):
                return True
        return False


def _static(attrs: Attributes, node: str) -> bool:
    """The rights that do not depend on what is bound to the node."""
    resource, sub, verb = attrs.resource, attrs.subresource, attrs.verb
    if resource in ("offerings", "nodes") and not sub and verb in READ_VERBS:
        return True
    if resource == "nodes" and sub == "status" and verb in ("get", "update", "patch"):
        return attrs.name == node
    if resource == "nodecredentials" and verb == "create":
        return attrs.name == node
    if resource == "leases" and not sub and verb in ("get", "update", "patch"):
        return attrs.name == node_lease_name(node)
    if resource == "attempts" and verb in ("list", "watch") and not sub:
        return _selects_node(attrs.label_selector, node)
    return False


def _attempt_allowed(attrs: Attributes, node: str, here: list[Object], active: list[Object]) -> bool:
    verb, sub = attrs.verb, attrs.subresource
    if verb in ("list", "watch") and not sub:
        return attrs.namespace is not None and _selects_gang_of(attrs.label_selector, active)
    own = any(a["metadata"]["name"] == attrs.name for a in here)
    if verb == "get" and sub in ("", "status"):
        return own
    if sub == "status" and verb in ("update", "patch"):
        return own
    return sub == "log" and verb == "create" and own


def _selects_node(text: str, node: str) -> bool:
    """Whether the selector pins ``nodus.dev/node`` to exactly this node."""
    return _pinned_values(text, labels.NODE) == {node}


def _selects_gang_of(text: str, active: Iterable[Object]) -> bool:
    """Whether the selector pins one job and one gang epoch that an active Attempt of this node is a rank of."""
    jobs, epochs = _pinned_values(text, labels.JOB), _pinned_values(text, labels.GANG_EPOCH)
    if jobs is None or epochs is None or len(jobs) != 1 or len(epochs) != 1:
        return False
    for attempt in active:
        on_attempt = attempt["metadata"].get("labels") or {}
        if on_attempt.get(labels.JOB) in jobs and on_attempt.get(labels.GANG_EPOCH) in epochs:
            return True
    return False


def _pinned_values(text: str, key: str) -> set[str] | None:
    """The values a selector allows for ``key`` when it requires one of them (``=``, ``==``, ``in``), else None."""
    try:
        selector: LabelSelector = parse_label_selector(text)
    except SelectorError:
        return None
    found: set[str] | None = None
    for requirement in selector.requirements:
        if requirement.key == key and requirement.operator in (Operator.EQUALS, Operator.IN):
            values = set(requirement.values)
            found = values if found is None else found & values
    return found


def _secret_pinned(attrs: Attributes, active: list[Object]) -> bool:
    uid, version = attrs.params.get("uid"), attrs.params.get("version")
    if not uid or not version:
        return False  # a node reads a pinned version, never "the current one"
    for attempt in active:
        for pinned in _spec(attempt).get("secrets") or []:
            if (pinned.get("name"), str(pinned.get("uid")), str(pinned.get("version"))) == (attrs.name, uid, version):
                return True
    return False


def _pinned_blobs(active: list[Object]) -> tuple[set[str], set[str]]:
    """(blobs the Attempts pin, checkpoint manifests they restore)."""
    blobs: set[str] = set()
    manifests: set[str] = set()
    for attempt in active:
        spec = _spec(attempt)
        blobs.update(str(i["blob"]) for i in spec.get("inputs") or [] if i.get("blob"))
        # A Workspace revision pushed from a directory is a manifest: the node reads the chunks it names too.
        manifests.update(str(i["blob"]) for i in spec.get("inputs") or [] if i.get("blob") and i.get("workspace"))
        blobs.update(str(v["blob"]) for v in spec.get("volumes") or [] if v.get("blob"))
        if (spec.get("source") or {}).get("blob"):
            blobs.add(str(spec["source"]["blob"]))
        if (spec.get("restore") or {}).get("manifest"):
            manifests.add(str(spec["restore"]["manifest"]))
        for shard in (spec.get("gang") or {}).get("restoreShards") or []:
            if shard.get("manifest"):
                manifests.add(str(shard["manifest"]))
    return blobs, manifests


def _spec(obj: Object) -> Object:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _phase(obj: Object) -> str:
    return str((obj.get("status") or {}).get("phase") or "")
