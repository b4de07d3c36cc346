"""The controllers' rights: exactly what ``nodus controllers`` uses, and nothing else (ADR 0035).

The controllers authenticate as a member of ``system:nodus:controllers`` (``nodus dev`` gives them a
token of their own; in production, a token file line or a front-proxy group). The table below is
every (resource, subresource) they read or write and with which verbs, taken from the controllers'
code: the Job controller, scheduler, provisioner, node lifecycle, billing, budgets, project credits,
Secret pins and the simulated cloud. What is not in it is refused, notably: writing a Project's spec,
Volumes, Connections or a Budget's spec, granting credits, and reading Secret values or blob bytes. The
simulated cloud's hosts never run with the controllers' token: each gets a BootstrapToken bound to its
node name.

When a controller needs a new right, it is added here with the reason; a test reads this table
against what the controllers do in the end-to-end suite (every 403 there is a missing line).
"""

from __future__ import annotations

from nodus.api.auth.nodes import Attributes, refuse

READ = frozenset({"get", "list", "watch"})
STATUS = frozenset({"get", "update", "patch"})

# resource -> subresource ("" for the object itself) -> verbs
RIGHTS: dict[str, dict[str, frozenset[str]]] = {
    # Finalizers and the requested-action bookkeeping on the Job; deletion after ttlSecondsAfterFinished. The
    # Pipeline controller creates stage Jobs and sets their spec.state (a Pipeline's suspend or cancel, ADR 0052).
    "jobs": {"": READ | {"create", "update", "patch", "delete"}, "status": STATUS},
    # The Pipeline controller writes each Pipeline's status.
    "pipelines": {"": READ, "status": STATUS},
    # Attempts are the Job controller's children: created, stopped (spec.stop), deleted with their Job.
    "attempts": {"": READ | {"create", "update", "patch", "delete"}, "status": STATUS},
    # The provisioner creates Booting Nodes, the lifecycle controller marks them Lost and deletes them.
    "nodes": {"": READ | {"create", "update", "patch", "delete"}, "status": STATUS},
    # The simulated cloud publishes its capacity into each Offering's status.
    "offerings": {"": READ, "status": STATUS},
    # Leader election; the node lifecycle controller creates each Node's heartbeat Lease and deletes it once the
    # Node is gone (ADR 0055).
    "leases": {"": READ | {"create", "update", "patch", "delete"}},
    # Projects are watched for credit grants (waiting attempts and owed storage charges resume); their
    # status.credits is the credits reconciler's copy of the ledger (ADR 0044).
    "projects": {"": READ, "status": STATUS},
    # The pinned-versions annotation that keeps a Secret's versions a Job still needs.
    "secrets": {"": READ | {"patch"}},
    "volumes": {"": READ},
    "workspaces": {"": READ},
    "connections": {"": READ},
    "budgets": {"": READ, "status": STATUS},
    # The pools controller writes each Pool's status and lifts its nodus.dev/pool-hosts finalizer once the pool's
    # Nodes are deleted (ADR 0047).
    "pools": {"": READ | {"update", "patch"}, "status": STATUS},
    # One bootstrap token per simulated host (bound to its node name), deleted once the host is gone.
    "bootstraptokens": {"": READ | {"create", "delete"}},
    # The ledger door: holds and charges of attempts, budget and storage state.
    "ledger": {
        "holds": frozenset({"get"}),
        "postings": frozenset({"create"}),
        "budgets": frozenset({"get"}),
        "storage": frozenset({"get"}),
    },
}


def authorize(attrs: Attributes) -> None:
    """Return when the controllers may do this; raise a 403 Status otherwise."""
    verbs = RIGHTS.get(attrs.resource, {}).get(attrs.subresource, frozenset())
    if attrs.verb in verbs:
        return
    raise refuse(
        attrs,
        "The controllers' identity (group system:nodus:controllers) has only the rights the controllers use; "
        "an administrator does the rest (group system:masters).",
        why="not among the controllers' rights",
    )
