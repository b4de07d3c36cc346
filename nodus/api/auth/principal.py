"""The authenticated caller, and the identities Nodus itself uses.

Besides users (from the token file or the front proxy), four kinds of caller are Nodus's own, told
apart by their groups (ADR 0035):

* administrators, group ``system:masters``: everything;
* the controllers, group ``system:nodus:controllers``: exactly the rights the controllers use;
* a node agent, user ``system:node:<node name>`` in group ``system:nodes``: authenticated by a node
  credential the API server issued, and limited by the node authorizer to its Node and its Attempts;
* a host joining, user ``system:bootstrap:<token id>`` in group ``system:bootstrappers``:
  authenticated by a bootstrap token, and able only to exchange it for a node credential.

Node and bootstrap identities are minted by the API server only; a token file may not claim them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ADMIN_GROUP = "system:masters"
AUTHENTICATED_GROUP = "system:authenticated"
CONTROLLERS_GROUP = "system:nodus:controllers"
NODES_GROUP = "system:nodes"
NODE_USER_PREFIX = "system:node:"
BOOTSTRAPPERS_GROUP = "system:bootstrappers"
BOOTSTRAP_USER_PREFIX = "system:bootstrap:"
MONITORING_GROUP = "system:monitoring"
# Groups only the API server grants: a static token or a front proxy asserting them is not believed.
SERVER_GRANTED_GROUPS = frozenset({NODES_GROUP, BOOTSTRAPPERS_GROUP})
SERVER_GRANTED_USER_PREFIXES = (NODE_USER_PREFIX, BOOTSTRAP_USER_PREFIX)


@dataclass(frozen=True)
class Principal:
    user: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def is_admin(self) -> bool:
        return ADMIN_GROUP in self.groups

    @property
    def is_controller(self) -> bool:
        return CONTROLLERS_GROUP in self.groups

    @property
    def node_name(self) -> str | None:
        """The Node this caller is the agent of, when it authenticated with a node credential."""
        if NODES_GROUP in self.groups and self.user.startswith(NODE_USER_PREFIX):
            return self.user[len(NODE_USER_PREFIX) :]
        return None

    @property
    def bootstrap_token(self) -> str | None:
        """The bootstrap token id this caller authenticated with, if it did."""
        if BOOTSTRAPPERS_GROUP in self.groups and self.user.startswith(BOOTSTRAP_USER_PREFIX):
            return self.user[len(BOOTSTRAP_USER_PREFIX) :]
        return None

    @property
    def is_system(self) -> bool:
        """Whether the caller is one of Nodus's own identities (not a user governed by project roles)."""
        return self.is_admin or self.is_controller or self.node_name is not None or self.bootstrap_token is not None


def claims_server_identity(user: str, groups: tuple[str, ...] | list[str]) -> str | None:
    """Why a user name or group set that a token file or front proxy gives may not be believed, or None."""
    if user.startswith(SERVER_GRANTED_USER_PREFIXES):
        return f'user name "{user}" is reserved for identities the API server issues (nodes, bootstrap tokens)'
    if user.startswith("group:"):
        return f'user name "{user}" starts with "group:", which Project members use to name groups'
    claimed = sorted(SERVER_GRANTED_GROUPS.intersection(groups))
    if claimed:
        return f"group {claimed[0]} is granted only by the API server (node credentials, bootstrap tokens)"
    return None
